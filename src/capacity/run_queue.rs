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

use std::sync::atomic::{AtomicU64, Ordering};

/// How often the probe measures, ns (10 ms: about ten samples per 100 ms window).
pub(crate) const PROBE_INTERVAL_NS: u64 = 10_000_000;

/// Run-queue delay samples since start (sum and count, relaxed atomics).
#[derive(Debug, Default)]
pub(crate) struct RunQueueDelay {
    sum_ns: AtomicU64,
    count: AtomicU64,
}

impl RunQueueDelay {
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
