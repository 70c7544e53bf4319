//! `clusterRateLimit` leases kept in the engine's table, with injected time and no Redis: the
//! refill task's part is played by the test through `Engine::update_lease` (the cluster specs in
//! `__tests__/cluster.*` run the same path against a real `redis-server`).
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;
use common::engine::*;
use common::race::{self, Race, StopOnPanic};
use rampart::protection::{Admission, BlockReason, Engine, IpKey, LeaseUpdate, LEASE_TTL_NS};
use serde_json::json;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::thread;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn key(s: &str) -> IpKey {
    IpKey::new(ip(s), 64)
}

/// A policy with `clusterRateLimit` leases of `lease` tokens (and `extra` fields).
fn leased(lease: u64, extra: serde_json::Value) -> Engine {
    let mut v = json!({
        "clusterRateLimit": {"connectionsPerSecond": 1000, "burst": 10000, "lease": lease},
    });
    for (k, x) in extra.as_object().unwrap() {
        v[k] = x.clone();
    }
    engine(v)
}

/// One admission with the cluster tier up: (refusal reason or `None`, whether it asks a refill).
fn admit(e: &Engine, addr: &str, now: u64) -> (Option<BlockReason>, bool) {
    let a: Admission = e.admit_clustered(ip(addr), || now, true);
    if a.refill {
        let r = e.lease_request(ip(addr)).expect("a request");
        assert_eq!(
            (r.port, r.key, r.limit.lease),
            (
                443,
                key(addr),
                e.policy().unwrap().cluster_rate_limit().unwrap().lease
            )
        );
    }
    (a.verdict.map(|v| v.reason), a.refill)
}

fn refilled(e: &Engine, addr: &str, granted: u64, retry_after_ns: u64, now_ns: u64) {
    let u = LeaseUpdate::Refilled {
        granted,
        retry_after_ns,
        now_ns,
    };
    assert_eq!(e.update_lease(key(addr), u), 0);
}

const A: &str = "192.0.2.1";
const LIMITED: Option<BlockReason> = Some(BlockReason::ClusterRateLimited);

#[test]
fn credit_then_tokens_then_a_refusal_until_retry_after() {
    let e = leased(2, json!({}));
    assert_eq!(admit(&e, A, T0), (None, true), "first: on credit, asks");
    assert_eq!(admit(&e, A, T0), (None, false), "credit up to the lease");
    assert_eq!(admit(&e, A, T0), (LIMITED, false), "credit spent");
    assert_eq!(e.update_lease(key(A), LeaseUpdate::TakeDebt), 2);
    refilled(&e, A, 2, 0, T0 + MS);
    assert_eq!(admit(&e, A, T0 + 2 * MS), (None, false));
    assert_eq!(
        admit(&e, A, T0 + 3 * MS),
        (None, true),
        "the last token asks"
    );
    assert_eq!(e.update_lease(key(A), LeaseUpdate::TakeDebt), 0);
    refilled(&e, A, 0, 100 * MS, T0 + 4 * MS);
    assert_eq!(admit(&e, A, T0 + 104 * MS - 1), (LIMITED, false));
    assert_eq!(
        admit(&e, A, T0 + 104 * MS),
        (None, true),
        "retry time reached"
    );
    assert_eq!(e.lease_clients(), 1);
    // Another listener's engine keeps its own leases: an untouched one holds none.
    let b = leased(2, json!({}));
    assert_eq!(b.update_lease(key(A), LeaseUpdate::TakeDebt), 0);
    assert_eq!(b.lease_clients(), 0);
}

#[test]
fn tokens_lapse_and_a_failed_refill_owes_its_credit_again() {
    let e = leased(3, json!({}));
    admit(&e, A, T0);
    assert_eq!(e.update_lease(key(A), LeaseUpdate::TakeDebt), 1);
    assert_eq!(e.update_lease(key(A), LeaseUpdate::Failed), 0);
    assert_eq!(
        e.update_lease(key(A), LeaseUpdate::TakeDebt),
        1,
        "owed again"
    );
    refilled(&e, A, 3, 0, T0);
    assert_eq!(
        admit(&e, A, T0 + LEASE_TTL_NS),
        (None, true),
        "lapsed: credit"
    );
    assert_eq!(e.update_lease(key(A), LeaseUpdate::TakeDebt), 1);
    // A request the cluster tier could not queue is asked again by the next connection.
    assert_eq!(e.update_lease(key(A), LeaseUpdate::NotSent), 0);
    assert_eq!(admit(&e, A, T0 + LEASE_TTL_NS), (None, true));
}

