//! The subscriber: the ban channel's messages, validated as local input (rejections counted and
//! reported once a second), this node's own echoes skipped, the rest applied through [`Node`].

use super::*;

impl Cluster {
    /// A ban message (channel payload or ban key value) as read from Redis: at most
    /// [`MAX_MESSAGE_BYTES`], a [`BanMessage`] whose `net` is canonical, passing
    /// [`BanMessage::check`]. `Err`: why not.
    pub(super) fn read_message(&self, bytes: &[u8]) -> Result<BanMessage, String> {
        if bytes.len() > MAX_MESSAGE_BYTES {
            return Err(format!(
                "more than {MAX_MESSAGE_BYTES} bytes ({}{})",
                bytes.len(),
                if bytes.len() == MAX_MESSAGE_BYTES + 1 {
                    "+"
                } else {
                    ""
                }
            ));
        }
        let m: BanMessage =
            serde_json::from_slice(bytes).map_err(|e| format!("not a ban message: {e}"))?;
        m.check()?;
        Ok(m)
    }

    /// Counts a message or ban key read from Redis that failed validation (dropped); `why` is
    /// kept for the next `cluster_message_rejected` event when it is the first since the last.
    pub(super) fn reject(&self, why: String) {
        self.stats.rejected.fetch_add(1, Ordering::Relaxed);
        let mut r = lock(&self.rejects);
        r.count += 1;
        if r.first.is_none() {
            r.first = Some(why);
        }
    }

    /// Emits one `cluster_message_rejected` for the rejections since the last one, if any (the
    /// health task, every [`REJECT_REPORT_MS`]).
    pub(super) fn report_rejects(&self) {
        let (count, first) = {
            let mut r = lock(&self.rejects);
            (std::mem::take(&mut r.count), r.first.take())
        };
        if count == 0 {
            return;
        }
        if let Some(n) = self.node.get() {
            n.rejected(format!(
                "{count} ban message(s) from Redis rejected (metrics().cluster.rejectedMessages); \
                 the first: {}",
                first.unwrap_or_default()
            ));
        }
    }

    /// This node is about to publish `payload`: its echo on the ban channel is expected.
    pub(super) fn await_echo(&self, payload: &[u8]) {
        let h = self.echo_hasher.hash_one(payload);
        let mut e = lock(&self.echoes);
        if e.order.len() >= ECHOES_KEPT {
            if let Some(old) = e.order.pop_front() {
                e.awaited.remove(&old);
            }
        }
        if e.awaited.insert(h) {
            e.order.push_back(h);
        }
    }

    /// Whether `payload` is the echo of a message this node published (each echo is taken once).
    fn echoed(&self, payload: &[u8]) -> bool {
        let h = self.echo_hasher.hash_one(payload);
        lock(&self.echoes).awaited.remove(&h)
    }

    pub(super) async fn subscriber(self: Arc<Self>, stop: CancellationToken) {
        let connect = Duration::from_millis(self.cfg.redis.connect_timeout_ms);
        let mut backoff = Duration::from_millis(100);
        let channel = self.keys.channel();
        loop {
            if stop.is_cancelled() {
                return;
            }
            let ps = tokio::select! {
                _ = stop.cancelled() => return,
                r = tokio::time::timeout(connect, self.client.get_async_pubsub()) => r,
            };
            if let Ok(Ok(mut ps)) = ps {
                let sub = tokio::time::timeout(connect, ps.subscribe(&channel)).await;
                if let Ok(Ok(())) = sub {
                    backoff = Duration::from_millis(100);
                    self.stats.subscribed.store(true, Ordering::Relaxed);
                    self.reconcile.notify_one();
                    let mut stream = ps.on_message();
                    loop {
                        let m = tokio::select! {
                            _ = stop.cancelled() => return,
                            m = stream.next() => m,
                        };
                        match m {
                            Some(m) => self.receive(m.get_payload_bytes()),
                            None => break,
                        }
                    }
                    self.stats.subscribed.store(false, Ordering::Relaxed);
                }
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(Duration::from_secs(2));
        }
    }

    /// One ban-channel message: read and checked ([`Cluster::read_message`]), else rejected.
    /// A message naming this node's `nodeId` is applied by no one: it is the echo of one this
    /// node published (expected, silent) or it is not, and then it is rejected — Redis does not
    /// authenticate senders, so `node` is only what the message claims; a ban is attributed
    /// (`blockedIps({detail:true}).node`) to the valid `nodeId`, other than this node's, that it
    /// names.
    pub(super) fn receive(&self, payload: &[u8]) {
        let m = match self.read_message(payload) {
            Ok(m) => m,
            Err(e) => return self.reject(format!("ban channel: {e}")),
        };
        if m.node == self.cfg.node_id {
            if !self.echoed(payload) {
                self.reject(format!(
                    "ban channel: a message naming this node ({:?}) that it did not publish",
                    m.node
                ));
            }
            return;
        }
        self.stats.bans_received.fetch_add(1, Ordering::Relaxed);
        {
            let mut d = lock(&self.stats.delays_us);
            if d.len() >= DELAY_SAMPLES {
                d.pop_front();
            }
            d.push_back(wall_us().saturating_sub(m.sent_us));
        }
        let node: Arc<str> = Arc::from(m.node.as_str());
        self.apply(&m, m.ttl_ms, node, None);
    }

    /// Applies another node's ban (or unban), checked already, with `ttl_ms` left to this node's
    /// engines, attributed to `node`. A ban for a port this node does not serve is ignored; one
    /// without a port applies to every listener. With `blocks` (a load), a `blockIp` entry is
    /// gathered there for one write ([`Node::apply_blocks`]) instead of applied alone.
    pub(super) fn apply(
        &self,
        m: &BanMessage,
        ttl_ms: Option<u64>,
        node_id: Arc<str>,
        blocks: Option<&mut Vec<BlockRequest>>,
    ) {
        let Some(node) = self.node.get() else { return };
        if m.port.is_some_and(|p| !node.serves(p)) {
            return;
        }
        let now = clock::now_ns();
        let deadline_ns = ttl_ms.map(|t| now.saturating_add(ms_to_ns(t)));
        let origin = Origin {
            node: node_id,
            port: m.port,
            deadline_ns,
        };
        match (m.op, m.kind) {
            (Op::Ban, BanKind::Box | BanKind::Syn) => {
                let Some(ttl) = ttl_ms else { return };
                REMOTE.with(|r| r.set(true));
                node.apply_box(m.net.addr(), m.port, ms_to_ns(ttl), now, &origin.node);
                REMOTE.with(|r| r.set(false));
            }
            (Op::Ban, BanKind::Prefix) => {
                let Some(ttl) = ttl_ms else { return };
                REMOTE.with(|r| r.set(true));
                node.apply_prefix_box(m.net, m.port, ms_to_ns(ttl), now, &origin.node);
                REMOTE.with(|r| r.set(false));
            }
            (Op::Ban, BanKind::Block) => match blocks {
                Some(b) => b.push(BlockRequest {
                    net: m.net,
                    ttl_ms,
                    reason: m.note.clone(),
                    port: m.port,
                }),
                None => node.apply_block(m.net, m.port, ttl_ms, m.note.clone(), now),
            },
            (Op::Unban, _) => {
                node.apply_unblock(m.net, m.port);
                lock(&self.origins).remove(&(BanKind::Block, m.net));
                let suffix = format!(":{}", m.net);
                lock(&self.permanent).retain(|k| !k.ends_with(&suffix));
                return;
            }
        }
        lock(&self.origins).insert((m.kind, m.net), origin);
    }
}
