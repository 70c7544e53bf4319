//! The capacity engine against a simulated upstream, with injected time.
//!
//! The upstream has `c` workers and serves each request in `s` ns, first come first served: a
//! request's latency is `s` while at most `c` are in flight, and grows with the queue past that.
//! Clients run a closed loop: send, wait for the answer, send again after `think` ns; a refused
//! client retries after 5 ms. The limiter only sees the latency samples, like in production.

use super::*;
use crate::config::proxy::{CapacityConfig, ConcurrencyMode};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

const MS: u64 = crate::clock::NS_PER_MS;
const SEC: u64 = 1_000 * MS;
const RETRY: u64 = 5 * MS;

/// One simulated client.
struct Client {
    class: Class,
    think: u64,
    permit: Option<Permit>,
}

/// What a run saw.
#[derive(Default)]
struct Run {
    /// `(time, limit)` at every 100 ms tick.
    limits: Vec<(u64, u32)>,
    /// `(time, peak)`: the largest in-flight count at the upstream in the 100 ms before each tick.
    peaks: Vec<(u64, u32)>,
    /// Answers and refusals per class `[Priority, Other]`.
    answered: [u64; 2],
    refused: [u64; 2],
    /// Largest in-flight count at the upstream since the last tick.
    max_in_flight: u32,
    /// Ticks at which `refuses_new` was on.
    overloaded_ticks: u64,
    /// Overload transitions reported by `tick`.
    changes: Vec<OverloadChange>,
}

impl Run {
    /// Smallest and largest limit over the ticks in `[from, to)`.
    fn range(&self, from: u64, to: u64) -> (u32, u32) {
        Self::span(&self.limits, from, to)
    }

    /// Smallest and largest per-tick in-flight peak over the ticks in `[from, to)`.
    fn peak_range(&self, from: u64, to: u64) -> (u32, u32) {
        Self::span(&self.peaks, from, to)
    }

    fn span(v: &[(u64, u32)], from: u64, to: u64) -> (u32, u32) {
        let l = v.iter().filter(|(t, _)| (from..to).contains(t));
        let lo = l.clone().map(|x| x.1).min().unwrap();
        let hi = l.map(|x| x.1).max().unwrap();
        (lo, hi)
    }
}

/// The simulated upstream: `workers` free times (a min-heap) and its parameters, which `phase`
/// may change with time.
struct Upstream {
    free: BinaryHeap<Reverse<u64>>,
    s: u64,
}

impl Upstream {
    fn new(c: usize, s: u64) -> Upstream {
        Upstream {
            free: (0..c).map(|_| Reverse(0)).collect(),
            s,
        }
    }

    /// The time a request arriving at `now` is answered (FIFO over `c` workers).
    fn serve(&mut self, now: u64) -> u64 {
        let Reverse(free) = self.free.pop().unwrap();
        let done = free.max(now) + self.s;
        self.free.push(Reverse(done));
        done
    }

    fn resize(&mut self, c: usize, s: u64) {
        let now_free: Vec<u64> = self.free.drain().map(|r| r.0).collect();
        let latest = now_free.iter().copied().max().unwrap_or(0);
        self.free = (0..c)
            .map(|i| Reverse(now_free.get(i).copied().unwrap_or(latest)))
            .collect();
        self.s = s;
    }
}

