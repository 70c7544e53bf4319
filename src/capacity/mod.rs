//! Per-route upstream capacity (docs/protection.md: Upstream capacity): requests (or, on opaque
//! routes that opt in, connections) in flight to a route's upstreams, their response-head latency,
//! connect failures, and the concurrency limit that keeps the upstream from drowning.
//!
//! A request takes a [`Permit`] before it reaches the upstream ([`Capacity::try_acquire`]) and
//! gives it back when the response head is seen ([`Permit::answered`], a latency sample) or when
//! it ends otherwise (dropped: no sample, so tunnels, upgrades, resets and streaming bodies never
//! read as latency). The limit is learned ([`limiter`], `mode: 'adaptive'`), static (`'fixed'`,
//! HAProxy `maxconn`) or absent (`'off'`: still measured).
//!
//! **Classes.** [`Class::Priority`] (clients known-good since before the overload) may use the
//! whole limit; [`Class::Other`] only `floor(limit × (1 − priorityShare))`, and at least one slot
//! stays reserved to `Priority` when `priorityShare > 0`. That reserve is kept even when a cut
//! of the limit leaves the total above it: `Priority` is admitted while it holds fewer than its
//! reserved slots, so the upstream sees at most `limit + reserve` for the moment after a cut.
//!
//! **Overload.** A route is overloaded from a refused acquire (or an event-loop delay report over
//! `overload.eventLoopDelayMs`) until [`OVERLOAD_HOLD_NS`] (2 s) pass without another one:
//! [`Capacity::refuses_new`] then tells the accept path to refuse new clients of class `Other`.
//! [`Capacity::tick`] (every ~100 ms) reports the on/off transitions for `'overload'` events.
//!
//! Per request the cost is a few atomics: a CAS on the in-flight count, a `fetch_max`, and on
//! release two subtractions plus the sample's two additions; the window is closed by whoever
//! notices it is over and wins a `try_lock` ([`limiter::Limiter::roll`]).

pub(crate) mod limiter;
pub(crate) mod queue;
pub(crate) mod registry;
pub(crate) mod run_queue;
#[cfg(test)]
mod tests;

pub use crate::metrics::upstream::CapacitySnapshot;
pub use queue::{Admit, Queued};
pub use registry::CapacityRegistry;

use crate::config::proxy::{CapacityConfig, ConcurrencyMode};
use limiter::{Limiter, State};
use run_queue::RunQueueDelay;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

/// A route stays overloaded until this long (ns, 2 s) passed without a refusal or an event-loop
/// delay over its threshold.
pub(crate) const OVERLOAD_HOLD_NS: u64 = 2_000_000_000;

/// Longest a reset stream keeps its permit ([`Capacity::reset_hold_ns`]), ns (10 s).
pub(crate) const MAX_RESET_HOLD_NS: u64 = 10_000_000_000;

/// How long (ns, 10 s) before an overload episode began a client must have been known-good to be
/// [`Class::Priority`] in it: standing earned during (or just before) a flood buys no priority.
pub const PRIORITY_SEASONING_NS: u64 = 10_000_000_000;

/// Overloads less than this apart (ns, 5 min) are one episode for [`Capacity::overload_since`]:
/// a flood that pauses, or whose sources the guards box and release in turn, keeps the start of
/// its first overload, so a client that arrived with it and was marked known-good meanwhile
/// never ages into priority between two waves.
pub(crate) const EPISODE_GAP_NS: u64 = 300_000_000_000;

/// Which class a request/connection belongs to for overload priority.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Known-good since before the overload (`Engine::is_priority`): may use the whole limit.
    Priority,
    /// Everybody else: `limit × (1 − priorityShare)`.
    Other,
}

/// A refused [`Capacity::try_acquire`]: the class's share of the limit is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overloaded {
    /// Requests in flight when refused.
    pub in_flight: u32,
    /// The route's limit then.
    pub limit: u32,
    /// `retryAfterS` of the route (the answer's `Retry-After`, seconds).
    pub retry_after_s: u32,
}

