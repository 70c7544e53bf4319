//! Suspended connections (docs/proxy.md: Suspended routes): the registry of connections held after
//! their ClientHello matched a `suspended: true` route, each waiting for JS to call
//! `resolveConnection(id, route | null)`.
//!
//! A held connection is its own task waiting on a oneshot receiver ([`Ticket::wait`]); the accept
//! path only inserts into a sharded map, so nothing there waits on JS. The registry is bounded
//! per listener (`listeners[].maxPendingSuspended`): a connection over the bound gets no ticket.
//! An id is a decimal string of a proxy-wide counter, never reused; resolving an id that is
//! unknown, expired (timed out, client gone) or already resolved does nothing and says so.

use crate::config::proxy::ListenerId;
use crate::config::proxy::RouteConfig;
use dashmap::DashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use tokio::sync::oneshot;

/// What `resolveConnection` decided for a held connection.
#[derive(Debug)]
pub enum Resolution {
    /// Serve it as if this route (validated by [`crate::config::proxy::parse_resolve_route`])
    /// had matched: terminate with its cert, or pass through.
    Route(Box<RouteConfig>),
    /// `null`: close it (`errorsByReason.suspend_rejected`).
    Close,
    /// A route that is not valid: close it and report it as `'error'`
    /// (`errorsByReason.resolve_route_invalid`) with every problem (paths under `route`, at
    /// least one) as the event's `errors`.
    Invalid(Vec<crate::config::ConfigIssue>),
}

/// One held connection in the registry.
struct Pending {
    /// Index of its listener (whose `defaultCert` a resolved route may use).
    li: ListenerId,
    tx: oneshot::Sender<Resolution>,
}

/// Every suspended connection of one proxy, by id.
pub(crate) struct Suspensions {
    next_id: AtomicU64,
    pending: DashMap<u64, Pending>,
    /// Held connections per listener index (entries of `pending`).
    counts: Vec<AtomicUsize>,
}

/// How a held connection's wait ended.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// `resolveConnection` decided.
    Resolved(Resolution),
    /// `suspendTimeoutMs` passed without a decision.
    TimedOut,
    /// The client closed (or reset) while held.
    ClientClosed,
}

/// A held connection's place in the registry; dropping it removes the entry (the id expires).
pub(crate) struct Ticket<'a> {
    reg: &'a Suspensions,
    /// The id given to JS in the `'suspended'` event.
    pub id: u64,
    rx: oneshot::Receiver<Resolution>,
}

impl Suspensions {
    /// An empty registry for `listeners` listeners.
    pub(crate) fn new(listeners: usize) -> Self {
        Suspensions {
            next_id: AtomicU64::new(1),
            pending: DashMap::new(),
            counts: (0..listeners).map(|_| AtomicUsize::new(0)).collect(),
        }
    }

    /// Holds a connection of listener `li`, or `None` when that listener already holds `max`
    /// (`maxPendingSuspended`).
    pub(crate) fn hold(&self, li: ListenerId, max: u64) -> Option<Ticket<'_>> {
        let c = &self.counts[li.0];
        if c.fetch_add(1, Ordering::Relaxed) as u64 >= max {
            c.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.pending.insert(id, Pending { li, tx });
        Some(Ticket { reg: self, id, rx })
    }

    /// Removes `id`'s entry (counted once, by whoever removes it).
    fn take(&self, id: u64) -> Option<Pending> {
        let (_, p) = self.pending.remove(&id)?;
        self.counts[p.li.0].fetch_sub(1, Ordering::Relaxed);
        Some(p)
    }

    /// The listener index of a held connection (`None`: unknown or no longer held).
    pub(crate) fn listener_of(&self, id: u64) -> Option<ListenerId> {
        self.pending.get(&id).map(|p| p.li)
    }

    /// Hands `r` to the held connection `id`: true when it took it, false when `id` is unknown,
    /// expired or already resolved (then nothing happens).
    pub(crate) fn resolve(&self, id: u64, r: Resolution) -> bool {
        match self.take(id) {
            Some(p) => p.tx.send(r).is_ok(),
            None => false,
        }
    }

    /// Connections held now on listener `li` (`metrics().listeners[].pendingSuspended`).
    pub(crate) fn pending(&self, li: ListenerId) -> usize {
        self.counts[li.0].load(Ordering::Relaxed)
    }
}

impl Ticket<'_> {
    /// Waits for the decision until `timeout`, or until `closed` (the client went away) ends
    /// first. A decision that raced the timeout is still honoured: `resolveConnection` returned
    /// true for it.
    pub(crate) async fn wait(
        mut self,
        timeout: std::time::Duration,
        closed: impl std::future::Future<Output = ()>,
    ) -> Outcome {
        let ended = tokio::select! {
            r = &mut self.rx => match r {
                Ok(r) => return Outcome::Resolved(r),
                Err(_) => Outcome::TimedOut,
            },
            _ = tokio::time::sleep(timeout) => Outcome::TimedOut,
            _ = closed => Outcome::ClientClosed,
        };
        // Expire the id first, then take a decision that arrived in between.
        self.reg.take(self.id);
        match self.rx.try_recv() {
            Ok(r) => Outcome::Resolved(r),
            Err(_) => ended,
        }
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        self.reg.take(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn bound_resolve_and_expiry() {
        let s = Suspensions::new(2);
        let a = s.hold(ListenerId(0), 2).unwrap();
        let b = s.hold(ListenerId(0), 2).unwrap();
        assert!(
            s.hold(ListenerId(0), 2).is_none(),
            "the third on listener 0 is over the bound"
        );
        let c = s.hold(ListenerId(1), 2).unwrap();
        assert_eq!((s.pending(ListenerId(0)), s.pending(ListenerId(1))), (2, 1));
        assert_ne!(a.id, b.id);
        assert_eq!(s.listener_of(c.id), Some(ListenerId(1)));

        // Resolved: taken once; a second resolve is a no-op.
        let id = a.id;
        assert!(s.resolve(id, Resolution::Close));
        assert!(!s.resolve(id, Resolution::Close));
        let out = a.wait(Duration::from_secs(5), std::future::pending()).await;
        assert!(matches!(out, Outcome::Resolved(Resolution::Close)));
        assert_eq!(s.pending(ListenerId(0)), 1);

        // Timed out: the id expires.
        let id = b.id;
        let out = b
            .wait(Duration::from_millis(1), std::future::pending())
            .await;
        assert!(matches!(out, Outcome::TimedOut));
        assert!(!s.resolve(id, Resolution::Close));
        assert_eq!(s.pending(ListenerId(0)), 0);

        // Client gone: the id expires.
        let id = c.id;
        let out = c.wait(Duration::from_secs(5), async {}).await;
        assert!(matches!(out, Outcome::ClientClosed));
        assert!(!s.resolve(id, Resolution::Close));
        assert_eq!(s.pending(ListenerId(1)), 0);
        assert!(!s.resolve(12345, Resolution::Close), "unknown id");
    }
}