#[test]
fn without_the_cluster_tier_or_for_the_allowlist_no_lease_is_taken() {
    let e = leased(1, json!({"allowlist": ["198.51.100.0/24"]}));
    for _ in 0..5 {
        // The breaker open: local limits alone.
        let a = e.admit_clustered(ip(A), || T0, false);
        assert!(a.verdict.is_none() && !a.refill);
        let (r, asks) = admit(&e, "198.51.100.7", T0);
        assert_eq!((r, asks), (None, false), "allowlisted");
    }
    assert_eq!(e.lease_clients(), 0);
    assert_eq!(e.update_lease(key(A), LeaseUpdate::TakeDebt), 0);
}

#[test]
fn a_local_refusal_takes_no_token_and_a_cluster_refusal_debits_no_local_limit() {
    let e = leased(
        1,
        json!({"rateLimit": {"connectionsPerSecond": 1, "burst": 2}}),
    );
    assert_eq!(admit(&e, A, T0), (None, true));
    assert_eq!(e.update_lease(key(A), LeaseUpdate::TakeDebt), 1);
    refilled(&e, A, 0, 10 * S, T0);
    for _ in 0..50 {
        assert_eq!(admit(&e, A, T0 + MS), (LIMITED, false));
    }
    refilled(&e, A, 5, 0, T0 + 2 * MS);
    // The 50 refusals left the local burst alone: one more local token (burst 2, one used).
    assert_eq!(admit(&e, A, T0 + 2 * MS), (None, false));
    assert_eq!(
        admit(&e, A, T0 + 3 * MS),
        (Some(BlockReason::RateLimited), false)
    );

    // A local refusal takes no token: 5 granted, one connection held open, 20 refused by
    // maxConcurrentPerIp, then exactly the 4 left, the fourth asking.
    let e = leased(5, json!({"maxConcurrentPerIp": 1}));
    assert_eq!(admit(&e, A, T0), (None, true));
    assert_eq!(e.update_lease(key(A), LeaseUpdate::TakeDebt), 1);
    refilled(&e, A, 5, 0, T0);
    let open = e.admit_clustered(ip(A), || T0 + MS, true);
    assert!(open.verdict.is_none() && !open.refill);
    for _ in 0..20 {
        assert_eq!(
            admit(&e, A, T0 + 2 * MS),
            (Some(BlockReason::TooManyConnections), false)
        );
    }
    drop(open);
    for i in 0..4 {
        assert_eq!(admit(&e, A, T0 + 3 * MS), (None, i == 3), "token {i}");
    }
}

#[test]
fn observe_mode_reports_the_cluster_refusal_and_admits() {
    let e = leased(1, json!({"mode": "observe"}));
    admit(&e, A, T0);
    refilled(&e, A, 0, S, T0);
    let a = e.admit_clustered(ip(A), || T0 + MS, true);
    let v = a.verdict.expect("a verdict");
    assert_eq!(
        (v.reason, v.observed),
        (BlockReason::ClusterRateLimited, true)
    );
    assert!(a.guard.is_some(), "admitted and counted");
    assert_eq!(e.counts(ip(A)).0, 1);
}

#[test]
fn leases_move_with_their_entries_as_the_table_grows() {
    const N: u32 = 50_000;
    let e = leased(2, json!({}));
    let addr = |i: u32| v4(0x0a00_0000 | i);
    for i in 0..N {
        let a = e.admit_clustered(addr(i), || T0, true);
        assert!(a.verdict.is_none() && a.refill, "client {i}");
    }
    assert_eq!(e.lease_clients(), N as usize);
    for i in 0..N {
        let k = IpKey::new(addr(i), 64);
        assert_eq!(e.update_lease(k, LeaseUpdate::TakeDebt), 1, "client {i}");
        let u = LeaseUpdate::Refilled {
            granted: 2 + u64::from(i % 3),
            retry_after_ns: 0,
            now_ns: T0,
        };
        e.update_lease(k, u);
    }
    // Each finds its own tokens: 2 + i % 3 of them, the last one asking.
    for i in 0..N {
        let tokens = 2 + i % 3;
        for t in 0..tokens {
            let a = e.admit_clustered(addr(i), || T0 + MS, true);
            assert!(a.verdict.is_none(), "client {i}");
            assert_eq!(a.refill, t + 1 == tokens, "client {i}, token {t}");
        }
    }
}

