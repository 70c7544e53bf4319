//! The adaptive concurrency limit of one route, in the style of Netflix `concurrency-limits`
//! Gradient2 and Envoy's adaptive concurrency filter.
//!
//! Latency samples (request head forwarded → response head seen, ns) are accumulated in atomics
//! (sum, count) together with the window's largest in-flight count and its refusals. Once per
//! [`WINDOW_NS`] the caller that notices the window is over takes a `try_lock` on the state and
//! recomputes the limit; everybody else goes on (nobody waits, a sample costs a few atomics):
//!
//! - **current** = the window's mean latency less the proxy's own run-queue delay in the window
//!   ([`Window::proxy_delay_ns`], at most half of it): a busy proxy sees every response head late
//!   by that much, and its own load is not the upstream's congestion;
//! - **baseline** (the no-load latency) = the lowest window mean seen, rising towards later
//!   windows without refusals by 1/[`BASELINE_RISE_WINDOWS`] of the difference per window (a
//!   60 s time constant): a lasting change of the upstream is learned once the route serves
//!   without refusing, while a flood (which is refused) cannot teach it that slow is normal;
//! - **gradient** = `max(baseline × tolerance + NOISE_FLOOR, latencyFloorMs) / current`, clamped
//!   to `[MIN_GRADIENT, 1]`: 1 while latency stays near the baseline (or under the floor: an
//!   upstream that answers within a few ms, queue included, is not drowning, and a fast upstream's
//!   latency rises many times over at full speed without harm), down to 0.5 when it rises;
//! - congested (gradient < 1): **limit** ← `min(limit, peak / (1 − priorityShare)) × gradient`
//!   at once, `peak` being the window's largest in-flight count (class `Other` alone fills
//!   `1 − priorityShare` of the limit; multiplicative decrease from the concurrency that
//!   raised the latency: the window mean already averages every sample of 100 ms, and a drowning
//!   upstream needs the cut now); a window whose peak stayed under `minLimit` changes nothing
//!   (its latency rise is not the route's concurrency);
//! - else, when the window had waits or refusals and latency sat at the baseline (or under the
//!   floor) in it and the window before (demand beyond a limit that costs nothing), **limit** grows
//!   by that demand, at least 20 % and at most doubling a window (a slow start: 20 → 2,000 in
//!   under a second when every window is calm); otherwise by `√limit × SMOOTHING` (additive
//!   probing);
//! - the limit is clamped to `[minLimit, maxLimit]`.
//!
//! The limit only grows when it binds: a window whose peak stayed under half the limit without a
//! refusal (the clients, not the upstream, limit the load) does not raise it, so an idle route
//! does not inflate its limit. Nor does a window in which more permits were released without a
//! latency sample (HTTP/2 streams reset before their response, clients gone) than with one: its
//! mean describes a minority of the work the upstream took on, and a rapid reset waiting in the
//! queue would otherwise read as demand past a limit that costs nothing and double it. Connect failures in a window
//! cap the gradient at 0.9; an embedding process's event-loop delay above its threshold caps it
//! at `threshold / delay` (≥ 0.5), like a latency rise.

use super::run_queue::RunQueueDelay;
use crate::config::proxy::{CapacityConfig, ConcurrencyMode};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Length of one measurement window, ns (100 ms).
pub(crate) const WINDOW_NS: u64 = 100_000_000;
/// Windows over which the baseline rises towards the current latency (600 × 100 ms = 60 s).
pub(crate) const BASELINE_RISE_WINDOWS: f64 = 600.0;
/// Weight of the growth step in the smoothed limit.
pub(crate) const SMOOTHING: f64 = 0.2;
/// Smallest gradient: the limit at most halves its target per window.
pub(crate) const MIN_GRADIENT: f64 = 0.5;
/// Latency rise (ns) always tolerated over `baseline × tolerance` (0.5 ms): sub-millisecond
/// jitter of a fast upstream is not congestion.
pub(crate) const NOISE_FLOOR_NS: f64 = 500_000.0;
/// A window whose mean latency is at most `baseline ×` this counts as "at the baseline" (fast
/// growth when the limit refused requests).
pub(crate) const AT_BASELINE: f64 = 1.05;
/// Gradient cap of a window with connect failures.
pub(crate) const CONNECT_FAILURE_GRADIENT: f64 = 0.9;

/// What one window measured.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Window {
    /// Latency samples in the window.
    pub samples: u64,
    /// Their mean, ns (0 without samples).
    pub mean_ns: f64,
    /// Largest in-flight count reached in the window.
    pub max_in_flight: u32,
    /// Acquires refused in the window.
    pub refused: u32,
    /// Permits released in the window without a latency sample (resets, clients gone, tunnels).
    pub unsampled: u32,
    /// Upstream connect failures in the window.
    pub connect_failures: u32,
    /// Gradient cap from the embedding process's event-loop delay (`None`: under threshold).
    pub external_gradient: Option<f64>,
    /// The proxy's own mean run-queue delay in the window, ns ([`super::run_queue`]).
    pub proxy_delay_ns: f64,
}