/// An overload on/off transition (the `'overload'` event's payload, without the route name).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct OverloadChange {
    /// Overloaded now (true) or no longer.
    pub(crate) on: bool,
    /// Requests in flight.
    pub(crate) in_flight: u32,
    /// The limit (`u32::MAX` with `mode: 'off'`).
    pub(crate) limit: u32,
    /// Mean response-head latency of the last measured window, ms.
    pub(crate) latency_ms: f64,
    /// The no-load latency baseline, ms.
    pub(crate) baseline_ms: f64,
}

const MODE_ADAPTIVE: u8 = 0;
const MODE_FIXED: u8 = 1;
const MODE_OFF: u8 = 2;

fn mode_code(m: ConcurrencyMode) -> u8 {
    match m {
        ConcurrencyMode::Adaptive => MODE_ADAPTIVE,
        ConcurrencyMode::Fixed => MODE_FIXED,
        ConcurrencyMode::Off => MODE_OFF,
    }
}

/// `floor(limit × (1 − share))`, leaving at least one slot to `Priority` when `share > 0`.
fn other_cap(limit: u32, share: f64) -> u32 {
    if share <= 0.0 || limit == u32::MAX {
        return limit;
    }
    let c = (f64::from(limit) * (1.0 - share)).floor() as u32;
    c.min(limit.saturating_sub(1))
}

/// One route's upstream capacity (one per route name, surviving `updateConfig`).
#[derive(Debug)]
pub struct Capacity {
    mode: AtomicU8,
    /// The enforced limit (`u32::MAX` when off).
    limit: AtomicU32,
    /// The limit of class `Other`.
    other_cap: AtomicU32,
    retry_after_s: AtomicU32,
    /// `queueTimeoutMs` and `maxQueue` (0: no queue).
    queue_timeout_ms: AtomicU32,
    max_queue: AtomicU32,
    waiters: queue::Waiters,
    in_flight: AtomicU32,
    in_flight_priority: AtomicU32,
    refused: AtomicU64,
    refused_priority: AtomicU64,
    answered: AtomicU64,
    connect_failures: AtomicU64,
    connect_sum_ns: AtomicU64,
    connect_count: AtomicU64,
    /// Last refusal or over-threshold delay report, ns (0 = never).
    last_pressure_ns: AtomicU64,
    /// When the current (or last) overload episode began, ns (0 = never).
    episode_start_ns: AtomicU64,
    /// The overload state last reported by [`Capacity::tick`].
    reported_on: AtomicBool,
    /// Last event-loop delay reported (f64 bits, ms) and when (ns).
    external_delay: AtomicU64,
    external_at_ns: AtomicU64,
    /// `overload.eventLoopDelayMs` (f64 bits; 0.0 = none).
    delay_threshold: AtomicU64,
    limiter: Limiter,
    /// [`Capacity::reset_hold_ns`], published with each window.
    latency_hint_ns: AtomicU64,
    /// Whether an adaptive limit may still grow towards the demand (published with the limit):
    /// no window measured yet, or the last measured one calm (latency at the baseline or under
    /// the floor), and the limit under `maxLimit`. A queue longer than such a limit is not
    /// overload.
    growing: AtomicBool,
    /// The slots of unanswered requests whose connection ended: when each is released (ns) and
    /// its class ([`Capacity::park`]). At most the limit (they count in flight). Slots, not
    /// permits: a permit holds its capacity, and a route must not hold itself.
    parked: Mutex<Vec<(u64, Class)>>,
}

impl Capacity {
    /// A route's capacity at `cfg`'s initial limit, with no run-queue probe (its latency samples
    /// are taken as the upstream's).
    #[cfg(test)]
    pub(crate) fn new(cfg: CapacityConfig) -> Capacity {
        Capacity::with_run_queue(cfg, Arc::default())
    }

