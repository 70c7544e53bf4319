//! Guards: RAII counts of one admitted connection or one pending handshake on a client's entry
//! (and, for a connection, on its prefix's entry too), released by finding each entry again by
//! key under its shard lock (entries move when a shard grows or shifts; one with a count held is
//! never evicted). The releases take one shard lock at a time, never two.

use super::shard::Shard;
use crate::protection::key::IpKey;
use crate::protection::shadow::ShadowHold;
use std::sync::atomic::{AtomicU64, Ordering};
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
    pub(crate) fn conn_guard(&self) -> ConnGuard {
        ConnGuard {
            client: Release::new(self, Counter::Active),
            prefix: None,
            _shadow: None,
        }
    }

    /// A guard for one active connection counted in the entry and, with `prefix`, in its
    /// prefix's entry; with `shadow`, it holds the connection's count on its shadow prefix too.
    pub(crate) fn conn_guard_with(
        &self,
        prefix: Option<PrefixHold>,
        shadow: Option<ShadowHold>,
    ) -> ConnGuard {
        ConnGuard {
            client: Release::new(self, Counter::Active),
            prefix: prefix.map(|p| p.0),
            _shadow: shadow,
        }
    }

    /// One active connection already counted in a prefix entry, to be held by the connection's
    /// [`ConnGuard`].
    pub(crate) fn prefix_hold(&self) -> PrefixHold {
        PrefixHold(Release::new(self, Counter::Active))
    }

    /// A guard for one pending handshake already counted in the entry (and in `listener`, the
    /// listener's pending count, when given); `tightened` says defense mode applies to it.
    pub(crate) fn pending_guard(
        &self,
        listener: Option<Arc<AtomicU64>>,
        tightened: bool,
    ) -> PendingGuard {
        PendingGuard {
            client: Some(Release::new(self, Counter::Pending)),
            listener,
            tightened,
        }
    }
}

/// An active count on a prefix entry, released when dropped (see [`Slot::prefix_hold`]).
pub struct PrefixHold(Release);

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
        self.shard.prefetch(self.hash);
        let mut inner = self.shard.lock();
        // The entry cannot have been evicted while this count was held.
        if let Some(pos) = inner.find(self.key, self.hash) {
            let e = inner.slots.entry_mut(pos);
            match self.counter {
                Counter::Active => e.active = e.active.saturating_sub(1),
                Counter::Pending => e.pending = e.pending.saturating_sub(1),
            }
        }
    }
}

/// RAII count of one admitted connection on its client's entry (and on its prefix's entry with
/// `prefixLimit`): dropping it decrements the per-IP active count (what `maxConcurrentPerIp`
/// compares against) and the prefix's (`prefixLimit.maxConcurrent`). While any guard is alive
/// the entries cannot be evicted.
pub struct ConnGuard {
    client: Release,
    prefix: Option<Release>,
    /// The count on the shadow prefix (`protection.shadow.prefixLimit`), released on drop.
    _shadow: Option<ShadowHold>,
}

impl std::fmt::Debug for ConnGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.prefix {
            Some(p) => write!(f, "ConnGuard({}, prefix {})", self.client.key, p.key),
            None => write!(f, "ConnGuard({})", self.client.key),
        }
    }
}

/// RAII count of one handshake in progress (`slowHandshake.maxPendingPerIp`, and
/// `listenerLimit.maxPendingHandshakes`); dropping it decrements the per-IP pending count and the
/// listener's. A guard for an untracked or allowlisted client counts nothing per IP.
pub struct PendingGuard {
    client: Option<Release>,
    listener: Option<Arc<AtomicU64>>,
    tightened: bool,
}

impl PendingGuard {
    /// A guard that counts nothing (allowlisted or untracked client, no policy).
    pub fn empty() -> PendingGuard {
        PendingGuard {
            client: None,
            listener: None,
            tightened: false,
        }
    }

    /// A guard that counts nothing per IP but one handshake in `listener` (untracked client),
    /// `tightened` when defense mode applies.
    pub(crate) fn listener_only(listener: Option<Arc<AtomicU64>>, tightened: bool) -> PendingGuard {
        PendingGuard {
            client: None,
            listener,
            tightened,
        }
    }

    /// Whether defense mode tightens this handshake (shorter timeout): defense was on when it
    /// began and the client is not known-good.
    pub fn tightened(&self) -> bool {
        self.tightened
    }
}

impl Drop for PendingGuard {
    fn drop(&mut self) {
        if let Some(l) = &self.listener {
            l.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl std::fmt::Debug for PendingGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.client {
            Some(r) => write!(f, "PendingGuard({})", r.key),
            None => f.write_str("PendingGuard(empty)"),
        }
    }
}