/// Runs `clients` against an upstream of `c` workers × `s` ns from `start` until `end`; `phase(t)` may return
/// a new `(c, s)` at a 100 ms tick.
fn simulate(
    cap: &Arc<Capacity>,
    clients: &mut [Client],
    (c, s): (usize, u64),
    (start, end): (u64, u64),
    phase: impl Fn(u64) -> Option<(usize, u64)>,
) -> Run {
    let mut run = Run::default();
    let mut up = Upstream::new(c, s);
    // (time, kind, client): kind 0 = tick, 1 = answer, 2 = send.
    let mut q: BinaryHeap<Reverse<(u64, u8, usize)>> = BinaryHeap::new();
    // First requests spread over a think time (at least 1 ms): clients that think arrive as
    // they would in steady state, not all in the same microsecond.
    let n = clients.len().max(1) as u64;
    for (i, cl) in clients.iter().enumerate() {
        q.push(Reverse((start + i as u64 * cl.think.max(MS) / n, 2, i)));
    }
    q.push(Reverse((start + 100 * MS, 0, 0)));
    while let Some(Reverse((t, kind, i))) = q.pop() {
        if t >= end {
            break;
        }
        match kind {
            0 => {
                if let Some((c, s)) = phase(t) {
                    up.resize(c, s);
                }
                if let Some(ch) = cap.tick(t) {
                    run.changes.push(ch);
                }
                run.overloaded_ticks += u64::from(cap.refuses_new(t));
                run.limits.push((t, cap.limit()));
                run.peaks.push((t, std::mem::take(&mut run.max_in_flight)));
                q.push(Reverse((t + 100 * MS, 0, 0)));
            }
            1 => {
                let cl = &mut clients[i];
                if let Some(p) = cl.permit.take() {
                    run.answered[(p.class() == Class::Other) as usize] += 1;
                    p.answered(t);
                }
                q.push(Reverse((t + cl.think, 2, i)));
            }
            _ => {
                let cl = &mut clients[i];
                let k = (cl.class == Class::Other) as usize;
                match cap.try_acquire(cl.class, t) {
                    Ok(p) => {
                        cl.permit = Some(p);
                        run.max_in_flight = run.max_in_flight.max(cap.in_flight());
                        q.push(Reverse((up.serve(t), 1, i)));
                    }
                    Err(_) => {
                        run.refused[k] += 1;
                        q.push(Reverse((t + RETRY, 2, i)));
                    }
                }
            }
        }
    }
    run
}

fn clients(n: usize, class: Class, think: u64) -> Vec<Client> {
    (0..n)
        .map(|_| Client {
            class,
            think,
            permit: None,
        })
        .collect()
}

fn adaptive() -> Arc<Capacity> {
    Arc::new(Capacity::new(CapacityConfig::default_for(true)))
}

/// A default adaptive route that served 10 closed-loop clients for 2 s (it learned the no-load
/// latency, as a route does from its normal traffic before a flood).
fn warmed() -> Arc<Capacity> {
    let cap = adaptive();
    let mut cl = clients(10, Class::Other, 0);
    let run = simulate(&cap, &mut cl, (20, 10 * MS), (0, 2 * SEC), |_| None);
    assert_eq!(
        (run.refused, cap.limit()),
        ([0, 0], CapacityConfig::default_for(true).initial_limit)
    );
    cap
}

/// C = 20 workers × 10 ms; after 2 s of normal load, 400 closed-loop clients (20 × the
/// capacity), default config (limit 1000, tolerance 1.25, priorityShare 0.2): within 1.5 s of the
/// flood the limit is within [1.5 C, 1.75 C] = [30, 35] and stays there for the next 58.5 s,
/// moving by at most 3; the flood (class `Other`, 80 % of the limit) keeps the upstream's
/// in-flight peak within [C, 1.35 C] = [20, 27]: saturated, latency at most 1.35 × 10 ms.
#[test]
fn adaptive_limit_converges_within_1_5s_and_holds_upstream_in_flight_within_c_to_1_35c() {
    let cap = warmed();
    let mut cl = clients(400, Class::Other, 0);
    let run = simulate(&cap, &mut cl, (20, 10 * MS), (2 * SEC, 62 * SEC), |_| None);
    let (lo, hi) = run.range(3500 * MS, 62 * SEC);
    assert!(lo >= 30 && hi <= 35, "limit in [{lo}, {hi}] after 1.5 s");
    assert!(hi - lo <= 3, "limit moved within [{lo}, {hi}]");
    let (lo, hi) = run.peak_range(3500 * MS, 62 * SEC);
    assert!(lo >= 20 && hi <= 27, "in-flight peaks in [{lo}, {hi}]");
    assert!(run.answered[1] > 100_000, "{}", run.answered[1]);
    let snap = cap.snapshot(62 * SEC);
    assert!(
        snap.baseline_ms >= 10.0 && snap.baseline_ms < 10.1,
        "{}",
        snap.baseline_ms
    );
    assert!(
        snap.latency_ms >= 10.0 && snap.latency_ms <= 13.5,
        "{}",
        snap.latency_ms
    );
    assert!(snap.overloaded);
}

