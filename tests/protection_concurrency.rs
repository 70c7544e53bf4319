//! Concurrency: threads hammering one client never get more than the GCRA allows, and admission
//! racing eviction (ticks and cap pressure) never admits past `maxConcurrentPerIp`.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;
use common::engine::T0;
use common::race::{self, Race, StopOnPanic};
use rampart::protection::{BlockReason, Engine};
use serde_json::{json, Value};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Instant;

const THREADS: usize = 4;

fn engine(v: Value) -> Arc<Engine> {
    Arc::new(common::engine::engine(v))
}

/// What [`hammer`] saw: admissions in all, and admissions that overlapped another thread's
/// attempt (the CAS race on the client's TAT).
#[derive(Debug, Clone, Copy)]
struct Hammered {
    admitted: usize,
    raced: usize,
}

/// Every thread makes `per_thread` attempts from `ip` at `now(thread, i)`, all starting together.
fn hammer(e: &Engine, ip: IpAddr, per_thread: usize, now: fn(usize, usize) -> u64) -> Hammered {
    let barrier = Barrier::new(THREADS);
    let race = Race::new(1);
    let per_thread: Vec<Hammered> = thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (barrier, race) = (&barrier, &race);
                s.spawn(move || {
                    barrier.wait();
                    let mut h = Hammered {
                        admitted: 0,
                        raced: 0,
                    };
                    for i in 0..per_thread {
                        let (verdict, seen) = race.op(0, || e.admit(ip, now(t, i)).verdict);
                        match verdict {
                            None => {
                                h.admitted += 1;
                                h.raced += usize::from(seen.side(0));
                            }
                            Some(v) => assert_eq!(v.reason, BlockReason::RateLimited),
                        }
                    }
                    h
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    per_thread.iter().fold(
        Hammered {
            admitted: 0,
            raced: 0,
        },
        |a, h| Hammered {
            admitted: a.admitted + h.admitted,
            raced: a.raced + h.raced,
        },
    )
}

/// Admissions that overlapped another attempt, wanted over the rounds of each hammer test.
const RACED_ADMISSIONS: usize = 2_000;

#[test]
fn one_client_from_many_threads_gets_exactly_the_burst() {
    let ip: IpAddr = "192.0.2.1".parse().unwrap();
    race::until_raced(
        "admissions of one client",
        [("admissions overlapping another attempt", RACED_ADMISSIONS)],
        || {
            let e = engine(json!({"rateLimit": {"connectionsPerSecond": 100, "burst": 1000}}));
            let one = hammer(&e, ip, 5_000, |_, _| T0);
            assert_eq!(one.admitted, 1000);
            // Both limits: the smaller burst wins exactly, and the other limit is rolled back
            // exactly.
            let e = engine(json!({
                "rateLimit": {"connectionsPerSecond": 100, "burst": 1000},
                "sustained": {"connectionsPerMinute": 600, "burst": 600},
            }));
            let both = hammer(&e, ip, 5_000, |_, _| T0);
            assert_eq!(both.admitted, 600);
            // 600 per-second debits at T0: TAT = T0 + 6 s; the per-second limit alone admits
            // 400 more.
            let e2 = engine(json!({"rateLimit": {"connectionsPerSecond": 100, "burst": 1000}}));
            let first = hammer(&e2, ip, 150, |_, _| T0);
            assert_eq!(first.admitted, 600);
            let rest = hammer(&e2, ip, 5_000, |_, _| T0);
            assert_eq!(rest.admitted, 400);
            [one.raced + both.raced + first.raced + rest.raced]
        },
    );
}

#[test]
fn moving_time_never_admits_more_than_burst_plus_elapsed_intervals() {
    let ip: IpAddr = "192.0.2.2".parse().unwrap();
    race::until_raced(
        "admissions of one client over moving time",
        [("admissions overlapping another attempt", RACED_ADMISSIONS)],
        || {
            // 1000/s (1 ms interval), burst 50; attempts spread over 100 ms by every thread.
            let e = engine(json!({"rateLimit": {"connectionsPerSecond": 1000, "burst": 50}}));
            let h = hammer(&e, ip, 20_000, |_, i| T0 + (i as u64) * 5_000);
            // The window is [T0, T0 + 99.995 ms]: at most 50 + 99 more conforming arrivals.
            assert!(h.admitted <= 50 + 99, "admitted {}", h.admitted);
            assert!(h.admitted >= 50, "admitted {}", h.admitted);
            [h.raced]
        },
    );
}

#[test]
fn admission_racing_eviction_never_exceeds_max_concurrent() {
    const MAX: usize = 3;
    // What the admitters wait for before they stop, so the race is exercised however the
    // threads happen to be scheduled: entries evicted by the background ticks, and hot-client
    // operations (admissions and releases) that overlapped a tick and a cap-pressure admission.
    const EVICTED: usize = 100;
    const OVERLAPS: usize = 1_000;
    const HOT: usize = 0;
    const TICK: usize = 1;
    const CAP: usize = 2;
    let e = engine(json!({"maxConcurrentPerIp": MAX, "maxTrackedIps": 16}));
    let hot: IpAddr = "198.51.100.1".parse().unwrap();
    let race = Race::new(3);
    let held = AtomicUsize::new(0);
    let peak = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let clock = AtomicU64::new(T0);
    let evicted_so_far = AtomicUsize::new(0);
    let with_ticks = AtomicUsize::new(0);
    let with_cap = AtomicUsize::new(0);
    let note = |overlapped: bool, counter: &AtomicUsize| {
        if overlapped {
            counter.fetch_add(1, Ordering::Relaxed);
        }
    };
    let hot_op = |seen: race::Seen| {
        note(seen.side(TICK), &with_ticks);
        note(seen.side(CAP), &with_cap);
    };
    let started = Instant::now();
    let (admitted, others) = thread::scope(|s| {
        // A failed join below stops the other threads before the scope waits for them.
        let _stop = StopOnPanic(&stop);
        let mut handles = Vec::new();
        // Two admitters on the hot client, each keeping up to two connections open (four
        // wanted, three allowed), releasing the oldest as it goes: the entry almost always
        // holds connections.
        for _ in 0..2 {
            handles.push(s.spawn(|| {
                let _stop = StopOnPanic(&stop);
                let mut admitted = 0usize;
                let mut open = std::collections::VecDeque::new();
                for i in 0usize.. {
                    // `stop` before the end: another thread failed.
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    if i >= 20_000
                        && evicted_so_far.load(Ordering::Relaxed) >= EVICTED
                        && with_ticks.load(Ordering::Relaxed) >= OVERLAPS
                        && with_cap.load(Ordering::Relaxed) >= OVERLAPS
                    {
                        break;
                    }
                    if i % 1024 == 0 {
                        assert!(
                            started.elapsed() < race::RACE_LIMIT,
                            "the race was not exercised in {:?}: {} evicted of {EVICTED}, {} \
                             overlaps with ticks and {} with cap pressure of {OVERLAPS}",
                            started.elapsed(),
                            evicted_so_far.load(Ordering::Relaxed),
                            with_ticks.load(Ordering::Relaxed),
                            with_cap.load(Ordering::Relaxed),
                        );
                    }
                    let (a, seen) = race.op(HOT, || e.admit(hot, clock.load(Ordering::Relaxed)));
                    hot_op(seen);
                    if let Some(v) = a.verdict {
                        assert_eq!(v.reason, BlockReason::TooManyConnections);
                    } else {
                        assert!(a.guard.is_some());
                        let now = held.fetch_add(1, Ordering::SeqCst) + 1;
                        peak.fetch_max(now, Ordering::SeqCst);
                        assert!(now <= MAX, "{now} connections held, max {MAX}");
                        admitted += 1;
                        open.push_back(a);
                    }
                    if open.len() > 2 || (i % 5 == 0 && !open.is_empty()) {
                        held.fetch_sub(1, Ordering::SeqCst);
                        let oldest = open.pop_front();
                        let ((), seen) = race.op(HOT, || drop(oldest));
                        hot_op(seen);
                    }
                    if i % 64 == 0 {
                        thread::yield_now();
                    }
                }
                held.fetch_sub(open.len(), Ordering::SeqCst);
                admitted
            }));
        }
        // Cap pressure: a stream of new clients, each replacing an entry.
        handles.push(s.spawn(|| {
            let _stop = StopOnPanic(&stop);
            let mut i = 0u32;
            while !stop.load(Ordering::Relaxed) {
                i = i.wrapping_add(1);
                let ip = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i));
                let ((), seen) = race.op(CAP, || drop(e.admit(ip, clock.load(Ordering::Relaxed))));
                note(seen.side(HOT), &with_cap);
            }
            0
        }));
        // Background ticks with time moving on.
        handles.push(s.spawn(|| {
            let _stop = StopOnPanic(&stop);
            let mut evicted = 0;
            while !stop.load(Ordering::Relaxed) {
                let now = clock.fetch_add(1_000_000, Ordering::Relaxed);
                let (n, seen) = race.op(TICK, || e.evict_tick(now, 512));
                note(seen.side(HOT), &with_ticks);
                evicted += n;
                evicted_so_far.store(evicted, Ordering::Relaxed);
            }
            evicted
        }));
        let admitters: Vec<_> = handles.drain(..2).collect();
        let admitted: usize = admitters.into_iter().map(|h| h.join().unwrap()).sum();
        stop.store(true, Ordering::Relaxed);
        let others: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
        (admitted, others)
    });
    println!(
        "eviction race: {admitted} admitted, {others} evicted, {} overlaps with ticks, {} with \
         cap pressure, {:?}",
        with_ticks.load(Ordering::Relaxed),
        with_cap.load(Ordering::Relaxed),
        started.elapsed()
    );
    // The race was real: entries were evicted all along (this test fails if eviction ignores
    // the active count), while hot-client operations were in flight.
    assert!(others >= EVICTED);
    assert!(with_ticks.load(Ordering::Relaxed) >= OVERLAPS);
    assert!(with_cap.load(Ordering::Relaxed) >= OVERLAPS);
    assert!(admitted > 0);
    assert!(peak.load(Ordering::SeqCst) <= MAX);
    assert_eq!(e.counts(hot), (0, 0));
    assert!(e.tracked_ips() <= 16);
}

#[test]
fn guards_from_many_threads_return_every_count() {
    let ip: IpAddr = "203.0.113.5".parse().unwrap();
    race::until_raced(
        "guards of one client",
        [("admissions and handshakes overlapping another", 2_000)],
        || {
            let e = engine(
                json!({"maxConcurrentPerIp": 1000, "slowHandshake": {"maxPendingPerIp": 1000}}),
            );
            let barrier = Barrier::new(THREADS);
            let race = Race::new(1);
            let overlaps: usize = thread::scope(|s| {
                let handles: Vec<_> = (0..THREADS)
                    .map(|_| {
                        s.spawn(|| {
                            barrier.wait();
                            let mut overlaps = 0;
                            for _ in 0..10_000 {
                                // Taking both guards and dropping them: the counts go up and
                                // down from every thread at once.
                                let ((), seen) = race.op(0, || {
                                    let a = e.admit(ip, T0);
                                    let p = e.pending_handshake(ip, T0);
                                    assert!(a.admitted() && p.is_ok());
                                });
                                overlaps += usize::from(seen.side(0));
                            }
                            overlaps
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).sum()
            });
            assert_eq!(e.counts(ip), (0, 0));
            [overlaps]
        },
    );
}