    /// A route's capacity at `cfg`'s initial limit whose limiter discounts the proxy's own
    /// run-queue delay measured by `run_queue` ([`run_queue`]).
    pub(crate) fn with_run_queue(cfg: CapacityConfig, run_queue: Arc<RunQueueDelay>) -> Capacity {
        let c = Capacity {
            mode: AtomicU8::new(mode_code(cfg.mode)),
            limit: AtomicU32::new(0),
            other_cap: AtomicU32::new(0),
            retry_after_s: AtomicU32::new(cfg.retry_after_s),
            queue_timeout_ms: AtomicU32::new(0),
            max_queue: AtomicU32::new(0),
            waiters: queue::Waiters::default(),
            in_flight: AtomicU32::new(0),
            in_flight_priority: AtomicU32::new(0),
            refused: AtomicU64::new(0),
            refused_priority: AtomicU64::new(0),
            answered: AtomicU64::new(0),
            connect_failures: AtomicU64::new(0),
            connect_sum_ns: AtomicU64::new(0),
            connect_count: AtomicU64::new(0),
            last_pressure_ns: AtomicU64::new(0),
            episode_start_ns: AtomicU64::new(0),
            reported_on: AtomicBool::new(false),
            external_delay: AtomicU64::new(0),
            external_at_ns: AtomicU64::new(0),
            delay_threshold: AtomicU64::new(0),
            limiter: Limiter::new(cfg, 0, run_queue),
            latency_hint_ns: AtomicU64::new(0),
            growing: AtomicBool::new(true),
            parked: Mutex::default(),
        };
        c.publish(&State::new(cfg));
        c
    }

    /// Hot reload: the new config applies at once; the learned limit and latencies are kept (the
    /// limit clamped into the new `[minLimit, maxLimit]`).
    pub(crate) fn set_config(&self, cfg: CapacityConfig) {
        let st = self.limiter.with_state(|st| {
            st.cfg = cfg;
            st.limit = st
                .limit
                .clamp(f64::from(cfg.min_limit), f64::from(cfg.max_limit));
            *st
        });
        self.publish(&st);
    }

    /// Whether the limit is learned (`mode: 'adaptive'`).
    pub(crate) fn is_adaptive(&self) -> bool {
        self.mode.load(Ordering::Relaxed) == MODE_ADAPTIVE
    }

    /// Sets `overload.eventLoopDelayMs` (`None`: the signal is ignored).
    pub(crate) fn set_delay_threshold(&self, ms: Option<f64>) {
        let bits = ms.filter(|m| *m > 0.0).unwrap_or(0.0).to_bits();
        self.delay_threshold.store(bits, Ordering::Relaxed);
    }

    /// Stores the enforced limits of `st`.
    fn publish(&self, st: &State) {
        let limit = match st.cfg.mode {
            ConcurrencyMode::Adaptive => st.limit.floor().max(1.0) as u32,
            ConcurrencyMode::Fixed => st.cfg.limit,
            ConcurrencyMode::Off => u32::MAX,
        };
        self.mode.store(mode_code(st.cfg.mode), Ordering::Relaxed);
        self.retry_after_s
            .store(st.cfg.retry_after_s, Ordering::Relaxed);
        let queues = st.cfg.queues();
        let (timeout, max) = (st.cfg.queue_timeout_ms, st.cfg.max_queue);
        self.queue_timeout_ms
            .store(if queues { timeout } else { 0 }, Ordering::Relaxed);
        self.max_queue.store(max, Ordering::Relaxed);
        self.other_cap
            .store(other_cap(limit, st.cfg.priority_share), Ordering::Relaxed);
        if !queues && !self.waiters.is_empty() {
            // The queue was switched off: the waiters give up now.
            self.wake_all();
        }
        let calm = st.current_ns == 0.0 || st.calm;
        self.growing
            .store(calm && limit < st.cfg.max_limit, Ordering::Relaxed);
        let before = self.limit.swap(limit, Ordering::SeqCst);
        if limit > before && !self.waiters.is_empty() {
            // Room for the waiters the larger limit lets in.
            let room = limit.saturating_sub(self.in_flight.load(Ordering::SeqCst));
            self.wake(room.min(limit - before));
        }
        let hint = st
            .current_ns
            .max(st.baseline_ns)
            .min(MAX_RESET_HOLD_NS as f64);
        self.latency_hint_ns.store(hint as u64, Ordering::Relaxed);
    }

