//! The bounded wait of a request past its route's limit (HAProxy's server queue: `maxqueue`,
//! `timeout queue`): instead of being answered `503` at once, a request waits up to
//! `queueTimeoutMs` for a permit, at most `maxQueue` of them per route. Class `Priority` waiters
//! are served before class `Other` ones; a new request never overtakes a waiter of its class (or
//! of a higher one), so the wait is first come, first served within a class.
//!
//! Each released permit wakes one waiter ([`Capacity::wake`]) through a `tokio::sync::Notify`
//! per class; a woken waiter that finds no room (the limit was cut meanwhile) waits again. A
//! waiter holds no timer: [`Capacity::tick`] (every 100 ms) wakes every waiter while any waits,
//! and each checks its own deadline, so `queueTimeoutMs` ends a wait up to 100 ms late and a
//! wait costs no timer-wheel insert (the queue is the hot path of a route at its limit). The
//! waiter's `Notified` is enabled before it tries the limit, so a release between the try and
//! the wait is never lost (the release's `fetch_sub` and the waiter's count are `SeqCst`: the
//! releaser sees the waiter, or the waiter sees the room). A waiter that gives up (its
//! connection ended) passes a notification it received on (tokio's `Notified` does so on drop).
//!
//! A queue longer than the limit (each waiter then waits longer than a response takes) makes
//! the route overloaded as a refusal does: new connections of unknown clients are refused at
//! accept, so a flood's excess stops at the door instead of lining up.
//!
//! Waiting is the only asynchronous part of [`super`]; the common request (room under the
//! limit, nobody waiting) never touches it.

use super::{Capacity, Class, Overloaded, Permit};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::sync::futures::Notified;
use tokio::sync::Notify;

/// The waiters of one route.
#[derive(Debug, Default)]
pub struct Waiters {
    /// Waiting requests of class `Priority` / `Other`.
    len: [AtomicU32; 2],
    notify: [Notify; 2],
    /// Requests that waited (since start) and those whose wait timed out.
    waited: AtomicU64,
    timeouts: AtomicU64,
}

fn slot(class: Class) -> usize {
    match class {
        Class::Priority => 0,
        Class::Other => 1,
    }
}

impl Waiters {
    /// Requests waiting now (both classes).
    pub fn len(&self) -> u32 {
        self.len[0].load(Ordering::Relaxed) + self.len[1].load(Ordering::Relaxed)
    }

    /// Whether nobody waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Requests that waited for a permit, since start.
    pub fn waited(&self) -> u64 {
        self.waited.load(Ordering::Relaxed)
    }

    /// Requests whose wait ended at `queueTimeoutMs`, since start.
    pub fn timeouts(&self) -> u64 {
        self.timeouts.load(Ordering::Relaxed)
    }

    /// Whether a new request of `class` must queue behind a waiter (of its class, or `Priority`).
    #[inline]
    fn ahead_of(&self, class: Class) -> bool {
        let priority = self.len[0].load(Ordering::SeqCst) > 0;
        match class {
            Class::Priority => priority,
            Class::Other => priority || self.len[1].load(Ordering::SeqCst) > 0,
        }
    }
}

/// What a new request gets from [`Capacity::admit`].
#[derive(Debug)]
pub enum Admit<'a> {
    /// A permit now.
    Ready(Permit),
    /// It waits (poll the [`Queued`] until it gives a permit or the refusal).
    Wait(Queued<'a>),
    /// Refused: no room and no place to wait (queue off or full).
    Refused(Overloaded),
}

impl Capacity {
    /// A permit for a new request of `class` at `now_ns` when there is room and nobody of its
    /// class (or of class `Priority`) waits; `None` otherwise (nothing counted).
    pub fn take_now(self: &Arc<Self>, class: Class, now_ns: u64) -> Option<Permit> {
        if self.waiters.ahead_of(class) {
            return None;
        }
        self.take(class).ok().map(|n| self.permit(class, n, now_ns))
    }

