//! The bounded wait of a request past its route's limit (HAProxy's server queue: `maxqueue`,
//! `timeout queue`): instead of being answered `503` at once, a request waits up to
//! `queueTimeoutMs` for a permit, at most `maxQueue` of them per route. Class `Priority` waiters
//! are served before class `Other` ones; a new request never overtakes a waiter of its class (or
//! of a higher one), so the wait is first come, first served within a class.
//!
//! Each released permit wakes one waiter ([`Capacity::wake`]) through a `tokio::sync::Notify`
//! per class, the one that waited longest (`notify_one` is first in, first out), and only a
//! woken waiter takes a permit: a waiter polled for another reason (its connection's other
//! streams, its own timer) never overtakes an older one, so the wait stays in arrival order and
//! the tail of the wait is the queue's length, not luck. A woken waiter that finds no room (the
//! limit was cut meanwhile) waits again, at the back. Each waiter has its own timer for
//! `queueTimeoutMs` (created at its first wait, when it runs inside the runtime). The waiter's
//! `Notified` is enabled as it joins, so a release between its failed try and its wait is never
//! lost (the release's `fetch_sub` and the waiter's count are `SeqCst`: the releaser sees the
//! waiter, or the waiter sees the room). A waiter that gives up (its connection ended) passes a
//! notification it received on (tokio's `Notified` does so on drop).
//!
//! **Batches.** An HTTP/2 connection waits for one stream's HEADERS with the later streams of
//! the same read behind it ([`Queued::batched`]); woken, it takes the room there is for all of
//! them at once (one write), and passes what is left on when it is done
//! ([`Capacity::pass_on`]). While such waiters are queued, a release wakes the next waiter only
//! once [`Capacity::wake_batch`] permits are free (a sixteenth of the limit, 1 to 32), so each
//! wake-up carries several streams instead of one — h2load at a route's limit otherwise spends
//! a wake-up and a write per stream. Class `Priority` waiters are woken at once, batch or not.
//!
//! A queue longer than the limit (each waiter then waits longer than a response takes) while the
//! latency is up (the last window was not calm) makes the route overloaded as a refusal does: new connections of unknown clients are refused at
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
use tokio::time::Sleep;

/// Largest [`Capacity::wake_batch`].
pub(crate) const MAX_WAKE_BATCH: u32 = 32;

/// Shortest re-arm of a waiter's timer that fired before its deadline.
const MIN_REARM: std::time::Duration = std::time::Duration::from_millis(1);

/// The waiters of one route.
#[derive(Debug, Default)]
pub(crate) struct Waiters {
    /// Waiting requests of class `Priority` / `Other`.
    len: [AtomicU32; 2],
    notify: [Notify; 2],
    /// Waiters that take a batch when woken ([`Queued::batched`]).
    batched: AtomicU32,
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
    pub(crate) fn len(&self) -> u32 {
        self.len[0].load(Ordering::Relaxed) + self.len[1].load(Ordering::Relaxed)
    }

    /// Whether nobody waits.
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Requests that waited for a permit, since start.
    pub(crate) fn waited(&self) -> u64 {
        self.waited.load(Ordering::Relaxed)
    }

    /// Requests whose wait ended at `queueTimeoutMs`, since start.
    pub(crate) fn timeouts(&self) -> u64 {
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
    pub(crate) fn take_now(self: &Arc<Self>, class: Class, now_ns: u64) -> Option<Permit> {
        if self.waiters.ahead_of(class) {
            return None;
        }
        self.take(class).ok().map(|n| self.permit(class, n, now_ns))
    }

    /// The request of `class` that [`Capacity::take_now`] refused at `now_ns` waits for room
    /// (`queueTimeoutMs`, `maxQueue`; `may_wait()` is asked last, only when it could), or is
    /// refused (counted, the route overloaded).
    pub(crate) fn wait_or_refuse(
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
        if self.waiters.len() > self.limit() && !self.growing() {
            // More waiting than the upstream holds, and its latency is up: each waits longer
            // than a response takes. The route is overloaded (new unknown clients are refused at
            // accept) as at a refusal, though this request still waits. While an adaptive
            // limit's latency is calm the limit is still growing towards the demand (a burst at
            // start, say), and the queue is no sign of overload; a fixed limit never grows.
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
            timer: None,
            batched: false,
            done: false,
        })
    }

    /// A permit for a request of `class` at `now_ns` when there is room, whoever waits: for the
    /// later streams of an HTTP/2 connection in the same read as the one that just waited its
    /// turn, so that they go in one write rather than one wait each.
    pub(crate) fn take_after_wait(self: &Arc<Self>, class: Class, now_ns: u64) -> Option<Permit> {
        self.take(class).ok().map(|n| self.permit(class, n, now_ns))
    }

