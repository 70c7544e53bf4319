//! The ban publisher: this node's boxes, kernel bans and `blockIp` entries queued ([`Cluster::boxed`],
//! [`Cluster::blocked`], ...) and written to Redis in batches by one task (keys with a PX TTL, then a
//! `PUBLISH` on the ban channel); what cannot be written while Redis is down is kept for replay.

use super::*;

impl Cluster {
    /// Box listener hook (chained after the XDP one): queues a local box for publishing. Never
    /// blocks; a remote ban being applied on this thread is not published again.
    pub fn boxed(&self, port: u16, key: IpKey, deadline_ns: u64, prefix: bool) {
        if !self.cfg.share_bans || REMOTE.with(Cell::get) {
            return;
        }
        self.queue(Outgoing::Ban {
            kind: if prefix {
                BanKind::Prefix
            } else {
                BanKind::Box
            },
            net: key.to_ipnet(),
            port: Some(port),
            deadline_ns: Some(deadline_ns),
            note: None,
        });
    }

    /// A ban is being written to the kernel from userspace (a local box, or one received from
    /// another node): [`Cluster::kernel_scan`] does not take it for the kernel's own.
    pub fn kernel_written(&self, net: IpNet, port: u16, deadline_ns: u64) {
        if self.cfg.share_bans {
            lock(&self.kernel).written(net, port, deadline_ns);
        }
    }

    /// The server's background tick with XDP attached, at `now_ns`: given the kernel's `banned`
    /// and `banExtended` counters, reads the ban maps back with `read` when they moved and queues
    /// the kernel's own bans and extensions for publishing ([`kernel`]); returns how many.
    pub fn kernel_scan(
        &self,
        banned: u64,
        extended: u64,
        now_ns: u64,
        read: impl FnOnce() -> Vec<KernelBan>,
    ) -> usize {
        if !self.cfg.share_bans || !lock(&self.kernel).should_scan(banned, extended, now_ns) {
            return 0;
        }
        let bans = read();
        let found = lock(&self.kernel).publishable(&bans, now_ns);
        for b in &found {
            self.queue(Outgoing::Ban {
                kind: match (b.syn, b.prefix) {
                    (true, _) => BanKind::Syn,
                    (false, true) => BanKind::Prefix,
                    (false, false) => BanKind::Box,
                },
                net: b.net,
                port: Some(b.port),
                deadline_ns: Some(b.deadline_ns),
                note: None,
            });
        }
        found.len()
    }

