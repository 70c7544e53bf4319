//! The lease refiller: `clusterRateLimit` refill requests from the accept path, queued without
//! waiting, sent to Redis in batches (one GCRA script call per client) by one task, and the answers
//! handed back to the listener's engine.

use super::*;
use crate::config::proxy::ListenerId;

impl Cluster {
    /// Whether admissions take `clusterRateLimit` lease tokens now: false while the breaker is
    /// open (local limits alone). One atomic load, for the accept path
    /// ([`Engine::admit_clustered`]).
    #[inline]
    pub fn leases_on(&self) -> bool {
        !self.stats.breaker_open.load(Ordering::Relaxed)
    }

    /// Queues the lease refill `r` of listener `listener`'s engine (answered through
    /// [`Node::update_lease`]); never waits. False when the queue is full (counted in
    /// `queueOverflow`).
    fn request_refill(&self, listener: ListenerId, r: LeaseRequest) -> bool {
        let sent = self
            .refill_tx
            .try_send(Refill {
                listener,
                port: r.port,
                key: r.key,
                limit: r.limit,
            })
            .is_ok();
        if !sent {
            self.stats.queue_overflow.fetch_add(1, Ordering::Relaxed);
        }
        sent
    }

    /// After an admission that set [`crate::protection::Admission::refill`] (rare: once per
    /// lease): builds `ip`'s refill request on listener `listener`'s `engine` and queues it
    /// (a `try_send` on the refill queue); if it cannot be queued, tells the engine
    /// ([`LeaseUpdate::NotSent`]) so the client's next connection asks again. Never waits.
    pub fn refill_lease(&self, engine: &Engine, listener: ListenerId, ip: IpAddr) {
        if let Some(r) = engine.lease_request(ip) {
            if !self.request_refill(listener, r) {
                engine.update_lease(r.key, LeaseUpdate::NotSent);
            }
        }
    }

    pub(super) async fn refiller(&self, rx: &mut mpsc::Receiver<Refill>, stop: CancellationToken) {
        loop {
            let first = tokio::select! {
                _ = stop.cancelled() => return,
                r = rx.recv() => match r { Some(r) => r, None => return },
            };
            let mut batch = vec![first];
            while batch.len() < BATCH {
                match rx.try_recv() {
                    Ok(r) => batch.push(r),
                    Err(_) => break,
                }
            }
            self.refill(batch).await;
        }
    }

    /// One EVALSHA per client, sent concurrently (the connection pipelines them).
    async fn refill(&self, batch: Vec<Refill>) {
        let Some(node) = self.node.get() else {
            return;
        };
        let mut calls = Vec::with_capacity(batch.len());
        for r in &batch {
            let debt = node.update_lease(r.listener, r.key, LeaseUpdate::TakeDebt);
            let interval_us =
                ((clock::US_PER_SEC as f64 / r.limit.limit.rate).round() as u64).max(1);
            let tolerance_us = interval_us.saturating_mul(r.limit.limit.burst.saturating_sub(1));
            let mut inv = self.script.key(self.keys.rate(r.port, &r.key.to_string()));
            inv.arg(interval_us)
                .arg(tolerance_us)
                .arg(debt)
                .arg(r.limit.lease);
            calls.push(inv);
        }
        let answers: Option<Vec<(u64, u64)>> = self
            .run(|c| async move {
                let futs = calls.iter().map(|inv| {
                    let mut c = c.clone();
                    async move { inv.invoke_async::<(u64, u64)>(&mut c).await }
                });
                futures_util::future::join_all(futs)
                    .await
                    .into_iter()
                    .collect::<redis::RedisResult<Vec<_>>>()
            })
            .await;
        let now = clock::now_ns();
        match answers {
            Some(a) => {
                for (r, (granted, retry_us)) in batch.iter().zip(a) {
                    let u = LeaseUpdate::Refilled {
                        granted,
                        retry_after_ns: retry_us.saturating_mul(clock::NS_PER_US),
                        now_ns: now,
                    };
                    node.update_lease(r.listener, r.key, u);
                }
                self.stats
                    .lease_refills
                    .fetch_add(batch.len() as u64, Ordering::Relaxed);
            }
            None => {
                for r in &batch {
                    node.update_lease(r.listener, r.key, LeaseUpdate::Failed);
                }
            }
        }
    }
}