    /// How long a stream the client reset before its response keeps its permit (ns): the
    /// latency of the last measured window (at least the baseline, at most
    /// [`MAX_RESET_HOLD_NS`]), the time the upstream likely still spends on it — a reset does
    /// not stop the application's work, so rapid reset cannot make that work invisible.
    pub(crate) fn reset_hold_ns(&self) -> u64 {
        self.latency_hint_ns.load(Ordering::Relaxed)
    }

    /// The enforced limit (`u32::MAX` with `mode: 'off'`).
    pub(crate) fn limit(&self) -> u32 {
        self.limit.load(Ordering::Relaxed)
    }

    /// Requests (or connections) in flight.
    pub(crate) fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// A request (HTTP/1.1 head, HTTP/2 stream) or, on opaque TCP routes, a connection is about
    /// to reach the upstream at `now_ns`. Err when the class's share of the limit is full (then
    /// the route counts as overloaded for [`OVERLOAD_HOLD_NS`]).
    pub(crate) fn try_acquire(
        self: &Arc<Self>,
        class: Class,
        now_ns: u64,
    ) -> Result<Permit, Overloaded> {
        match self.take(class) {
            Ok(n) => Ok(self.permit(class, n, now_ns)),
            Err(cur) => Err(self.refuse(class, cur, now_ns)),
        }
    }

    /// The cap of `class` now (`u32::MAX` with `mode: 'off'`).
    #[inline]
    fn cap(&self, class: Class) -> u32 {
        match class {
            _ if self.mode.load(Ordering::Relaxed) == MODE_OFF => u32::MAX,
            Class::Priority => self.limit.load(Ordering::Relaxed),
            Class::Other => self.other_cap.load(Ordering::Relaxed),
        }
    }

    /// Whether an adaptive limit is still growing towards the demand (the `growing` field's
    /// meaning: calm and under `maxLimit`).
    fn growing(&self) -> bool {
        self.is_adaptive() && self.growing.load(Ordering::Relaxed)
    }

    /// Permits free for `class` now (the priority reserve aside).
    fn room(&self, class: Class) -> u32 {
        self.cap(class)
            .saturating_sub(self.in_flight.load(Ordering::SeqCst))
    }

    /// Whether a request of `class` would find room now (the priority reserve included).
    fn has_room(&self, class: Class) -> bool {
        self.room(class) > 0 || (class == Class::Priority && self.reserve_free())
    }

    /// One more in flight when `class` has room: `Ok(in flight after)`, else `Err(in flight)`.
    /// Nothing else is counted.
    #[inline]
    fn take(&self, class: Class) -> Result<u32, u32> {
        let cap = self.cap(class);
        let mut cur = self.in_flight.load(Ordering::SeqCst);
        loop {
            if cur >= cap && !(class == Class::Priority && self.reserve_free()) {
                return Err(cur);
            }
            match self.in_flight.compare_exchange_weak(
                cur,
                cur + 1,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return Ok(cur + 1),
                Err(c) => cur = c,
            }
        }
    }

    /// The permit of a [`Capacity::take`] that brought the in-flight count to `n` at `now_ns`.
    #[inline]
    fn permit(self: &Arc<Self>, class: Class, n: u32, now_ns: u64) -> Permit {
        if class == Class::Priority {
            self.in_flight_priority.fetch_add(1, Ordering::Relaxed);
        }
        self.limiter.in_flight(n);
        Permit {
            capacity: self.clone(),
            class,
            start_ns: now_ns,
            end: End::Unanswered,
        }
    }

