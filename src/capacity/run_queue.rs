//! The proxy's own run-queue delay: how long a task that became ready waits before a worker polls
//! it. A response head that reached the proxy's socket is seen only when its connection's task is
//! polled, so a busy proxy adds this delay to every latency sample it takes; the limiter subtracts
//! it ([`super::limiter::Window::proxy_delay_ns`]) so that the proxy's own load, at full speed
//! with a healthy upstream, does not read as the upstream's congestion (the limit would otherwise
//! shrink until the proxy, not the upstream, caps the throughput).
//!
//! Measured by a probe task on every connection worker (`server::workers`) that, every
//! [`PROBE_INTERVAL_NS`], yields once (`tokio::task::yield_now`: the task is woken when the
//! worker next polls the I/O driver, as a socket readiness is) and records how long it took to
//! run again. The totals only
//! grow; each route's limiter takes the difference over its own window.
//!
//! Only an `'adaptive'` limiter reads the delay, so the probes sleep while no route has one
//! ([`RunQueueDelay::set_wanted`], kept by the capacity registry as route tables change): an
//! idle proxy, or one without HTTP routes, is not woken 100 times a second per worker for it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use tokio::sync::Notify;

/// How often the probe measures, ns (10 ms: about ten samples per 100 ms window).
pub(crate) const PROBE_INTERVAL_NS: u64 = 10_000_000;

/// Run-queue delay samples since start (sum and count, relaxed atomics), and whether any
/// limiter reads them.
#[derive(Debug, Default)]
pub(crate) struct RunQueueDelay {
    sum_ns: AtomicU64,
    count: AtomicU64,
    /// Some route's limiter is `'adaptive'` (the probes measure only then).
    wanted: AtomicBool,
    /// Wakes the sleeping probes when `wanted` turns true.
    wake: Notify,
}

impl RunQueueDelay {
    /// Whether the probes should measure: some route's limiter is `'adaptive'`.
    pub(crate) fn wanted(&self) -> bool {
        self.wanted.load(Ordering::Acquire)
    }

    /// Sets [`Self::wanted`]; turning it on wakes the probes waiting in [`Self::until_wanted`].
    pub(crate) fn set_wanted(&self, on: bool) {
        if !self.wanted.swap(on, Ordering::AcqRel) && on {
            self.wake.notify_waiters();
        }
    }

    /// Returns once [`Self::wanted`] is true (at once when it already is).
    pub(crate) async fn until_wanted(&self) {
        loop {
            let woken = self.wake.notified();
            tokio::pin!(woken);
            // Registered before the check, so a `set_wanted(true)` between the two is not lost.
            woken.as_mut().enable();
            if self.wanted() {
                return;
            }
            woken.await;
        }
    }

    /// Records one measured delay (ns).
    pub(crate) fn record(&self, delay_ns: u64) {
        self.sum_ns.fetch_add(delay_ns, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// `(sum_ns, count)` of every sample since start.
    pub(crate) fn totals(&self) -> (u64, u64) {
        (
            self.sum_ns.load(Ordering::Relaxed),
            self.count.load(Ordering::Relaxed),
        )
    }
}

/// The mean delay (ns) between two readings of [`RunQueueDelay::totals`] (0 without samples).
pub(crate) fn mean_between(before: (u64, u64), after: (u64, u64)) -> f64 {
    let n = after.1.saturating_sub(before.1);
    if n == 0 {
        return 0.0;
    }
    after.0.saturating_sub(before.0) as f64 / n as f64
}
