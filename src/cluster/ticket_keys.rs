//! The ticket-key task (`cluster.shareTicketKeys`): keeps this node's shared TLS session-ticket
//! keys ([`crate::tls::tickets::SharedKeys`], one set per `ticketKeyRotationS` in use) equal to
//! the set in Redis. Every [`ticket_poll_ms`] it runs [`TICKET_KEYS_SCRIPT`] once per period:
//! the script creates the set when there is none, shifts it at each epoch boundary (Redis `TIME`
//! as the one clock) and returns it; the task installs it with one `ArcSwap` store, which
//! handshakes read without waiting. Commands go through the breaker; while Redis is unreachable
//! the last set stays in use (a node that never got one seals with its local keys). A set that
//! does not parse is counted in `rejectedMessages` and reported as `cluster_message_rejected`.
//! Keys are never logged (the error names the field, not the value).
//!
//! Most polls return the set unchanged: a reply equal to the last one installed is not parsed
//! again, and the fresh key material of a call whose reply shows it unused (the script puts
//! fresh material only into a set it creates or shifts, so a changed reply) goes with the next
//! call instead of new material ([`Poll`]).

use super::*;
use crate::tls::tickets::{material_hex, random_material, KeySet, SharedKeys, SharedTicketKeys};
use std::sync::Weak;

/// What the ticket-key task keeps between two polls of one period's set.
#[derive(Debug, Default)]
struct Poll {
    /// The keys polled (a period dropped and used again is a new one and starts over).
    keys: Weak<SharedKeys>,
    /// The last reply installed.
    last: Option<String>,
    /// The fresh key material (hex) of the last call, while no reply shows it used.
    fresh: Option<[String; 3]>,
}

impl Poll {
    /// The state for polling `keys`: this one when it is about them, else a new one.
    fn about(&mut self, keys: &Arc<SharedKeys>) -> &mut Poll {
        let keys = Arc::downgrade(keys);
        if !self.keys.ptr_eq(&keys) {
            *self = Poll {
                keys,
                ..Poll::default()
            };
        }
        self
    }

    /// The fresh material for the next call: the last call's while unused, else `make()`'s.
    fn fresh<E>(
        &mut self,
        make: impl FnOnce() -> Result<[String; 3], E>,
    ) -> Result<&[String; 3], E> {
        let fresh = match self.fresh.take() {
            Some(f) => f,
            None => make()?,
        };
        Ok(self.fresh.insert(fresh))
    }

    /// Takes the reply of a call (`None`: none came, so the call may have used the fresh
    /// material): the reply to parse and install ([`Poll::installed`]), or `None` when there is
    /// none or it equals the last one installed.
    fn changed(&mut self, reply: Option<String>) -> Option<String> {
        if reply.is_some() && reply == self.last {
            return None;
        }
        self.fresh = None;
        reply
    }

    /// Notes `reply` as installed.
    fn installed(&mut self, reply: String) {
        self.last = Some(reply);
    }
}

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
        let mut polls: HashMap<u64, Poll> = HashMap::new();
        loop {
            let sets = shared.all();
            let wait = sets
                .first()
                .map_or(TICKET_POLL_MS.1, |s| ticket_poll_ms(s.rotation_s()));
            polls.retain(|r, _| sets.iter().any(|k| k.rotation_s() == *r));
            for keys in sets {
                let poll = polls.entry(keys.rotation_s()).or_default().about(&keys);
                let made = poll.fresh(|| {
                    let m = [random_material()?, random_material()?, random_material()?];
                    Ok::<_, rustls::Error>(m.map(|m| material_hex(&m)))
                });
                let Ok(fresh) = made else {
                    // Not Redis's fault: counted, the breaker left alone.
                    self.stats.errors.fetch_add(1, Ordering::Relaxed);
                    tracing::error!("cannot make ticket keys: the RNG failed");
                    continue;
                };
                let mut inv = script.key(self.keys.ticket_keys(keys.rotation_s()));
                inv.arg(keys.rotation_s().saturating_mul(1000));
                for f in fresh {
                    inv.arg(f.as_str());
                }
                let got: Option<String> = self
                    .run(|mut c| async move { inv.invoke_async::<String>(&mut c).await })
                    .await;
                let Some(text) = poll.changed(got) else {
                    continue;
                };
                match KeySet::parse(&text) {
                    Ok(set) => {
                        if keys.store(set) {
                            self.stats
                                .ticket_key_updates
                                .fetch_add(1, Ordering::Relaxed);
                        }
                        poll.installed(text);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn material(n: &mut u32) -> Result<[String; 3], ()> {
        *n += 1;
        Ok([0, 1, 2].map(|i| format!("{n}-{i}")))
    }

    #[test]
    fn an_unchanged_reply_is_not_parsed_and_its_unused_material_goes_again() {
        let shared = SharedTicketKeys::default();
        let keys = shared.get(60);
        let mut polls: HashMap<u64, Poll> = HashMap::new();
        let mut made = 0;
        let mut poll = |reply: Option<&str>, made: &mut u32| {
            let p = polls.entry(60).or_default().about(&keys);
            let sent = p.fresh(|| material(made)).unwrap().clone();
            let parse = p.changed(reply.map(String::from));
            if let Some(t) = &parse {
                p.installed(t.clone());
            }
            (sent[0].clone(), parse)
        };
        // The first reply is installed; the material it may have used is never sent again.
        assert_eq!(
            poll(Some("1:a"), &mut made),
            ("1-0".into(), Some("1:a".into()))
        );
        // The same set: not parsed, and the material that reply shows unused goes again.
        assert_eq!(poll(Some("1:a"), &mut made), ("2-0".into(), None));
        assert_eq!(poll(Some("1:a"), &mut made), ("2-0".into(), None));
        assert_eq!(made, 2);
        // No reply: the call may have used it, so the next call makes new material.
        assert_eq!(poll(None, &mut made), ("2-0".into(), None));
        assert_eq!(poll(Some("1:a"), &mut made), ("3-0".into(), None));
        // A shifted set is installed, and new material follows it.
        assert_eq!(
            poll(Some("2:b"), &mut made),
            ("3-0".into(), Some("2:b".into()))
        );
        assert_eq!(poll(Some("2:b"), &mut made), ("4-0".into(), None));
        assert_eq!(made, 4);
    }

    #[test]
    fn a_period_used_again_starts_over() {
        let shared = SharedTicketKeys::default();
        let mut p = Poll::default();
        let keys = shared.get(60);
        let p1 = p.about(&keys);
        p1.installed("1:a".into());
        assert_eq!(p1.changed(Some("1:a".into())), None);
        drop(keys);
        // Its keys were dropped (no ticketer used the period) and made again, empty: the set
        // is installed into them even though the reply is the one installed before.
        let keys = shared.get(60);
        assert_eq!(
            p.about(&keys).changed(Some("1:a".into())),
            Some("1:a".into())
        );
    }
}