#[test]
fn an_entry_owing_credit_is_not_idle_and_leaves_when_nothing_is_owed() {
    let e = leased(2, json!({}));
    admit(&e, A, T0);
    // Nothing local keeps the entry (no rate limit), but its credit is owed and in flight.
    assert_eq!(e.evict_tick(T0 + 10 * S, 1_000_000), 0);
    assert!(e.is_tracked(ip(A)));
    e.update_lease(key(A), LeaseUpdate::TakeDebt);
    refilled(&e, A, 2, 0, T0 + 10 * S);
    assert_eq!(e.evict_tick(T0 + 10 * S, 1_000_000), 0, "live tokens");
    assert_eq!(e.evict_tick(T0 + 11 * S, 1_000_000), 1, "lapsed: idle");
    assert_eq!(e.lease_clients(), 0);
    // An answer for an evicted client is dropped; the client starts again on credit.
    refilled(&e, A, 2, 0, T0 + 11 * S);
    assert!(!e.is_tracked(ip(A)));
    assert_eq!(admit(&e, A, T0 + 12 * S), (None, true));

    // Clients that left: credit owed with its request never queued is kept 10 s after the last
    // connection, then given up; a refill never answered is kept 60 s.
    let e = leased(2, json!({}));
    let (b, c, t) = ("192.0.2.2", "192.0.2.3", T0 + 20 * S);
    admit(&e, b, t);
    e.update_lease(key(b), LeaseUpdate::NotSent);
    admit(&e, c, t);
    assert_eq!(e.evict_tick(t + 10 * S - 1, 1_000_000), 0);
    assert_eq!(e.evict_tick(t + 10 * S, 1_000_000), 1);
    assert!(!e.is_tracked(ip(b)) && e.is_tracked(ip(c)));
    assert_eq!(e.evict_tick(t + 60 * S - 1, 1_000_000), 0);
    assert_eq!(e.evict_tick(t + 60 * S, 1_000_000), 1);
    assert_eq!(e.lease_clients(), 0);
}

#[test]
fn a_policy_without_cluster_rate_limit_frees_the_leases() {
    let e = leased(2, json!({}));
    let base = e.table_memory_bytes();
    for i in 0..10_000 {
        e.admit_clustered(v4(0x0a00_0000 | i), || T0, true);
    }
    let with = e.table_memory_bytes();
    assert_eq!(e.lease_clients(), 10_000);
    e.set_policy(Some(policy(json!({}))), T0);
    let without = e.table_memory_bytes();
    assert_eq!(e.lease_clients(), 0);
    let slots = (with - without) / 16;
    assert!(
        (10_000..=20_000).contains(&slots),
        "{slots} lease slots freed ({base} → {with} → {without} bytes)"
    );
    let a = e.admit_clustered(v4(0x0a00_0000), || T0, true);
    assert!(a.verdict.is_none() && !a.refill, "no lease now");
    // Switched on again: fresh leases, the first connection on credit.
    e.set_policy(
        Some(policy(
            json!({"clusterRateLimit": {"connectionsPerSecond": 10}}),
        )),
        T0,
    );
    assert_eq!(admit(&e, "10.0.0.0", T0), (None, true));
}

/// Lease tokens and credit, each spent exactly once however the threads interleave.
#[test]
fn threads_spend_each_token_and_credit_exactly_once() {
    const THREADS: usize = 4;
    const PER: usize = 3_000;
    race::until_raced(
        "lease admissions of one client",
        [("admissions overlapping another", 2_000)],
        || {
            let e = leased(10_000, json!({}));
            admit(&e, A, T0);
            e.update_lease(key(A), LeaseUpdate::TakeDebt);
            refilled(&e, A, 10_000, 0, T0);
            let (barrier, race, stop) =
                (Barrier::new(THREADS), Race::new(1), AtomicBool::new(false));
            let per: Vec<(usize, usize, usize)> = thread::scope(|s| {
                let hs: Vec<_> = (0..THREADS)
                    .map(|_| {
                        let (e, barrier, race, stop) = (&e, &barrier, &race, &stop);
                        s.spawn(move || {
                            let _g = StopOnPanic(stop);
                            barrier.wait();
                            let (mut admitted, mut asks, mut raced) = (0, 0, 0);
                            for _ in 0..PER {
                                if stop.load(Ordering::Relaxed) {
                                    break;
                                }
                                let (a, seen) =
                                    race.op(0, || e.admit_clustered(ip(A), || T0 + MS, true));
                                admitted += usize::from(a.verdict.is_none());
                                asks += usize::from(a.refill);
                                raced += usize::from(seen.side(0));
                            }
                            (admitted, asks, raced)
                        })
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect()
            });
            let sum = |f: fn(&(usize, usize, usize)) -> usize| per.iter().map(f).sum::<usize>();
            // 10,000 tokens, then 2,000 on credit (up to the lease of 10,000).
            assert_eq!(sum(|p| p.0), THREADS * PER);
            assert_eq!(sum(|p| p.1), 1, "only the last token asks");
            assert_eq!(e.update_lease(key(A), LeaseUpdate::TakeDebt), 2_000);
            [sum(|p| p.2)]
        },
    );
}
