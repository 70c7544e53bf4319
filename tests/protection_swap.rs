//! Policy swaps carry each client's rate-limit usage over in connections, not in time: raising a
//! limit readmits at once, lowering one bites at once, swaps compose, a limit switched on starts
//! fresh and one switched off drops its state; penalty deadlines are untouched. Injected time.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;
use common::engine::*;
use common::race::{self, Race, StopOnPanic};
use rampart::protection::{BlockReason, BlockedEntry, Engine};
use serde_json::{json, Value};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;

fn rate(per_second: f64, burst: u64) -> Value {
    json!({"rateLimit": {"connectionsPerSecond": per_second, "burst": burst}})
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// `None` when admitted cleanly, else the (enforced) refusal reason.
fn try_admit(e: &Engine, addr: &str, now: u64) -> Option<BlockReason> {
    let a = e.admit(ip(addr), now);
    a.verdict.map(|v| {
        assert!(!v.observed);
        v.reason
    })
}

/// How many of 10 000 attempts at `now` are admitted (stops at the first refusal).
fn admitted_at(e: &Engine, addr: &str, now: u64) -> usize {
    (0..10_000)
        .take_while(|_| try_admit(e, addr, now).is_none())
        .count()
}

fn ips(list: &[BlockedEntry]) -> Vec<(String, Option<u64>)> {
    list.iter()
        .map(|b| (b.ip.clone(), b.remaining_ms))
        .collect()
}

#[test]
fn raising_a_limit_readmits_at_once() {
    // The tester's repro: 0.1/s burst 1, second connection refused, then 1000/s burst 1000.
    let e = engine(rate(0.1, 1));
    let a = "192.0.2.1";
    assert_eq!(try_admit(&e, a, T0), None);
    assert_eq!(try_admit(&e, a, T0 + S), Some(BlockReason::RateLimited));
    assert_eq!(
        ips(&e.blocked(T0 + S).rate_limited),
        vec![(a.to_string(), Some(9_000))]
    );
    // At the swap the client has used 0.9 of a connection: 0.9 ms at 1000/s.
    let s = T0 + S;
    e.set_policy(Some(policy(rate(1000.0, 1000))), s);
    assert!(e.blocked(s).rate_limited.is_empty());
    assert_eq!(admitted_at(&e, a, s), 999);
    // 999.9 used: the next one conforms 0.9 ms later.
    assert_eq!(
        try_admit(&e, a, s + 900_000 - 1),
        Some(BlockReason::RateLimited)
    );
    assert_eq!(try_admit(&e, a, s + 900_000), None);
}

#[test]
fn lowering_a_limit_bites_at_once_with_exact_counts() {
    // 100/s burst 100; one client uses 60, another 5, at T0.
    let e = engine(rate(100.0, 100));
    let (a, b) = ("192.0.2.2", "192.0.2.3");
    for _ in 0..60 {
        assert_eq!(try_admit(&e, a, T0), None);
    }
    for _ in 0..5 {
        assert_eq!(try_admit(&e, b, T0), None);
    }
    // 1/s burst 10: `a` has used 60 (TAT T0 + 60 s), `b` 5 (TAT T0 + 5 s).
    e.set_policy(Some(policy(rate(1.0, 10))), T0);
    assert_eq!(try_admit(&e, a, T0), Some(BlockReason::RateLimited));
    assert_eq!(admitted_at(&e, b, T0), 5);
    assert_eq!(try_admit(&e, b, T0), Some(BlockReason::RateLimited));
    // `a` conforms again once its usage is back to 9: 51 s later, then one per second.
    assert_eq!(
        ips(&e.blocked(T0).rate_limited),
        vec![(a.to_string(), Some(51_000)), (b.to_string(), Some(1_000))]
    );
    assert_eq!(
        try_admit(&e, a, T0 + 51 * S - 1),
        Some(BlockReason::RateLimited)
    );
    assert_eq!(admitted_at(&e, a, T0 + 51 * S), 1);
    assert_eq!(admitted_at(&e, a, T0 + 52 * S), 1);
    assert_eq!(admitted_at(&e, b, T0 + 3 * S), 3);
}

#[test]
fn usage_is_taken_at_the_swap_and_drains_at_the_new_rate() {
    // 60 used at T0 under 100/s; the swap to 1/s burst 10 comes 200 ms later (40 left).
    let e = engine(rate(100.0, 100));
    let (a, b) = ("198.51.100.1", "198.51.100.2");
    for _ in 0..60 {
        assert_eq!(try_admit(&e, a, T0), None);
        assert_eq!(try_admit(&e, b, T0), None);
    }
    let s = T0 + 200 * MS;
    e.set_policy(Some(policy(rate(1.0, 10))), s);
    // `a` comes back at once, `b` only 5 s later: both are measured from the swap.
    assert_eq!(
        try_admit(&e, a, s + 31 * S - 1),
        Some(BlockReason::RateLimited)
    );
    assert_eq!(admitted_at(&e, a, s + 31 * S), 1);
    assert_eq!(try_admit(&e, b, s + 5 * S), Some(BlockReason::RateLimited));
    assert_eq!(
        ips(&e.blocked(s + 5 * S).rate_limited),
        vec![(a.to_string(), Some(27_000)), (b.to_string(), Some(26_000))]
    );
    assert_eq!(admitted_at(&e, b, s + 31 * S), 1);
}

#[test]
fn two_swaps_in_a_row_compose_whether_or_not_the_client_was_seen_between() {
    // 10/s burst 10: both clients take the whole burst at T0 (TAT T0 + 1 s).
    let e = engine(rate(10.0, 10));
    let (a, b) = ("203.0.113.1", "203.0.113.2");
    assert_eq!(admitted_at(&e, a, T0), 10);
    assert_eq!(admitted_at(&e, b, T0), 10);
    // At 200 ms (8 used): 2/s burst 5 → TAT = +4 s. `b` knocks and is refused (8 > 4).
    e.set_policy(Some(policy(rate(2.0, 5))), T0 + 200 * MS);
    assert_eq!(
        try_admit(&e, b, T0 + 200 * MS),
        Some(BlockReason::RateLimited)
    );
    // At 1.2 s (6 used): 20/s burst 10 → TAT = T0 + 1.5 s; 4 left for each.
    let s2 = T0 + 1_200 * MS;
    e.set_policy(Some(policy(rate(20.0, 10))), s2);
    assert_eq!(admitted_at(&e, a, s2), 4);
    assert_eq!(admitted_at(&e, b, s2), 4);
    assert_eq!(admitted_at(&e, a, s2 + 50 * MS), 1);
}

#[test]
fn a_burst_decrease_with_a_new_interval_applies_to_what_was_used() {
    // 10/s burst 10, 4 used (400 ms); 5/s burst 2: 4 used = 800 ms, tolerance 200 ms.
    let e = engine(rate(10.0, 10));
    let a = "192.0.2.60";
    for _ in 0..4 {
        assert_eq!(try_admit(&e, a, T0), None);
    }
    e.set_policy(Some(policy(rate(5.0, 2))), T0);
    assert_eq!(try_admit(&e, a, T0), Some(BlockReason::RateLimited));
    assert_eq!(
        ips(&e.blocked(T0).rate_limited),
        vec![(a.to_string(), Some(600))]
    );
    assert_eq!(
        try_admit(&e, a, T0 + 600 * MS - 1),
        Some(BlockReason::RateLimited)
    );
    assert_eq!(admitted_at(&e, a, T0 + 600 * MS), 1);
    assert_eq!(admitted_at(&e, a, T0 + 800 * MS), 1);
}

#[test]
fn a_limit_switched_on_starts_fresh_and_one_switched_off_drops_its_state() {
    let both = json!({
        "rateLimit": {"connectionsPerSecond": 1, "burst": 1},
        "sustained": {"connectionsPerMinute": 1, "burst": 1},
    });
    let e = engine(both.clone());
    let a = "192.0.2.70";
    assert_eq!(try_admit(&e, a, T0), None);
    assert_eq!(try_admit(&e, a, T0 + S), Some(BlockReason::RateLimited));
    // `sustained` off: its minute is forgotten; `rateLimit` (unchanged) keeps its state.
    e.set_policy(Some(policy(rate(1.0, 1))), T0 + S);
    assert_eq!(try_admit(&e, a, T0 + S), None);
    assert_eq!(try_admit(&e, a, T0 + S), Some(BlockReason::RateLimited));
    // `sustained` back on: nobody has used any of it.
    e.set_policy(Some(policy(both)), T0 + 2 * S);
    assert_eq!(try_admit(&e, a, T0 + 2 * S), None);
    assert_eq!(try_admit(&e, a, T0 + 3 * S), Some(BlockReason::RateLimited));
    assert_eq!(
        ips(&e.blocked(T0 + 3 * S).rate_limited),
        vec![(a.to_string(), Some(59_000))]
    );
    // Protection removed and added back: fresh as well.
    e.set_policy(None, T0 + 3 * S);
    e.set_policy(Some(policy(rate(1.0, 1))), T0 + 3 * S);
    assert_eq!(try_admit(&e, a, T0 + 3 * S), None);
}

#[test]
fn the_sustained_limit_is_rescaled_too() {
    // 60/min burst 6 (1 s interval): 6 used at T0. 600/min burst 60: 6 used = 600 ms.
    let e = engine(json!({"sustained": {"connectionsPerMinute": 60, "burst": 6}}));
    let a = "192.0.2.80";
    assert_eq!(admitted_at(&e, a, T0), 6);
    e.set_policy(
        Some(policy(
            json!({"sustained": {"connectionsPerMinute": 600, "burst": 60}}),
        )),
        T0,
    );
    assert_eq!(admitted_at(&e, a, T0), 54);
    // And down to 6/min burst 10 (10 s interval): 60 used = 600 s, tolerance 90 s.
    e.set_policy(
        Some(policy(
            json!({"sustained": {"connectionsPerMinute": 6, "burst": 10}}),
        )),
        T0,
    );
    assert_eq!(
        ips(&e.blocked(T0).rate_limited),
        vec![(a.to_string(), Some(510_000))]
    );
    assert_eq!(admitted_at(&e, a, T0 + 510 * S), 1);
}

#[test]
fn penalty_deadlines_are_not_moved_by_a_rate_swap() {
    let boxed = |per_second: f64, burst: u64| {
        json!({
            "rateLimit": {"connectionsPerSecond": per_second, "burst": burst},
            "penaltyBox": {"durationMs": 10_000},
        })
    };
    let e = engine(boxed(1.0, 1));
    let a = "203.0.113.50";
    assert_eq!(try_admit(&e, a, T0), None);
    assert_eq!(try_admit(&e, a, T0), Some(BlockReason::RateLimited));
    e.set_policy(Some(policy(boxed(1000.0, 1000))), T0 + S);
    // Conforming knocks while boxed: refused, debited, the deadline stays at T0 + 10 s.
    assert_eq!(try_admit(&e, a, T0 + S), Some(BlockReason::PenaltyBoxed));
    assert_eq!(
        ips(&e.blocked(T0 + S).penalty_boxed),
        vec![(a.to_string(), Some(9_000))]
    );
    assert_eq!(
        try_admit(&e, a, T0 + 10 * S - 1),
        Some(BlockReason::PenaltyBoxed)
    );
    assert_eq!(try_admit(&e, a, T0 + 10 * S), None);
}

#[test]
fn eviction_judges_entries_under_the_limits_in_force() {
    // Lowered: 60 used under 100/s would be idle after 600 ms; under 1/s burst 10 it is 60 s
    // of usage, so the sweep must keep it.
    let e = engine(rate(100.0, 100));
    let a = "192.0.2.90";
    for _ in 0..60 {
        assert_eq!(try_admit(&e, a, T0), None);
    }
    e.set_policy(Some(policy(rate(1.0, 10))), T0);
    assert_eq!(e.evict_tick(T0 + S, 1_000_000), 0);
    assert_eq!(e.tracked_ips(), 1);
    assert_eq!(try_admit(&e, a, T0 + S), Some(BlockReason::RateLimited));
    // Raised: 1 used under 0.1/s is 10 s of time, but 1 ms under 1000/s.
    let e = engine(rate(0.1, 1));
    assert_eq!(try_admit(&e, a, T0), None);
    e.set_policy(Some(policy(rate(1000.0, 1))), T0);
    assert_eq!(e.evict_tick(T0 + MS - 1, 1_000_000), 0);
    assert_eq!(e.evict_tick(T0 + MS, 1_000_000), 1);
    assert_eq!(e.tracked_ips(), 0);
}

#[test]
fn swaps_racing_admissions_never_admit_more_than_the_usage_allows() {
    // Time stands still at T0; the limit flips between 100/s and 200/s, burst 100 both, while
    // four threads knock: usage carries over exactly, so exactly 100 connections are admitted in
    // all. The swapper cannot finish before the admitters start: it makes at least 2000 swaps
    // and keeps swapping until every admitter has reached the limit; the admitters start
    // knocking once it is swapping. Rounds (a fresh engine each) repeat until swaps and
    // admissions have overlapped 2000 times, 200 of them admissions that got in while a swap was
    // being published (the window in which an inexact carry-over would let a 101st in).
    const ADMITTERS: usize = 4;
    const MIN_SWAPS: usize = 2_000;
    const SWAPPER: usize = 0;
    const ADMITTER: usize = 1;
    let (slow, fast) = (policy(rate(100.0, 100)), policy(rate(200.0, 100)));
    let client = ip("192.0.2.99");
    race::until_raced(
        "policy swaps vs admissions",
        [
            ("swaps overlapping admissions", 2_000),
            ("admissions in during a swap", 200),
        ],
        || {
            let e = engine(rate(100.0, 100));
            let race = Race::new(2);
            let barrier = Barrier::new(ADMITTERS + 1);
            let swaps = AtomicUsize::new(0);
            let at_limit = AtomicUsize::new(0);
            let done = AtomicBool::new(false);
            let (overlaps, admitted, admitted_in_swap) = thread::scope(|s| {
                let swapper = s.spawn(|| {
                    let _stop = StopOnPanic(&done);
                    barrier.wait();
                    let mut overlaps = 0;
                    // Until done, or an admitter failed (and raised `done`).
                    while !done.load(Ordering::Acquire) {
                        // In pairs, so the last policy installed is the slow one.
                        for p in [&fast, &slow] {
                            let ((), seen) =
                                race.op(SWAPPER, || e.set_policy(Some(Arc::clone(p)), T0));
                            overlaps += usize::from(seen.side(ADMITTER));
                        }
                        let n = swaps.fetch_add(2, Ordering::AcqRel) + 2;
                        if n >= MIN_SWAPS && at_limit.load(Ordering::Acquire) == ADMITTERS {
                            break;
                        }
                    }
                    done.store(true, Ordering::Release);
                    overlaps
                });
                let admitters: Vec<_> = (0..ADMITTERS)
                    .map(|_| {
                        s.spawn(|| {
                            let _stop = StopOnPanic(&done);
                            barrier.wait();
                            while swaps.load(Ordering::Acquire) == 0
                                && !done.load(Ordering::Acquire)
                            {
                                thread::yield_now();
                            }
                            let (mut admitted, mut in_swap, mut overlaps) = (0, 0, 0);
                            let mut limited = false;
                            while !done.load(Ordering::Acquire) {
                                let (verdict, seen) =
                                    race.op(ADMITTER, || e.admit(client, T0).verdict);
                                overlaps += usize::from(seen.side(SWAPPER));
                                match &verdict {
                                    None => {
                                        admitted += 1;
                                        in_swap += usize::from(seen.side(SWAPPER));
                                    }
                                    Some(v) => assert_eq!(v.reason, BlockReason::RateLimited),
                                }
                                // Refused: this admitter has reached the limit. (Admitted far
                                // past the burst: the assertion below fails; stop the round.)
                                if !limited && (verdict.is_some() || admitted > 10_000) {
                                    limited = true;
                                    at_limit.fetch_add(1, Ordering::AcqRel);
                                }
                            }
                            (overlaps, admitted, in_swap)
                        })
                    })
                    .collect();
                let mut total = (swapper.join().unwrap(), 0, 0);
                for h in admitters {
                    let (o, a, i) = h.join().unwrap();
                    total = (total.0 + o, total.1 + a, total.2 + i);
                }
                total
            });
            assert_eq!(admitted, 100);
            assert!(swaps.load(Ordering::Acquire) >= MIN_SWAPS);
            assert_eq!(e.policy().unwrap().rate_limit().unwrap().rate, 100.0);
            [overlaps, admitted_in_swap]
        },
    );
}