    /// The request of `class` that [`Capacity::take_now`] refused at `now_ns` waits for room
    /// (`queueTimeoutMs`, `maxQueue`; `may_wait()` is asked last, only when it could), or is
    /// refused (counted, the route overloaded).
    pub fn wait_or_refuse(
        self: &Arc<Self>,
        class: Class,
        now_ns: u64,
        may_wait: impl FnOnce() -> bool,
    ) -> Admit<'_> {
        let (timeout_ms, max) = self.queue_config();
        let waiting = &self.waiters.len[slot(class)];
        if timeout_ms == 0 || self.waiters.len() >= max || !may_wait() {
            return Admit::Refused(self.refuse(class, self.in_flight(), now_ns));
        }
        waiting.fetch_add(1, Ordering::SeqCst);
        self.waiters.waited.fetch_add(1, Ordering::Relaxed);
        if self.waiters.len() > self.limit() {
            // More waiting than the upstream holds: each waits longer than a response takes.
            // The route is overloaded (new unknown clients are refused at accept) as at a
            // refusal, though this request still waits.
            self.pressure(now_ns);
        }
        // Demand past the limit: the limiter grows a limit that binds while latency holds.
        self.limiter.refused();
        let mut notified = Box::pin(self.waiters.notify[slot(class)].notified());
        notified.as_mut().enable();
        Admit::Wait(Queued {
            capacity: self,
            class,
            notified,
            deadline_ns: now_ns.saturating_add(crate::clock::ms_to_ns(u64::from(timeout_ms))),
            done: false,
        })
    }

    /// A permit for a request of `class` at `now_ns` when there is room, whoever waits: for the
    /// later streams of an HTTP/2 connection in the same read as the one that just waited its
    /// turn, so that they go in one write rather than one wait each.
    pub fn take_after_wait(self: &Arc<Self>, class: Class, now_ns: u64) -> Option<Permit> {
        self.take(class).ok().map(|n| self.permit(class, n, now_ns))
    }

    /// [`Capacity::take_now`], else [`Capacity::wait_or_refuse`].
    pub fn admit(
        self: &Arc<Self>,
        class: Class,
        now_ns: u64,
        may_wait: impl FnOnce() -> bool,
    ) -> Admit<'_> {
        match self.take_now(class, now_ns) {
            Some(p) => Admit::Ready(p),
            None => self.wait_or_refuse(class, now_ns, may_wait),
        }
    }

    /// Wakes up to `n` waiters, class `Priority` first (a permit was released, or the limit grew).
    pub(super) fn wake(&self, mut n: u32) {
        for s in 0..2 {
            let waiting = self.waiters.len[s].load(Ordering::SeqCst);
            for _ in 0..waiting.min(n) {
                self.waiters.notify[s].notify_one();
                n -= 1;
            }
            if n == 0 {
                return;
            }
        }
    }

    /// Wakes every waiter (each checks its deadline and the queue config, then waits again):
    /// from [`Capacity::tick`] while any waits, and when the queue is switched off.
    pub(super) fn wake_all(&self) {
        for n in &self.waiters.notify {
            n.notify_waiters();
        }
    }

    /// The route was removed: no new waiter, and those waiting are refused now.
    pub fn close_queue(&self) {
        self.queue_timeout_ms.store(0, Ordering::Relaxed);
        self.wake_all();
    }

    /// Wakes one waiter after a release, if any waits (two loads on the common path).
    #[inline]
    pub(super) fn released(&self) {
        if !self.waiters.is_empty() {
            self.wake(1);
        }
    }
}

/// A request waiting for a permit of its route (see the module doc). Poll it from the
/// connection's task; dropping it leaves the queue.
pub struct Queued<'a> {
    capacity: &'a Arc<Capacity>,
    class: Class,
    notified: Pin<Box<Notified<'a>>>,
    /// When the wait ends without a permit (CLOCK_MONOTONIC ns).
    deadline_ns: u64,
    done: bool,
}

impl std::fmt::Debug for Queued<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queued")
            .field("class", &self.class)
            .finish()
    }
}

impl Queued<'_> {
    /// The class it waits as.
    pub fn class(&self) -> Class {
        self.class
    }

    /// Ready with a permit once there is room, or with the refusal once `now_ns` (CLOCK_MONOTONIC
    /// ns, [`clock::now_ns`] in production) is past `queueTimeoutMs` or the queue was switched
    /// off (counted in `queueTimeouts` and `refused`; the route is overloaded).
    pub fn poll_permit(
        &mut self,
        cx: &mut Context<'_>,
        now_ns: u64,
    ) -> Poll<Result<Permit, Overloaded>> {
        let c = self.capacity;
        loop {
            if let Ok(n) = c.take(self.class) {
                self.leave();
                let permit = c.permit(self.class, n, now_ns);
                // Room for more (several releases, or a grown limit): pass it on.
                if c.has_room(Class::Other) || c.has_room(Class::Priority) {
                    c.released();
                }
                return Poll::Ready(Ok(permit));
            }
            if self.notified.as_mut().poll(cx).is_ready() {
                // Woken, and someone else took the room: wait again.
                let n = c.waiters.notify[slot(self.class)].notified();
                self.notified.set(n);
                self.notified.as_mut().enable();
                continue;
            }
            break;
        }
        if now_ns >= self.deadline_ns || c.queue_config().0 == 0 {
            self.leave();
            c.waiters.timeouts.fetch_add(1, Ordering::Relaxed);
            return Poll::Ready(Err(c.refuse(self.class, c.in_flight(), now_ns)));
        }
        Poll::Pending
    }

    fn leave(&mut self) {
        if !std::mem::replace(&mut self.done, true) {
            self.capacity.waiters.len[slot(self.class)].fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.leave();
    }
}

#[cfg(test)]
#[path = "queue_tests.rs"]
mod tests;