/// The same flood with 4 known-good (`Priority`) clients beside 400 others: the priority clients
/// are never refused once the limit converged (they need 4 slots; the default `priorityShare`
/// 0.2 reserves ≥ 6 of a limit ≥ 30), and get ≥ 57 % of their no-flood answer rate.
#[test]
fn priority_clients_keep_their_reserved_share_under_a_flood() {
    let cap = warmed();
    let mut cl = clients(4, Class::Priority, 0);
    cl.extend(clients(400, Class::Other, 0));
    let warm = simulate(&cap, &mut cl, (20, 10 * MS), (2 * SEC, 4 * SEC), |_| None);
    let (_, hi) = warm.range(3500 * MS, 4 * SEC);
    assert!(hi <= 35);
    let before = cap.snapshot(4 * SEC).refused_priority;
    // Continue from the learned state (the clients of the first part hold no permit now).
    let mut cl2 = clients(4, Class::Priority, 0);
    cl2.extend(clients(400, Class::Other, 0));
    drop(cl);
    let run = simulate(&cap, &mut cl2, (20, 10 * MS), (4 * SEC, 34 * SEC), |_| None);
    assert_eq!(run.refused[0], cap.snapshot(0).refused_priority - before);
    assert_eq!(run.refused[0], 0, "priority refusals");
    // Alone, 4 clients get 100 answers/s each from a 10 ms upstream; under the flood latency is
    // at most 1.75 × 10 ms (every slot of a limit ≤ 35 busy), so ≥ 57 /s each: ≥ 6840 in 30 s.
    assert!(run.answered[0] >= 6_840, "{}", run.answered[0]);
    assert!(run.refused[1] > 0);
}

/// Recovery: under the flood (from t = 2 s) the upstream slows to 5 workers for 10 s
/// (t = 10..20 s) and the limit falls to [10, 12] (`minLimit` 10) within 1 s of it; once the
/// upstream is back to 20 workers the limit is back within [30, 35] within 5 s.
#[test]
fn limit_follows_a_capacity_drop_and_recovers_within_5s() {
    let cap = warmed();
    let mut cl = clients(400, Class::Other, 0);
    let run = simulate(
        &cap,
        &mut cl,
        (20, 10 * MS),
        (2 * SEC, 40 * SEC),
        |t| match t {
            t if t == 10 * SEC => Some((5, 10 * MS)),
            t if t == 20 * SEC => Some((20, 10 * MS)),
            _ => None,
        },
    );
    let (lo, hi) = run.range(11 * SEC, 20 * SEC);
    assert!(lo >= 10 && hi <= 12, "slowed: [{lo}, {hi}]");
    let (lo, hi) = run.range(25 * SEC, 40 * SEC);
    assert!(lo >= 30 && hi <= 35, "recovered: [{lo}, {hi}]");
}

/// Normal load under capacity never meets a refusal or an overload: 15 clients in a closed loop
/// (C = 20), and 150 clients that think 100 ms between requests (~1,360 req/s of a 2,000 req/s
/// upstream), for 60 s each.
#[test]
fn load_under_capacity_is_never_refused() {
    for (n, think) in [(15, 0), (150, 100 * MS)] {
        let cap = adaptive();
        let mut cl = clients(n, Class::Other, think);
        let run = simulate(&cap, &mut cl, (20, 10 * MS), (0, 60 * SEC), |_| None);
        assert_eq!(run.refused, [0, 0], "{n} clients");
        assert_eq!((run.overloaded_ticks, run.changes.len()), (0, 0));
        assert_eq!(cap.snapshot(60 * SEC).refused, 0);
        assert!(run.answered[1] > 50_000, "{}", run.answered[1]);
    }
}

