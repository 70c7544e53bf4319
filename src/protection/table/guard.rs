//! Guards: RAII counts of one admitted connection or one pending handshake on a client's entry,
//! released by finding the entry again by key under its shard lock (entries move when a shard
//! grows or shifts; one with a count held is never evicted).

use super::shard::Shard;
use crate::protection::key::IpKey;
use std::sync::Arc;

/// A handle on a client's entry from which guards are made (the caller has counted them in the
/// entry under the lock).
pub(crate) struct Slot<'a> {
    pub(super) shard: &'a Arc<Shard>,
    pub(super) key: IpKey,
    pub(super) hash: u64,
}

impl Slot<'_> {
    /// A guard for one active connection already counted in the entry.
    pub fn conn_guard(&self) -> ConnGuard {
        ConnGuard(Release::new(self, Counter::Active))
    }

    /// A guard for one pending handshake already counted in the entry.
    pub fn pending_guard(&self) -> PendingGuard {
        PendingGuard(Some(Release::new(self, Counter::Pending)))
    }
}

#[derive(Clone, Copy)]
enum Counter {
    Active,
    Pending,
}

struct Release {
    shard: Arc<Shard>,
    key: IpKey,
    hash: u64,
    counter: Counter,
}

impl Release {
    fn new(slot: &Slot<'_>, counter: Counter) -> Release {
        Release {
            shard: Arc::clone(slot.shard),
            key: slot.key,
            hash: slot.hash,
            counter,
        }
    }
}

impl Drop for Release {
    fn drop(&mut self) {
        let mut inner = self.shard.lock();
        // The entry cannot have been evicted while this count was held.
        if let Some(pos) = inner.find(self.key, self.hash) {
            let e = &mut inner.slots[pos];
            match self.counter {
                Counter::Active => e.active = e.active.saturating_sub(1),
                Counter::Pending => e.pending = e.pending.saturating_sub(1),
            }
        }
    }
}

/// RAII count of one admitted connection on its client's entry: dropping it decrements the
/// per-IP active count (what `maxConcurrentPerIp` compares against). While any guard is alive the
/// entry cannot be evicted.
pub struct ConnGuard(Release);

impl std::fmt::Debug for ConnGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ConnGuard({})", self.0.key)
    }
}

/// RAII count of one handshake in progress (`slowHandshake.maxPendingPerIp`); dropping it
/// decrements the per-IP pending count. A guard for an untracked or allowlisted client is empty.
pub struct PendingGuard(Option<Release>);

impl PendingGuard {
    /// A guard that counts nothing (allowlisted or untracked client, no policy).
    pub fn empty() -> PendingGuard {
        PendingGuard(None)
    }
}

impl std::fmt::Debug for PendingGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Some(r) => write!(f, "PendingGuard({})", r.key),
            None => f.write_str("PendingGuard(empty)"),
        }
    }
}