impl Window {
    /// The latency the upstream added (ns): the mean less the proxy's own delay, at least half
    /// the mean (a probe is a sample too: it never explains a latency away).
    pub(crate) fn upstream_ns(&self) -> f64 {
        (self.mean_ns - self.proxy_delay_ns.max(0.0)).max(self.mean_ns / 2.0)
    }
}

/// The limiter's learned state (under its lock).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct State {
    /// The route's config.
    pub cfg: CapacityConfig,
    /// The adaptive limit (fractional; the enforced limit is its floor).
    pub limit: f64,
    /// No-load latency, ns (0 until the first sample).
    pub baseline_ns: f64,
    /// Mean latency of the last window with samples, ns (0 until the first sample).
    pub current_ns: f64,
    /// The proxy's own run-queue delay in the last window with samples, ns.
    pub proxy_delay_ns: f64,
    /// Whether the last window was at the baseline (fast growth needs two in a row: the window
    /// after a cut drains the upstream's queue and always looks calm).
    pub calm: bool,
}

impl State {
    /// A fresh state at `cfg.initial_limit`.
    pub(crate) fn new(cfg: CapacityConfig) -> State {
        State {
            cfg,
            limit: f64::from(cfg.initial_limit),
            baseline_ns: 0.0,
            current_ns: 0.0,
            proxy_delay_ns: 0.0,
            calm: false,
        }
    }

    /// `latencyFloorMs` in ns.
    fn floor_ns(&self) -> f64 {
        self.cfg.latency_floor_ms * 1e6
    }

    /// The latency (ns) past which the limit shrinks: `baseline × tolerance + NOISE_FLOOR_NS`,
    /// at least `latencyFloorMs`.
    pub(crate) fn allowed_ns(&self) -> f64 {
        (self.baseline_ns * self.cfg.tolerance + NOISE_FLOOR_NS).max(self.floor_ns())
    }

    /// Applies one window (see the module doc); returns the new limit.
    pub(crate) fn update(&mut self, w: &Window) -> f64 {
        let upstream_ns = w.upstream_ns();
        if w.samples > 0 {
            let cur = upstream_ns;
            self.current_ns = w.mean_ns;
            self.proxy_delay_ns = w.proxy_delay_ns;
            if self.baseline_ns == 0.0 || cur < self.baseline_ns {
                self.baseline_ns = cur;
            } else if w.refused == 0 {
                self.baseline_ns += (cur - self.baseline_ns) / BASELINE_RISE_WINDOWS;
            }
        }
        if self.cfg.mode != ConcurrencyMode::Adaptive {
            return self.limit;
        }
        let mut gradient: f64 = 1.0;
        if w.samples > 0 && w.mean_ns > 0.0 {
            let allowed = self.allowed_ns();
            gradient = (allowed / upstream_ns).clamp(MIN_GRADIENT, 1.0);
        }
        if w.connect_failures > 0 {
            gradient = gradient.min(CONNECT_FAILURE_GRADIENT);
        }
        if let Some(g) = w.external_gradient {
            gradient = gradient.min(g.clamp(MIN_GRADIENT, 1.0));
        }
        let (min, max) = (f64::from(self.cfg.min_limit), f64::from(self.cfg.max_limit));
        let peak = f64::from(w.max_in_flight);
        let next = if gradient < 1.0 {
            self.calm = false;
            if peak < min {
                return self.limit;
            }
            // Others alone fill only `1 − priorityShare` of the limit: scale their peak up.
            let full = peak / (1.0 - self.cfg.priority_share.clamp(0.0, 0.9));
            self.limit.min(full) * gradient
        } else {
            let binds = peak >= self.limit / 2.0 || w.refused > 0;
            if !binds || w.samples == 0 || u64::from(w.unsampled) > w.samples {
                return self.limit;
            }
            let at_baseline = upstream_ns <= (self.baseline_ns * AT_BASELINE).max(self.floor_ns());
            let calm = std::mem::replace(&mut self.calm, at_baseline);
            if w.refused > 0 && at_baseline && calm {
                // Demand past a limit that costs nothing: grow by what waited (or was refused)
                // in the window, at least 20 % and at most doubling (a slow start).
                let demand = f64::from(w.refused).min(self.limit);
                self.limit + demand.max(self.limit * SMOOTHING)
            } else {
                self.limit + self.limit.sqrt() * SMOOTHING
            }
        };
        self.limit = next.clamp(min, max);
        self.limit
    }
}