    fn queue(&self, o: Outgoing) {
        if self.out_tx.try_send(o).is_err() {
            self.stats.queue_overflow.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// `blockIp` was applied locally: share it.
    pub fn blocked(
        &self,
        net: IpNet,
        port: Option<u16>,
        ttl_ms: Option<u64>,
        note: Option<String>,
    ) {
        if !self.cfg.share_bans {
            return;
        }
        let now = clock::now_ns();
        self.queue(Outgoing::Ban {
            kind: BanKind::Block,
            net,
            port,
            deadline_ns: ttl_ms.map(|t| now.saturating_add(ms_to_ns(t))),
            note,
        });
    }

    /// `unblockIp` was applied locally: share it.
    pub fn unblocked(&self, net: IpNet, port: Option<u16>) {
        if self.cfg.share_bans {
            self.queue(Outgoing::Unban { net, port });
        }
    }

    fn keep_for_replay(&self, ops: Vec<Outgoing>) {
        let mut r = lock(&self.replay);
        for o in ops {
            if r.len() >= REPLAY_MAX {
                r.pop_front();
            }
            r.push_back(o);
        }
    }

    pub(super) async fn writer(&self, rx: &mut mpsc::Receiver<Outgoing>, stop: CancellationToken) {
        loop {
            let first = tokio::select! {
                _ = stop.cancelled() => return,
                o = rx.recv() => match o { Some(o) => o, None => return },
            };
            let mut batch = vec![first];
            while batch.len() < BATCH {
                match rx.try_recv() {
                    Ok(o) => batch.push(o),
                    Err(_) => break,
                }
            }
            self.write(batch).await;
        }
    }

    /// Writes and publishes local bans; what fails is kept for replay.
    pub(super) async fn write(&self, batch: Vec<Outgoing>) {
        let now = clock::now_ns();
        // Coalesce: one write per ban key (the latest deadline), unbans in order.
        let mut ops: Vec<Outgoing> = Vec::with_capacity(batch.len());
        for o in batch {
            if let Outgoing::Ban {
                kind,
                net,
                port,
                deadline_ns,
                ..
            } = &o
            {
                if deadline_ns.is_some_and(|d| d <= now) {
                    continue;
                }
                if let Some(Outgoing::Ban { deadline_ns: d, .. }) = ops.iter_mut().find(|x| {
                    matches!(x, Outgoing::Ban { kind: k, net: n, port: p, .. }
                        if k == kind && n == net && p == port)
                }) {
                    if deadline_ns.is_none() || d.is_some_and(|d| Some(d) < *deadline_ns) {
                        *d = *deadline_ns;
                    }
                    continue;
                }
            }
            ops.push(o);
        }
        if ops.is_empty() {
            return;
        }
        // Unbans without a port remove every per-port blockIp key of the network: find them.
        let mut extra_del: Vec<String> = Vec::new();
        for o in &ops {
            if let Outgoing::Unban { net, port: None } = o {
                let pattern = self.keys.block_pattern(net);
                match self.scan(&pattern).await {
                    Some(keys) => extra_del.extend(keys),
                    None => {
                        self.keep_for_replay(ops);
                        return;
                    }
                }
            }
        }
        let mut pipe = redis::pipe();
        let channel = self.keys.channel();
        let mut permanent_add = Vec::new();
        let mut permanent_del = Vec::new();
        let mut published = 0u64;
        for o in &ops {
            let (msg, key) = match o {
                Outgoing::Ban {
                    kind,
                    net,
                    port,
                    deadline_ns,
                    note,
                } => {
                    let ttl_ms = deadline_ns.map(|d| ns_to_ms_ceil(d.saturating_sub(now)));
                    let key = self.keys.ban(*kind, *port, net);
                    let msg = self.message(Op::Ban, *kind, *net, *port, ttl_ms, note.clone());
                    let px = ttl_ms.unwrap_or(PERMANENT_TTL_MS).max(1);
                    if ttl_ms.is_none() {
                        permanent_add.push(key.clone());
                    }
                    pipe.cmd("SET")
                        .arg(&key)
                        .arg(&msg)
                        .arg("PX")
                        .arg(px)
                        .ignore();
                    (msg, key)
                }
                Outgoing::Unban { net, port } => {
                    let key = self.keys.ban(BanKind::Block, *port, net);
                    let msg = self.message(Op::Unban, BanKind::Block, *net, *port, None, None);
                    pipe.cmd("DEL").arg(&key).ignore();
                    permanent_del.push(*net);
                    (msg, key)
                }
            };
            let _ = key;
            self.await_echo(msg.as_bytes());
            pipe.cmd("PUBLISH").arg(&channel).arg(msg).ignore();
            published += 1;
        }
        for k in &extra_del {
            pipe.cmd("DEL").arg(k).ignore();
        }
        let done = self
            .run(|mut c| async move { pipe.query_async::<()>(&mut c).await })
            .await;
        if done.is_none() {
            self.keep_for_replay(ops);
            return;
        }
        self.stats
            .bans_published
            .fetch_add(published, Ordering::Relaxed);
        let mut origins = lock(&self.origins);
        let mut perm = lock(&self.permanent);
        for k in permanent_add {
            perm.insert(k);
        }
        for net in permanent_del {
            perm.retain(|k| !k.ends_with(&format!(":{net}")));
        }
        for o in &ops {
            match o {
                Outgoing::Ban { kind, net, .. } => origins.remove(&(*kind, *net)),
                Outgoing::Unban { net, .. } => origins.remove(&(BanKind::Block, *net)),
            };
        }
    }

    fn message(
        &self,
        op: Op,
        kind: BanKind,
        net: IpNet,
        port: Option<u16>,
        ttl_ms: Option<u64>,
        note: Option<String>,
    ) -> String {
        let m = BanMessage {
            op,
            node: self.cfg.node_id.clone(),
            kind,
            net,
            port,
            ttl_ms,
            note,
            sent_us: wall_us(),
        };
        serde_json::to_string(&m).unwrap_or_default()
    }
}