    /// `queueTimeoutMs` (0: no queue) and `maxQueue`.
    fn queue_config(&self) -> (u32, u32) {
        (
            self.queue_timeout_ms.load(Ordering::Relaxed),
            self.max_queue.load(Ordering::Relaxed),
        )
    }

    /// Whether class `Priority` holds fewer than its reserved slots (`limit − other cap`, the
    /// `priorityShare`): then it is admitted even when the total is at (or, just after the limit
    /// was cut, above) the limit, so a cut never takes the known-good clients' share. The total
    /// stays within `limit + reserve`.
    fn reserve_free(&self) -> bool {
        let limit = self.limit.load(Ordering::Relaxed);
        let reserve = limit.saturating_sub(self.other_cap.load(Ordering::Relaxed));
        self.in_flight_priority.load(Ordering::Relaxed) < reserve
    }

    fn refuse(&self, class: Class, in_flight: u32, now_ns: u64) -> Overloaded {
        self.refused.fetch_add(1, Ordering::Relaxed);
        if class == Class::Priority {
            self.refused_priority.fetch_add(1, Ordering::Relaxed);
        }
        self.limiter.refused();
        self.pressure(now_ns);
        Overloaded {
            in_flight,
            limit: self.limit.load(Ordering::Relaxed),
            retry_after_s: self.retry_after_s.load(Ordering::Relaxed),
        }
    }

    /// Records overload pressure at `now_ns` (a new episode when the last pressure is
    /// [`EPISODE_GAP_NS`] old).
    fn pressure(&self, now_ns: u64) {
        let last = self.last_pressure_ns.swap(now_ns.max(1), Ordering::Relaxed);
        if last == 0 || now_ns.saturating_sub(last) >= EPISODE_GAP_NS {
            self.episode_start_ns.store(now_ns, Ordering::Relaxed);
        }
    }

    /// Whether new connections of clients of class `Other` are refused at `now_ns` (the route
    /// is overloaded; never with `mode: 'off'`).
    #[inline]
    pub(crate) fn refuses_new(&self, now_ns: u64) -> bool {
        let last = self.last_pressure_ns.load(Ordering::Relaxed);
        last != 0
            && now_ns.saturating_sub(last) < OVERLOAD_HOLD_NS
            && self.mode.load(Ordering::Relaxed) != MODE_OFF
    }

    /// When the current overload episode began (CLOCK_MONOTONIC ns; overloads less than
    /// [`EPISODE_GAP_NS`] apart are one episode), `None` when the route is not overloaded at
    /// `now_ns`: what `Engine::is_priority` compares first-marked times with.
    pub(crate) fn overload_since(&self, now_ns: u64) -> Option<u64> {
        self.refuses_new(now_ns)
            .then(|| self.episode_start_ns.load(Ordering::Relaxed))
    }

    /// The `since_ns` of `Engine::is_priority` at `now_ns`: the overload episode's start (now,
    /// when the route is not overloaded) minus [`PRIORITY_SEASONING_NS`]. Ask only when a class
    /// `Other` acquire was refused (then retry as `Priority`), so the common path reads no
    /// client standing.
    pub(crate) fn priority_since(&self, now_ns: u64) -> u64 {
        let start = self.overload_since(now_ns).unwrap_or(now_ns);
        start.saturating_sub(PRIORITY_SEASONING_NS)
    }

    /// Counts an upstream connect failure (also a congestion hint: the window's gradient is
    /// capped at [`limiter::CONNECT_FAILURE_GRADIENT`]).
    pub(crate) fn connect_failed(&self) {
        self.connect_failures.fetch_add(1, Ordering::Relaxed);
        self.limiter.connect_failed();
    }