/// `'overload'` transitions: on at the first refusal's tick, off 2 s after the last refusal.
#[test]
fn overload_turns_on_at_a_refusal_and_off_after_2s_without_one() {
    let cfg = CapacityConfig {
        mode: ConcurrencyMode::Fixed,
        limit: 2,
        ..CapacityConfig::default_for(true)
    };
    let cap = Arc::new(Capacity::new(cfg));
    let t = 10 * SEC;
    assert_eq!(cap.tick(t), None);
    // Other may use floor(2 × 0.8) = 1 slot; Priority both.
    let a = cap.try_acquire(Class::Other, t).unwrap();
    assert_eq!(
        cap.try_acquire(Class::Other, t).unwrap_err(),
        Overloaded {
            in_flight: 1,
            limit: 2,
            retry_after_s: 1
        }
    );
    let b = cap.try_acquire(Class::Priority, t).unwrap();
    assert!(cap.try_acquire(Class::Priority, t).is_err());
    assert!(cap.refuses_new(t) && cap.overload_since(t) == Some(t));
    let on = cap.tick(t + MS).unwrap();
    assert_eq!((on.on, on.in_flight, on.limit), (true, 2, 2));
    a.answered(t + 5 * MS);
    drop(b);
    assert_eq!(cap.tick(t + SEC), None);
    assert!(cap.refuses_new(t + 2 * SEC - 1));
    assert_eq!(
        cap.tick(t + 2 * SEC).map(|c| (c.on, c.in_flight)),
        Some((false, 0))
    );
    assert_eq!(cap.overload_since(t + 2 * SEC), None);
    let s = cap.snapshot(t + 2 * SEC);
    assert_eq!(
        (
            s.mode,
            s.limit,
            s.other_limit,
            s.refused,
            s.refused_priority,
            s.answered
        ),
        ("fixed", Some(2), Some(1), 2, 1, 1)
    );
    assert_eq!(
        (s.latency_ms, s.in_flight, s.in_flight_priority),
        (5.0, 0, 0)
    );
    // Overloaded again 7 s later: the same episode (a flood's next wave keeps its start).
    let held = (
        cap.try_acquire(Class::Priority, t + 9 * SEC).unwrap(),
        cap.try_acquire(Class::Priority, t + 9 * SEC).unwrap(),
    );
    assert!(cap.try_acquire(Class::Priority, t + 9 * SEC).is_err());
    assert_eq!(cap.overload_since(t + 9 * SEC), Some(t));
    drop(held);
    // Overloaded again 5 min after the last pressure: a new episode.
    let later = t + 9 * SEC + EPISODE_GAP_NS;
    let _held = (
        cap.try_acquire(Class::Priority, later).unwrap(),
        cap.try_acquire(Class::Priority, later).unwrap(),
    );
    assert!(cap.try_acquire(Class::Priority, later).is_err());
    assert_eq!(cap.overload_since(later), Some(later));
}

/// `mode: 'off'` never refuses and never reports overload, but still measures.
#[test]
fn off_is_unlimited_but_measured() {
    let cap = Arc::new(Capacity::new(CapacityConfig::default_for(false)));
    let held: Vec<_> = (0..5000)
        .map(|_| cap.try_acquire(Class::Other, SEC).unwrap())
        .collect();
    assert_eq!(cap.in_flight(), 5000);
    for p in held {
        p.answered(SEC + 3 * MS);
    }
    cap.set_delay_threshold(Some(10.0));
    cap.set_external_delay(500.0, SEC);
    assert!(!cap.refuses_new(SEC));
    assert_eq!(cap.tick(2 * SEC), None);
    let s = cap.snapshot(2 * SEC);
    assert_eq!(
        (
            s.mode,
            s.limit,
            s.in_flight,
            s.answered,
            s.latency_ms,
            s.baseline_ms
        ),
        ("off", None, 0, 5000, 3.0, 3.0)
    );
}

/// The event-loop delay signal: over `overload.eventLoopDelayMs` the route is overloaded (2 s)
/// and, while the limit binds, it shrinks by `threshold / delay` (≥ 0.5) per window.
#[test]
fn event_loop_delay_counts_as_overload() {
    let cfg = CapacityConfig {
        initial_limit: 100,
        ..CapacityConfig::default_for(true)
    };
    let cap = Arc::new(Capacity::new(cfg));
    cap.set_external_delay(500.0, SEC);
    assert!(!cap.refuses_new(SEC), "no threshold: ignored");
    cap.set_delay_threshold(Some(50.0));
    cap.set_external_delay(40.0, SEC);
    assert!(!cap.refuses_new(SEC), "under the threshold");
    let held: Vec<_> = (0..60)
        .map(|_| cap.try_acquire(Class::Other, SEC).unwrap())
        .collect();
    cap.set_external_delay(100.0, SEC);
    assert!(cap.refuses_new(SEC));
    assert!(cap.tick(SEC + 100 * MS).is_some_and(|c| c.on));
    assert_eq!(cap.limit(), 37, "min(100, peak 60 / 0.8) × 50/100");
    drop(held);
    assert!(cap.refuses_new(3 * SEC - 1) && !cap.refuses_new(3 * SEC));
}

