//! The health task: a `PING` every `HEALTH_MS` drives the circuit breaker (down: local limits only;
//! up again: replay and reload).

use super::*;

impl Cluster {
    pub(super) async fn health(self: Arc<Self>, stop: CancellationToken) {
        let mut tick = tokio::time::interval(Duration::from_millis(HEALTH_MS));
        let mut n: u64 = 0;
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            let _ = self
                .run(|mut c| async move { redis::cmd("PING").query_async::<String>(&mut c).await })
                .await;
            let now = clock::now_ns();
            n += 1;
            if n.is_multiple_of(REJECT_REPORT_MS / HEALTH_MS) {
                self.report_rejects();
            }
            if n.is_multiple_of(40) {
                lock(&self.origins).retain(|_, o| o.deadline_ns.is_none_or(|d| d > now));
            }
            if n.is_multiple_of(REFRESH_MS / HEALTH_MS) {
                let keys: Vec<String> = lock(&self.permanent).iter().cloned().collect();
                if !keys.is_empty() {
                    let mut pipe = redis::pipe();
                    for k in &keys {
                        pipe.cmd("PEXPIRE").arg(k).arg(PERMANENT_TTL_MS).ignore();
                    }
                    let _ = self
                        .run(|mut c| async move { pipe.query_async::<()>(&mut c).await })
                        .await;
                }
            }
        }
    }
}