    /// Records an upstream connect time (ns; `connectMs` in the snapshot).
    pub(crate) fn connected(&self, connect_ns: u64) {
        self.connect_sum_ns.fetch_add(connect_ns, Ordering::Relaxed);
        self.connect_count.fetch_add(1, Ordering::Relaxed);
    }

    /// The embedding process's event-loop delay (ms) measured at `now_ns`: above
    /// `overload.eventLoopDelayMs` the route counts as overloaded and the limit shrinks as for a
    /// latency rise (gradient `threshold / delay`, at least 0.5).
    pub(crate) fn set_external_delay(&self, delay_ms: f64, now_ns: u64) {
        let delay_ms = if delay_ms.is_finite() {
            delay_ms.max(0.0)
        } else {
            0.0
        };
        self.external_delay
            .store(delay_ms.to_bits(), Ordering::Relaxed);
        self.external_at_ns.store(now_ns, Ordering::Relaxed);
        let threshold = f64::from_bits(self.delay_threshold.load(Ordering::Relaxed));
        if threshold > 0.0 && delay_ms > threshold {
            self.pressure(now_ns);
        }
    }

    /// The event-loop gradient cap at `now_ns` (a report within [`OVERLOAD_HOLD_NS`] over the
    /// threshold).
    fn external_gradient(&self, now_ns: u64) -> Option<f64> {
        let threshold = f64::from_bits(self.delay_threshold.load(Ordering::Relaxed));
        let delay = f64::from_bits(self.external_delay.load(Ordering::Relaxed));
        let at = self.external_at_ns.load(Ordering::Relaxed);
        (threshold > 0.0 && delay > threshold && now_ns.saturating_sub(at) < OVERLOAD_HOLD_NS)
            .then(|| threshold / delay)
    }

    /// Closes the limiter's window when it is over (see [`limiter::Limiter::roll`]).
    fn roll(&self, now_ns: u64) {
        let ext = self.external_gradient(now_ns);
        if let Some(st) = self.limiter.roll(now_ns, self.in_flight(), ext) {
            self.publish(&st);
        }
    }

    /// Keeps `permits` (each with its release time, ns) after their connection ended: an HTTP/2
    /// connection closed with streams reset before their response, or still open, leaves work
    /// on the upstream that the route's capacity must go on counting — else a client whose
    /// connections the guard closes (rapid reset) frees their permits at once and sends the
    /// next batch. Released by [`Capacity::tick`] (up to 100 ms late).
    pub(crate) fn park(&self, permits: impl IntoIterator<Item = (u64, Permit)>) {
        let mut p = self.parked.lock().unwrap_or_else(|e| e.into_inner());
        for (until, mut permit) in permits {
            // Its slot stays counted here; the permit goes without releasing it.
            permit.end = End::Parked;
            p.push((until, permit.class));
        }
    }

