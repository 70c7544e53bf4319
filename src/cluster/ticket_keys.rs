//! The ticket-key task (`cluster.shareTicketKeys`): keeps this node's shared TLS session-ticket
//! keys ([`crate::tls::tickets::SharedKeys`], one set per `ticketKeyRotationS` in use) equal to
//! the set in Redis. Every [`ticket_poll_ms`] it runs [`TICKET_KEYS_SCRIPT`] once per period:
//! the script creates the set when there is none, shifts it at each epoch boundary (Redis `TIME`
//! as the one clock) and returns it; the task installs it with one `ArcSwap` store, which
//! handshakes read without waiting. Commands go through the breaker; while Redis is unreachable
//! the last set stays in use (a node that never got one seals with its local keys). A set that
//! does not parse is counted in `rejectedMessages` and reported as `cluster_message_rejected`.
//! Keys are never logged (the error names the field, not the value).

use super::*;
use crate::tls::tickets::{material_hex, random_material, KeySet, SharedTicketKeys};

/// The ticket-key set script (Redis Lua).
pub const TICKET_KEYS_SCRIPT: &str = include_str!("ticket_keys.lua");
/// Shortest and longest wait between two reads of the shared set, ms.
pub const TICKET_POLL_MS: (u64, u64) = (250, 5_000);

/// The wait between two reads for a shortest rotation of `rotation_s`: a sixteenth of it, within
/// [`TICKET_POLL_MS`], so a node follows a rotation within that time.
pub fn ticket_poll_ms(rotation_s: u64) -> u64 {
    (rotation_s.saturating_mul(1000) / 16).clamp(TICKET_POLL_MS.0, TICKET_POLL_MS.1)
}

impl Cluster {
    /// The shared ticket keys of this node (`Some` with `shareTicketKeys`).
    pub fn ticket_keys(&self) -> Option<&Arc<SharedTicketKeys>> {
        self.ticket_keys.as_ref()
    }

    pub(super) async fn ticket_key_task(self: Arc<Self>, stop: CancellationToken) {
        let Some(shared) = self.ticket_keys.clone() else {
            return;
        };
        let script = redis::Script::new(TICKET_KEYS_SCRIPT);
        loop {
            let sets = shared.all();
            let wait = sets
                .first()
                .map_or(TICKET_POLL_MS.1, |s| ticket_poll_ms(s.rotation_s()));
            for keys in sets {
                let fresh = match (random_material(), random_material(), random_material()) {
                    (Ok(a), Ok(b), Ok(c)) => [a, b, c].map(|m| material_hex(&m)),
                    _ => {
                        // Not Redis's fault: counted, the breaker left alone.
                        self.stats.errors.fetch_add(1, Ordering::Relaxed);
                        tracing::error!("cannot make ticket keys: the RNG failed");
                        continue;
                    }
                };
                let mut inv = script.key(self.keys.ticket_keys(keys.rotation_s()));
                inv.arg(keys.rotation_s().saturating_mul(1000));
                for f in &fresh {
                    inv.arg(f.as_str());
                }
                let got: Option<String> = self
                    .run(|mut c| async move { inv.invoke_async::<String>(&mut c).await })
                    .await;
                let Some(text) = got else {
                    continue;
                };
                match KeySet::parse(&text) {
                    Ok(set) => {
                        if keys.store(set) {
                            self.stats
                                .ticket_key_updates
                                .fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Err(why) => self.reject(format!(
                        "the ticket-key set {} {why}",
                        self.keys.ticket_keys(keys.rotation_s())
                    )),
                }
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_millis(wait)) => {}
            }
        }
    }
}