/// A reload keeps the learned limit (clamped into the new bounds) and switches modes at once.
#[test]
fn set_config_keeps_the_learned_limit() {
    let cap = warmed();
    let mut cl = clients(400, Class::Other, 0);
    simulate(&cap, &mut cl, (20, 10 * MS), (2 * SEC, 5 * SEC), |_| None);
    drop(cl);
    let learned = cap.limit();
    assert!((30..=35).contains(&learned), "{learned}");
    let mut cfg = CapacityConfig::default_for(true);
    cfg.priority_share = 0.5;
    cap.set_config(cfg);
    assert_eq!(cap.limit(), learned);
    assert_eq!(cap.snapshot(0).other_limit, Some(other_cap(learned, 0.5)));
    cfg.min_limit = 40;
    cap.set_config(cfg);
    assert_eq!(cap.limit(), 40);
    cap.set_config(CapacityConfig {
        mode: ConcurrencyMode::Fixed,
        limit: 7,
        ..cfg
    });
    assert_eq!(cap.limit(), 7);
    cap.set_config(CapacityConfig {
        mode: ConcurrencyMode::Off,
        ..cfg
    });
    assert_eq!((cap.limit(), cap.snapshot(0).limit), (u32::MAX, None));
}

/// A cut of the limit below what is in flight keeps the priority reserve: `Priority` is still
/// admitted while it holds fewer than `limit − other cap` slots, and only that many.
#[test]
fn a_cut_below_in_flight_keeps_the_priority_reserve() {
    let cfg = CapacityConfig {
        mode: ConcurrencyMode::Fixed,
        limit: 10,
        ..CapacityConfig::default_for(true)
    };
    let cap = Arc::new(Capacity::new(cfg));
    let others: Vec<_> = (0..8)
        .map(|_| cap.try_acquire(Class::Other, SEC).unwrap())
        .collect();
    assert!(cap.try_acquire(Class::Other, SEC).is_err());
    cap.set_config(CapacityConfig { limit: 5, ..cfg });
    assert_eq!(cap.in_flight(), 8);
    let p = cap.try_acquire(Class::Priority, SEC).unwrap();
    assert_eq!(cap.in_flight(), 9);
    assert!(cap.try_acquire(Class::Priority, SEC).is_err());
    drop(p);
    drop(others);
    assert_eq!(cap.in_flight(), 0);
}

#[test]
fn other_cap_reserves_at_least_one_slot() {
    assert_eq!(other_cap(25, 0.2), 20);
    assert_eq!(other_cap(20, 0.2), 16);
    assert_eq!(other_cap(3, 0.2), 2);
    assert_eq!(other_cap(1, 0.2), 0);
    assert_eq!(other_cap(4, 0.01), 3);
    assert_eq!(other_cap(4, 0.0), 4);
    assert_eq!(other_cap(u32::MAX, 0.2), u32::MAX);
}

/// An idle adaptive route: the exact snapshot `metrics()` shows.
#[test]
fn idle_snapshot() {
    let cap = adaptive();
    assert_eq!(
        cap.snapshot(0),
        CapacitySnapshot {
            mode: "adaptive",
            in_flight: 0,
            in_flight_priority: 0,
            limit: Some(20),
            other_limit: Some(16),
            latency_ms: 0.0,
            proxy_delay_ms: 0.0,
            baseline_ms: 0.0,
            overloaded: false,
            refused: 0,
            refused_priority: 0,
            queued: 0,
            waited: 0,
            queue_timeouts: 0,
            answered: 0,
            connect_failures: 0,
            connect_ms: 0.0,
        }
    );
    cap.connect_failed();
    cap.connected(2 * MS);
    cap.connected(4 * MS);
    let s = cap.snapshot(0);
    assert_eq!((s.connect_failures, s.connect_ms), (1, 3.0));
}