    /// Permits parked now ([`Capacity::park`]).
    #[cfg(test)]
    pub(crate) fn parked(&self) -> usize {
        self.parked.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Releases the parked permits whose time is over at `now_ns` (all with `u64::MAX`).
    fn release_parked(&self, now_ns: u64) {
        let done: Vec<(u64, Class)> = {
            let mut p = self.parked.lock().unwrap_or_else(|e| e.into_inner());
            p.extract_if(.., |(until, _)| *until <= now_ns).collect()
        };
        // Released outside the lock: each release may wake a waiter.
        for (_, class) in done {
            self.release(class, End::Unanswered);
        }
    }

    /// Frees one slot of `class` that ended as `end` (a permit's drop, a parked slot's time):
    /// counts an unanswered one for the limiter and wakes a waiter.
    fn release(&self, class: Class, end: End) {
        if class == Class::Priority {
            self.in_flight_priority.fetch_sub(1, Ordering::Relaxed);
        }
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        if end == End::Unanswered {
            self.limiter.unsampled();
        }
        self.released();
    }

    /// Every ~100 ms: releases parked permits whose time is over, closes the limiter's window
    /// if nobody did, and reports an overload on/off transition since the last call.
    pub(crate) fn tick(&self, now_ns: u64) -> Option<OverloadChange> {
        self.release_parked(now_ns);
        self.roll(now_ns);
        let on = self.refuses_new(now_ns);
        if self.reported_on.swap(on, Ordering::Relaxed) == on {
            return None;
        }
        let (latency_ms, baseline_ms) = self
            .limiter
            .with_state(|s| (ns_to_ms(s.current_ns), ns_to_ms(s.baseline_ns)));
        Some(OverloadChange {
            on,
            in_flight: self.in_flight(),
            limit: self.limit(),
            latency_ms,
            baseline_ms,
        })
    }

    /// `metrics().routeMetrics[i].upstream` at `now_ns`.
    pub(crate) fn snapshot(&self, now_ns: u64) -> CapacitySnapshot {
        let st = self.limiter.with_state(|s| *s);
        let off = st.cfg.mode == ConcurrencyMode::Off;
        let n = self.connect_count.load(Ordering::Relaxed);
        let connect_ms = if n == 0 {
            0.0
        } else {
            ns_to_ms(self.connect_sum_ns.load(Ordering::Relaxed) as f64 / n as f64)
        };
        let in_flight = self.in_flight();
        let priority = self.in_flight_priority.load(Ordering::Relaxed);
        CapacitySnapshot {
            mode: st.cfg.mode.as_str(),
            in_flight,
            in_flight_priority: priority.min(in_flight),
            limit: (!off).then(|| self.limit()),
            other_limit: (!off).then(|| self.other_cap.load(Ordering::Relaxed)),
            latency_ms: ns_to_ms(st.current_ns),
            proxy_delay_ms: ns_to_ms(st.proxy_delay_ns),
            baseline_ms: ns_to_ms(st.baseline_ns),
            overloaded: self.refuses_new(now_ns),
            refused: self.refused.load(Ordering::Relaxed),
            refused_priority: self.refused_priority.load(Ordering::Relaxed),
            queued: self.waiters.len(),
            waited: self.waiters.waited(),
            queue_timeouts: self.waiters.timeouts(),
            answered: self.answered.load(Ordering::Relaxed),
            connect_failures: self.connect_failures.load(Ordering::Relaxed),
            connect_ms,
        }
    }
}

/// ns → ms, rounded to the µs.
fn ns_to_ms(ns: f64) -> f64 {
    (ns / 1_000.0).round() / 1_000.0
}

/// One request (or connection) in flight to the upstream. Dropped without
/// [`Permit::answered`]: released without a latency sample (reset, tunnel, client gone, upgrade,
/// streaming).
#[derive(Debug)]
pub struct Permit {
    capacity: Arc<Capacity>,
    class: Class,
    start_ns: u64,
    end: End,
}

/// How a [`Permit`] ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// Dropped without an answer: released, counted unsampled for the limiter.
    Unanswered,
    /// [`Permit::answered`] took its latency sample: released.
    Answered,
    /// [`Capacity::park`] keeps its slot: the drop releases nothing.
    Parked,
}

impl Permit {
    /// The response head was seen at `now_ns`: records the latency sample and releases.
    pub(crate) fn answered(mut self, now_ns: u64) {
        self.end = End::Answered;
        let c = &self.capacity;
        c.answered.fetch_add(1, Ordering::Relaxed);
        c.limiter.sample(now_ns.saturating_sub(self.start_ns));
        if c.limiter.due(now_ns) {
            c.roll(now_ns);
        }
    }

    /// The class the permit was taken for.
    #[cfg(test)]
    pub(crate) fn class(&self) -> Class {
        self.class
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if self.end != End::Parked {
            self.capacity.release(self.class, self.end);
        }
    }
}
