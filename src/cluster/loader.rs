//! The loader and reconciler: every ban key read from Redis at start and every reconcile interval
//! (`SCAN` step by step, each value validated as local input), applied in batches.

use super::*;

impl Cluster {
    pub(super) async fn reconciler(self: Arc<Self>, stop: CancellationToken) {
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = self.reconcile.notified() => {}
            }
            // Own bans made while Redis was away first, so the others receive them too.
            let pending: Vec<Outgoing> = lock(&self.replay).drain(..).collect();
            if !pending.is_empty() {
                self.write(pending).await;
            }
            if self.cfg.share_bans {
                self.load().await;
            }
        }
    }

    /// Loads every live ban key of the other nodes, one `SCAN` step at a time: each step's keys
    /// are read (`GETRANGE` of at most [`MAX_MESSAGE_BYTES`] + 1 bytes, `PTTL`), checked as a
    /// received message is ([`Cluster::read_message`], and the key must be the one its ban is
    /// written under) and applied; what fails is rejected ([`Cluster::reject`]). `blockIp`
    /// entries are applied in batches of at least as many as applied before in this load (one
    /// snapshot of the set per batch), so a load of N keys costs O(N) time. A key carrying this
    /// node's `nodeId` is its own (written by it, or by an earlier run under the same `nodeId`)
    /// and is not applied.
    async fn load(&self) {
        let pattern = self.keys.ban_pattern();
        let mut cursor: u64 = 0;
        let mut blocks: Vec<BlockRequest> = Vec::new();
        let mut flushed: usize = 0;
        let mut names: HashMap<String, Arc<str>> = HashMap::new();
        loop {
            let Some((next, keys)) = self.scan_step(&pattern, cursor).await else {
                break;
            };
            if !keys.is_empty() {
                let mut pipe = redis::pipe();
                pipe.ignore_errors();
                for k in &keys {
                    pipe.cmd("GETRANGE")
                        .arg(k)
                        .arg(0)
                        .arg(MAX_MESSAGE_BYTES)
                        .cmd("PTTL")
                        .arg(k);
                }
                let Some(vals) = self
                    .run(|mut c| async move { pipe.query_async::<Vec<redis::Value>>(&mut c).await })
                    .await
                else {
                    break;
                };
                for (k, v) in keys.iter().zip(vals.chunks_exact(2)) {
                    self.load_one(k, &v[0], &v[1], &mut blocks, &mut names);
                }
            }
            if blocks.len() >= BATCH.max(flushed) {
                flushed += blocks.len();
                self.flush_blocks(&mut blocks);
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
        self.flush_blocks(&mut blocks);
    }

    /// One ban key of a load: `value` its `GETRANGE`, `pttl` its `PTTL`.
    pub(super) fn load_one(
        &self,
        key: &[u8],
        value: &redis::Value,
        pttl: &redis::Value,
        blocks: &mut Vec<BlockRequest>,
        names: &mut HashMap<String, Arc<str>>,
    ) {
        let shown = || {
            let k = String::from_utf8_lossy(key);
            let mut k: String = k.chars().take(160).collect();
            if k.len() < key.len() {
                k.push_str("...");
            }
            k
        };
        let pttl = match pttl {
            redis::Value::Int(-2) => return, // gone since the SCAN
            redis::Value::Int(t) => *t,
            _ => return self.reject(format!("ban key {}: no PTTL", shown())),
        };
        let bytes: &[u8] = match value {
            redis::Value::BulkString(b) => b,
            redis::Value::SimpleString(s) => s.as_bytes(),
            _ => return self.reject(format!("ban key {}: not a string", shown())),
        };
        if bytes.is_empty() && pttl < 0 {
            return; // gone between GETRANGE and PTTL
        }
        let mut m = match self.read_message(bytes) {
            Ok(m) => m,
            Err(e) => return self.reject(format!("ban key {}: {e}", shown())),
        };
        if m.op != Op::Ban {
            return self.reject(format!("ban key {}: holds an unban", shown()));
        }
        if self.keys.ban(m.kind, m.port, &m.net).as_bytes() != key {
            return self.reject(format!(
                "ban key {}: holds a ban of {} {} port {:?}, written under another key",
                shown(),
                m.kind.as_str(),
                m.net,
                m.port
            ));
        }
        if m.node == self.cfg.node_id {
            return;
        }
        // The key's remaining time; a ban with no TTL (until unblockIp) is refreshed by its
        // origin, so its key's PTTL is not its end.
        if m.ttl_ms.is_some() {
            if pttl <= 0 {
                return;
            }
            m.ttl_ms = Some(pttl as u64);
            if let Err(e) = m.check() {
                return self.reject(format!("ban key {}: PTTL: {e}", shown()));
            }
        }
        let node = match names.get(m.node.as_str()) {
            Some(n) => n.clone(),
            None => {
                let n: Arc<str> = Arc::from(m.node.as_str());
                if names.len() < 1024 {
                    names.insert(m.node.clone(), n.clone());
                }
                n
            }
        };
        self.stats.bans_received.fetch_add(1, Ordering::Relaxed);
        let ttl = m.ttl_ms;
        self.apply(&m, ttl, node, Some(blocks));
    }

    /// Applies the `blockIp` entries a load gathered, in one write.
    pub(super) fn flush_blocks(&self, blocks: &mut Vec<BlockRequest>) {
        if blocks.is_empty() {
            return;
        }
        if let Some(node) = self.node.get() {
            node.apply_blocks(std::mem::take(blocks), clock::now_ns());
        }
        blocks.clear();
    }

    /// One `SCAN` step from `cursor` over the keys matching `pattern` (`COUNT` [`SCAN_COUNT`],
    /// through the breaker): the next cursor (0: done) and the key names as bytes.
    pub(super) async fn scan_step(
        &self,
        pattern: &str,
        cursor: u64,
    ) -> Option<(u64, Vec<Vec<u8>>)> {
        let pat = pattern.to_string();
        self.run(|mut c| async move {
            redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(pat)
                .arg("COUNT")
                .arg(SCAN_COUNT)
                .query_async::<(u64, Vec<Vec<u8>>)>(&mut c)
                .await
        })
        .await
    }

    /// Every key matching `pattern` whose name is UTF-8 ([`Cluster::scan_step`] until the
    /// cursor comes back to 0).
    pub(super) async fn scan(&self, pattern: &str) -> Option<Vec<String>> {
        let mut out = Vec::new();
        let mut cursor: u64 = 0;
        loop {
            let (next, keys) = self.scan_step(pattern, cursor).await?;
            out.extend(keys.into_iter().filter_map(|k| String::from_utf8(k).ok()));
            if next == 0 {
                return Some(out);
            }
            cursor = next;
        }
    }
}