/// The proxy's own run-queue delay is not the upstream's congestion: a window whose latency rose
/// only by that delay keeps growing the limit; the same latency without it is cut.
#[test]
fn the_proxys_own_run_queue_delay_does_not_cut_the_limit() {
    use limiter::{State, Window};
    let cfg = CapacityConfig {
        latency_floor_ms: 0.0,
        ..CapacityConfig::default_for(true)
    };
    let mut st = State::new(cfg);
    let calm = Window {
        samples: 100,
        mean_ns: 1_000_000.0,
        max_in_flight: 20,
        refused: 5,
        ..Window::default()
    };
    st.update(&calm);
    assert_eq!(st.baseline_ns, 1_000_000.0);
    // 2.5 ms of which 1.5 ms the proxy's run queue: the upstream added 1 ms, its baseline.
    let busy_proxy = Window {
        mean_ns: 2_500_000.0,
        proxy_delay_ns: 1_500_000.0,
        ..calm
    };
    let before = st.limit;
    assert!(st.update(&busy_proxy) > before);
    assert_eq!(st.baseline_ns, 1_000_000.0);
    assert_eq!(st.current_ns, 2_500_000.0);
    // The same 2.5 ms from the upstream: cut.
    let busy_upstream = Window {
        proxy_delay_ns: 0.0,
        ..busy_proxy
    };
    let before = st.limit;
    assert!(st.update(&busy_upstream) < before);
    // A probe never explains more than half a latency away.
    let w = Window {
        mean_ns: 4_000_000.0,
        proxy_delay_ns: 10_000_000.0,
        ..calm
    };
    assert_eq!(w.upstream_ns(), 2_000_000.0);
}

/// A latency under `latencyFloorMs` never cuts the limit, however far above the baseline; past
/// it, it does.
#[test]
fn latency_under_the_floor_never_cuts_the_limit() {
    use limiter::{State, Window};
    let mut st = State::new(CapacityConfig::default_for(true));
    let calm = Window {
        samples: 100,
        mean_ns: 100_000.0,
        max_in_flight: 20,
        refused: 5,
        ..Window::default()
    };
    st.update(&calm);
    assert_eq!(st.allowed_ns(), 10_000_000.0);
    // 80 × the baseline, under 10 ms: the limit keeps growing (fast: the route is calm).
    let fast = Window {
        mean_ns: 8_000_000.0,
        ..calm
    };
    let before = st.limit;
    // By what waited in the window (5), more than 20 % of the limit here.
    assert_eq!(st.update(&fast), before + 5.0);
    let slow = Window {
        mean_ns: 16_000_000.0,
        ..calm
    };
    let before = st.limit;
    assert!(st.update(&slow) < before);
}

/// An adaptive route at limit 2 (at most `max_limit`, no floor, no priority share) after one
/// calm window at 100 ms: two answers at 10 ms.
fn after_a_calm_window(max_limit: u32) -> Arc<Capacity> {
    let cap = Arc::new(Capacity::new(CapacityConfig {
        min_limit: 2,
        initial_limit: 2,
        max_limit,
        latency_floor_ms: 0.0,
        priority_share: 0.0,
        ..CapacityConfig::default_for(true)
    }));
    for _ in 0..2 {
        cap.take_now(Class::Other, 0).unwrap().answered(10 * MS);
    }
    cap.tick(100 * MS);
    cap
}

/// A burst that queues past the limit while the latency is calm (the limit still growing
/// towards it) does not make the route overloaded; the same queue once the latency is up does.
#[test]
fn a_queue_past_a_calm_limit_is_not_overload() {
    let cap = after_a_calm_window(CapacityConfig::default_for(true).max_limit);
    let hold: Vec<Permit> = (0..cap.limit())
        .map(|_| cap.take_now(Class::Other, 100 * MS).unwrap())
        .collect();
    let n = cap.limit() + 1;
    let waits: Vec<_> = (0..n)
        .map(|_| cap.wait_or_refuse(Class::Other, 100 * MS, || true))
        .collect();
    assert_eq!(cap.snapshot(100 * MS).queued, n);
    assert!(!cap.refuses_new(100 * MS));
    drop(waits);
    // The latency triples: the next queue past the limit is overload.
    for p in hold {
        p.answered(130 * MS);
    }
    cap.tick(200 * MS);
    let _hold: Vec<Permit> = (0..cap.limit())
        .filter_map(|_| cap.take_now(Class::Other, 200 * MS))
        .collect();
    let _waits: Vec<_> = (0..cap.limit() + 1)
        .map(|_| cap.wait_or_refuse(Class::Other, 200 * MS, || true))
        .collect();
    assert!(cap.refuses_new(200 * MS));
}

/// A calm limit already at `maxLimit` grows no further: a queue past it is overload.
#[test]
fn a_queue_past_a_calm_limit_at_its_max_is_overload() {
    let cap = after_a_calm_window(2);
    assert_eq!(cap.limit(), 2);
    let _hold: Vec<Permit> = (0..2)
        .map(|_| cap.take_now(Class::Other, 100 * MS).unwrap())
        .collect();
    let _waits: Vec<_> = (0..3)
        .map(|_| cap.wait_or_refuse(Class::Other, 100 * MS, || true))
        .collect();
    assert_eq!(cap.snapshot(100 * MS).queued, 3);
    assert!(cap.refuses_new(100 * MS));
}