    /// [`Capacity::take_now`], else [`Capacity::wait_or_refuse`].
    pub(crate) fn admit(
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

    /// Wakes every waiter (each checks its deadline and the queue config, then waits again): when
    /// the queue is switched off or closed.
    pub(super) fn wake_all(&self) {
        for n in &self.waiters.notify {
            n.notify_waiters();
        }
    }

    /// The route was removed (or the proxy stopped): no new waiter, those waiting are refused
    /// now, and the parked slots are released (nothing ticks the route any more).
    pub(crate) fn close_queue(&self) {
        self.queue_timeout_ms.store(0, Ordering::Relaxed);
        self.wake_all();
        self.release_parked(u64::MAX);
    }

    /// Wakes one waiter after a release, if any waits (two loads on the common path); while
    /// batched waiters are queued, class `Other` only once [`Capacity::wake_batch`] permits are
    /// free.
    #[inline]
    pub(super) fn released(&self) {
        if self.waiters.is_empty() {
            return;
        }
        let batching = self.waiters.batched.load(Ordering::Relaxed) > 0
            && self.waiters.len[slot(Class::Priority)].load(Ordering::SeqCst) == 0;
        if !batching || self.room(Class::Other) >= self.wake_batch() {
            self.wake(1);
        }
    }

    /// A batched waiter took what it needed ([`Queued::batched`]): the room left goes to the
    /// next waiter.
    pub(crate) fn pass_on(&self) {
        if self.has_room(Class::Other) || self.has_room(Class::Priority) {
            self.released();
        }
    }

    /// Free permits of class `Other` before a batched waiter is woken: a sixteenth of its share
    /// of the limit, 1 to [`MAX_WAKE_BATCH`].
    pub(crate) fn wake_batch(&self) -> u32 {
        (self.cap(Class::Other) / 16).clamp(1, MAX_WAKE_BATCH)
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
    /// Wakes the waiter at `deadline_ns` (none outside a tokio runtime: tests poll it).
    timer: Option<Pin<Box<Sleep>>>,
    /// Takes a batch when woken ([`Queued::batched`]).
    batched: bool,
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
    /// Marks the waiter as one that takes a batch once woken (an HTTP/2 connection: its later
    /// streams of the same read take the room with [`Capacity::take_after_wait`]): the permit
    /// it gets does not pass the remaining room on; its owner calls [`Capacity::pass_on`] when
    /// it has taken what it needs. Releases then wake it only once a batch is free.
    pub(crate) fn batched(mut self) -> Self {
        if !self.batched && !self.done {
            self.batched = true;
            self.capacity
                .waiters
                .batched
                .fetch_add(1, Ordering::Relaxed);
        }
        self
    }

    /// Ready with a permit once there is room, or with the refusal once `now_ns` (CLOCK_MONOTONIC
    /// ns, [`clock::now_ns`] in production) is past `queueTimeoutMs` or the queue was switched
    /// off (counted in `queueTimeouts` and `refused`; the route is overloaded).
    pub(crate) fn poll_permit(
        &mut self,
        cx: &mut Context<'_>,
        now_ns: u64,
    ) -> Poll<Result<Permit, Overloaded>> {
        let c = self.capacity;
        while self.notified.as_mut().poll(cx).is_ready() {
            if let Ok(n) = c.take(self.class) {
                self.leave();
                let permit = c.permit(self.class, n, now_ns);
                if !self.batched {
                    // Room for more (several releases, or a grown limit): pass it on.
                    c.pass_on();
                }
                return Poll::Ready(Ok(permit));
            }
            // Woken, and someone else took the room: wait again.
            let n = c.waiters.notify[slot(self.class)].notified();
            self.notified.set(n);
            self.notified.as_mut().enable();
        }
        if now_ns >= self.deadline_ns || c.queue_config().0 == 0 {
            self.leave();
            c.waiters.timeouts.fetch_add(1, Ordering::Relaxed);
            return Poll::Ready(Err(c.refuse(self.class, c.in_flight(), now_ns)));
        }
        self.arm_timer(cx, now_ns);
        Poll::Pending
    }

    /// Makes sure the task is woken at the deadline (the timer is created at the first wait).
    fn arm_timer(&mut self, cx: &mut Context<'_>, now_ns: u64) {
        if self.timer.is_none() {
            if tokio::runtime::Handle::try_current().is_err() {
                return;
            }
            let left = std::time::Duration::from_nanos(self.deadline_ns - now_ns);
            self.timer = Some(Box::pin(tokio::time::sleep(left)));
        }
        if let Some(t) = self.timer.as_mut() {
            if t.as_mut().poll(cx).is_ready() {
                // Fired a hair before `now_ns` reached the deadline: once more, for the rest.
                let left = std::time::Duration::from_nanos(self.deadline_ns - now_ns);
                t.as_mut()
                    .reset(tokio::time::Instant::now() + left.max(MIN_REARM));
                let _ = t.as_mut().poll(cx);
            }
        }
    }

    fn leave(&mut self) {
        if !std::mem::replace(&mut self.done, true) {
            self.capacity.waiters.len[slot(self.class)].fetch_sub(1, Ordering::SeqCst);
            if self.batched {
                self.capacity
                    .waiters
                    .batched
                    .fetch_sub(1, Ordering::Relaxed);
            }
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