/// The window accumulators and the state; see the module doc.
#[derive(Debug)]
pub(crate) struct Limiter {
    sum_ns: AtomicU64,
    count: AtomicU64,
    max_in_flight: AtomicU32,
    refused: AtomicU32,
    /// Permits released in the window without a sample ([`Window::unsampled`]).
    unsampled: AtomicU32,
    connect_failures: AtomicU32,
    /// Start of the current window, CLOCK_MONOTONIC ns.
    window_start: AtomicU64,
    /// The proxy's run-queue delay probe, and its totals when the last window closed (written
    /// only by the roller, under `state`'s lock).
    run_queue: Arc<RunQueueDelay>,
    run_queue_seen: [AtomicU64; 2],
    state: Mutex<State>,
}

impl Limiter {
    /// A limiter at `cfg.initial_limit`, its first window starting at `now_ns`, that discounts
    /// the proxy's run-queue delay measured by `run_queue` ([`super::run_queue`]).
    pub(crate) fn new(cfg: CapacityConfig, now_ns: u64, run_queue: Arc<RunQueueDelay>) -> Limiter {
        let (sum, count) = run_queue.totals();
        Limiter {
            run_queue,
            run_queue_seen: [AtomicU64::new(sum), AtomicU64::new(count)],
            sum_ns: AtomicU64::new(0),
            count: AtomicU64::new(0),
            max_in_flight: AtomicU32::new(0),
            refused: AtomicU32::new(0),
            unsampled: AtomicU32::new(0),
            connect_failures: AtomicU32::new(0),
            window_start: AtomicU64::new(now_ns),
            state: Mutex::new(State::new(cfg)),
        }
    }

    /// Records one latency sample (ns).
    #[inline]
    pub(crate) fn sample(&self, latency_ns: u64) {
        self.sum_ns.fetch_add(latency_ns, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// Records the in-flight count an acquire reached.
    #[inline]
    pub(crate) fn in_flight(&self, n: u32) {
        self.max_in_flight.fetch_max(n, Ordering::Relaxed);
    }

    /// Records a refused acquire.
    #[inline]
    pub(crate) fn refused(&self) {
        self.refused.fetch_add(1, Ordering::Relaxed);
    }

    /// Records a permit released without a latency sample ([`Window::unsampled`]).
    #[inline]
    pub(crate) fn unsampled(&self) {
        self.unsampled.fetch_add(1, Ordering::Relaxed);
    }

    /// Records an upstream connect failure.
    #[inline]
    pub(crate) fn connect_failed(&self) {
        self.connect_failures.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether the window that started at the last roll is over at `now_ns`.
    #[inline]
    pub(crate) fn due(&self, now_ns: u64) -> bool {
        now_ns.saturating_sub(self.window_start.load(Ordering::Relaxed)) >= WINDOW_NS
    }

    /// Closes the window and recomputes the limit when it is over at `now_ns` and nobody else is
    /// doing it; `current` is the in-flight count now (the next window starts from it).
    /// `external` is the event-loop gradient cap. Returns the state after the update, `None`
    /// when nothing was done.
    pub(crate) fn roll(&self, now_ns: u64, current: u32, external: Option<f64>) -> Option<State> {
        if !self.due(now_ns) {
            return None;
        }
        let mut st = self.state.try_lock().ok()?;
        if !self.due(now_ns) {
            return None;
        }
        self.window_start.store(now_ns, Ordering::Relaxed);
        let count = self.count.swap(0, Ordering::Relaxed);
        let sum = self.sum_ns.swap(0, Ordering::Relaxed);
        let w = Window {
            samples: count,
            mean_ns: if count > 0 {
                sum as f64 / count as f64
            } else {
                0.0
            },
            max_in_flight: self.max_in_flight.swap(current, Ordering::Relaxed),
            refused: self.refused.swap(0, Ordering::Relaxed),
            unsampled: self.unsampled.swap(0, Ordering::Relaxed),
            connect_failures: self.connect_failures.swap(0, Ordering::Relaxed),
            external_gradient: external,
            proxy_delay_ns: self.proxy_delay_since_last_roll(),
        };
        st.update(&w);
        Some(*st)
    }

    /// The proxy's mean run-queue delay (ns) since the last roll (the caller holds `state`).
    fn proxy_delay_since_last_roll(&self) -> f64 {
        let now = self.run_queue.totals();
        let before = (
            self.run_queue_seen[0].swap(now.0, Ordering::Relaxed),
            self.run_queue_seen[1].swap(now.1, Ordering::Relaxed),
        );
        super::run_queue::mean_between(before, now)
    }

    /// Runs `f` on the state under its lock (config changes, snapshots: never per request).
    pub(crate) fn with_state<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut st)
    }
}