/// Requests that wait while most permits are released without a latency sample (a rapid reset:
/// streams reset before their response) never grow the limit; once the answers outnumber the
/// unanswered releases again, the slow start resumes. Through the capacity: permits dropped
/// without an answer are counted in the window.
#[test]
fn releases_without_a_sample_do_not_grow_the_limit() {
    let cap = Arc::new(Capacity::new(CapacityConfig {
        min_limit: 4,
        initial_limit: 8,
        priority_share: 0.0,
        ..CapacityConfig::default_for(true)
    }));
    let limit = cap.limit();
    let mut t = 0;
    // Each window: requests answered at 1 ms (calm), `resets` of the limit's permits dropped
    // unanswered, and demand waiting past the limit.
    let window = |t: u64, resets: usize| {
        for _ in 0..2 {
            cap.take_now(Class::Other, t).unwrap().answered(t + MS);
        }
        let reset: Vec<Permit> = (0..resets)
            .map(|_| cap.take_now(Class::Other, t).unwrap())
            .collect();
        let full: Vec<Permit> = (0..cap.limit() as usize - resets)
            .filter_map(|_| cap.take_now(Class::Other, t))
            .collect();
        let waits: Vec<_> = (0..8)
            .map(|_| cap.wait_or_refuse(Class::Other, t, || true))
            .collect();
        drop(waits);
        drop(reset);
        for p in full {
            p.answered(t + MS);
        }
    };
    for _ in 0..10 {
        window(t, 6);
        t += 100 * MS;
        cap.tick(t);
    }
    assert_eq!(
        cap.limit(),
        limit,
        "ten calm windows of mostly unanswered releases"
    );
    let mut grew = false;
    for _ in 0..3 {
        window(t, 0);
        t += 100 * MS;
        cap.tick(t);
        grew |= cap.limit() > limit;
    }
    assert!(
        grew,
        "answered demand grows the limit again: {}",
        cap.limit()
    );
}

/// The run-queue probes measure only while some route's limiter is adaptive: the registry
/// turns `wanted` on and off as route tables change, and a probe waiting for it is woken.
#[test]
fn the_run_queue_probes_are_wanted_only_while_a_route_is_adaptive() {
    use std::future::Future;
    use std::sync::atomic::AtomicUsize;
    use std::task::{Context, Wake, Waker};
    /// Counts its wake-ups.
    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let reg = registry::CapacityRegistry::new(None);
    let rq = reg.run_queue().clone();
    let off = CapacityConfig::default_for(false);
    let adaptive = CapacityConfig::default_for(true);
    let fixed = CapacityConfig {
        mode: ConcurrencyMode::Fixed,
        limit: 5,
        ..adaptive
    };
    let table = |cfgs: &[(&str, CapacityConfig)]| {
        let keep: Vec<_> = cfgs.iter().map(|(n, c)| reg.get(n, *c)).collect();
        reg.retain(&keep);
        rq.wanted()
    };
    assert!(!table(&[("a", off), ("b", fixed)]));
    // A probe waits ...
    let count = Arc::new(Count(AtomicUsize::new(0)));
    let waker = Waker::from(count.clone());
    let mut cx = Context::from_waker(&waker);
    let mut wait = std::pin::pin!(rq.until_wanted());
    assert!(wait.as_mut().poll(&mut cx).is_pending());
    assert_eq!(count.0.load(Ordering::SeqCst), 0);
    // ... and is woken when a route turns adaptive by reload.
    assert!(table(&[("a", off), ("b", adaptive)]));
    assert_eq!(count.0.load(Ordering::SeqCst), 1);
    assert!(wait.as_mut().poll(&mut cx).is_ready());
    // The adaptive route turns fixed, comes back, then is removed.
    assert!(!table(&[("a", off), ("b", fixed)]));
    assert!(table(&[("b", adaptive)]));
    assert!(!table(&[("a", off)]));
    // Already wanted: ready at the first poll.
    assert!(table(&[("c", adaptive)]));
    assert!(std::pin::pin!(rq.until_wanted()).poll(&mut cx).is_ready());
}
