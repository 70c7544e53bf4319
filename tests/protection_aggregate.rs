//! Guards that no single client reveals, with injected time: the prefix tier, the listener
//! budget, known-good clients, defense mode, ban escalation — and their eviction under a
//! 2M-address flood.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;
use common::engine::*;
use rampart::protection::{Admission, BlockReason, Engine, IpKey, PREFIX_NOTE};
use serde_json::json;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// `None` when admitted cleanly, else the (enforced) refusal reason.
fn reason(e: &Engine, addr: IpAddr, now: u64) -> Option<BlockReason> {
    let a = e.admit(addr, now);
    match a.verdict {
        None => None,
        Some(v) => {
            assert!(!v.observed && a.guard.is_none());
            Some(v.reason)
        }
    }
}

fn net(i: u32) -> IpAddr {
    ip(&format!("203.0.113.{i}"))
}

// ---------- prefix tier

#[test]
fn a_prefix_admits_exactly_its_burst_over_all_its_clients() {
    let e = engine(json!({
        "rateLimit": {"connectionsPerSecond": 0.1, "burst": 1},
        "prefixLimit": {"connectionsPerSecond": 1, "burst": 10},
    }));
    let got: Vec<Option<BlockReason>> = (1..=40).map(|i| reason(&e, net(i), T0)).collect();
    assert_eq!(got[..10], [None; 10]);
    assert_eq!(got[10..], [Some(BlockReason::PrefixRateLimited); 30]);
    // Another /24 has its own budget.
    assert_eq!(reason(&e, ip("203.0.114.1"), T0), None);
    // One more per second, exactly: the prefix TAT is T0 + 10 s, its tolerance 9 s.
    assert_eq!(
        reason(&e, net(11), T0 + S - 1),
        Some(BlockReason::PrefixRateLimited)
    );
    // The prefix's refusals consumed nothing of client 11's own burst of 1.
    assert_eq!(reason(&e, net(11), T0 + S), None);
    assert_eq!(
        reason(&e, net(12), T0 + S),
        Some(BlockReason::PrefixRateLimited)
    );
    // A client's own refusal does not reach its prefix: client 11 is over its own limit now
    // (one per 10 s), and its attempt leaves the prefix's next token for client 12.
    assert_eq!(
        reason(&e, net(11), T0 + 2 * S),
        Some(BlockReason::RateLimited)
    );
    assert_eq!(reason(&e, net(12), T0 + 2 * S), None);
    let v = e.blocked(T0 + 2 * S);
    let listed: Vec<(String, BlockReason)> = v
        .rate_limited
        .iter()
        .map(|b| (b.ip.clone(), b.reason))
        .collect();
    assert_eq!(
        listed,
        vec![
            ("203.0.113.0/24".to_string(), BlockReason::PrefixRateLimited),
            ("203.0.113.11".to_string(), BlockReason::RateLimited),
        ]
    );
}

#[test]
fn ipv6_prefixes_default_to_48_bits_and_respect_custom_lengths() {
    let e = engine(json!({"prefixLimit": {"connectionsPerSecond": 1, "burst": 2}}));
    assert_eq!(reason(&e, ip("2001:db8:1:1::1"), T0), None);
    assert_eq!(reason(&e, ip("2001:db8:1:ffff::1"), T0), None);
    assert_eq!(
        reason(&e, ip("2001:db8:1:2::1"), T0),
        Some(BlockReason::PrefixRateLimited)
    );
    assert_eq!(reason(&e, ip("2001:db8:2::1"), T0), None);
    assert_eq!(e.tracked_prefixes(), 2);
    let e = engine(json!({
        "prefixLimit": {"ipv4PrefixLength": 16, "ipv6PrefixLength": 32, "connectionsPerSecond": 1, "burst": 1},
    }));
    assert_eq!(reason(&e, ip("198.51.1.1"), T0), None);
    assert_eq!(
        reason(&e, ip("198.51.200.1"), T0),
        Some(BlockReason::PrefixRateLimited)
    );
    assert_eq!(reason(&e, ip("::ffff:198.52.0.1"), T0), None);
    assert_eq!(
        e.blocked(T0).rate_limited[0].ip,
        "198.51.0.0/16".to_string()
    );
}

#[test]
fn a_boxed_prefix_refuses_all_its_clients_and_is_listed_as_a_cidr() {
    let e = engine(json!({
        "prefixLimit": {"connectionsPerSecond": 1, "burst": 3},
        "penaltyBox": {"durationMs": 60_000},
    }));
    let boxes = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&boxes);
    e.set_box_listener(Some(Arc::new(move |k: IpKey, d: u64, prefix: bool| {
        sink.lock().unwrap().push((k.to_string(), d, prefix))
    })));
    for i in 1..=3 {
        assert_eq!(reason(&e, net(i), T0), None);
    }
    assert_eq!(reason(&e, net(4), T0), Some(BlockReason::PrefixRateLimited));
    // Every client of the prefix, new or not, is now penalty_boxed.
    for i in [1, 4, 5, 200] {
        assert_eq!(
            reason(&e, net(i), T0 + S),
            Some(BlockReason::PenaltyBoxed),
            "{i}"
        );
    }
    let v = e.blocked(T0 + S);
    assert_eq!(v.penalty_boxed.len(), 1);
    let b = &v.penalty_boxed[0];
    assert_eq!(
        (b.ip.as_str(), b.reason, b.note.as_deref()),
        (
            "203.0.113.0/24",
            BlockReason::PenaltyBoxed,
            Some(PREFIX_NOTE)
        )
    );
    // Attempts while boxed that the prefix rate allows were debited (one at T0 + 1 s), the rest
    // moved the deadline to T0 + 1 s + 60 s.
    assert_eq!(b.remaining_ms, Some(60_000));
    assert_eq!(
        boxes.lock().unwrap()[..],
        [
            ("203.0.113.0/24".to_string(), T0 + 60 * S, true),
            ("203.0.113.0/24".to_string(), T0 + 61 * S, true),
        ]
    );
    // The clients themselves were never boxed or limited.
    assert!(v.rate_limited.iter().all(|b| b.ip.ends_with("/24")));
    assert_eq!(
        e.boxed(T0 + S),
        vec![(IpKey::prefix(net(1), 24, 48), T0 + 61 * S, true)]
    );
    // Other prefixes are untouched; the box ends at its deadline.
    assert_eq!(reason(&e, ip("203.0.114.1"), T0 + S), None);
    assert_eq!(reason(&e, net(9), T0 + 61 * S), None);
}

#[test]
fn prefix_concurrency_is_held_by_the_connection_guard() {
    let e = engine(json!({"prefixLimit": {"maxConcurrent": 2}, "maxConcurrentPerIp": 5}));
    let a = e.admit(net(1), T0);
    let b = e.admit(net(2), T0);
    assert!(a.verdict.is_none() && b.verdict.is_none());
    assert_eq!(e.prefix_active(net(77)), 2);
    assert_eq!(
        reason(&e, net(3), T0),
        Some(BlockReason::PrefixTooManyConnections)
    );
    assert_eq!(
        e.blocked(T0).concurrency_limited[0].reason,
        BlockReason::PrefixTooManyConnections
    );
    // The refused client's own count was not taken.
    assert_eq!(e.counts(net(3)), (0, 0));
    drop(a);
    assert_eq!(e.prefix_active(net(1)), 1);
    let c = e.admit(net(3), T0);
    assert!(c.verdict.is_none());
    drop((b, c));
    assert_eq!(e.prefix_active(net(1)), 0);
    assert!(e.blocked(T0).concurrency_limited.is_empty());
    // A prefix with connections is never evicted; an idle one is.
    let held = e.admit(net(9), T0);
    assert_eq!(e.evict_tick(T0 + 3600 * S, 1_000_000), 3);
    assert!(e.is_prefix_tracked(net(9)));
    drop(held);
    assert_eq!(e.evict_tick(T0 + 3600 * S, 1_000_000), 2);
    assert_eq!(e.tracked_prefixes(), 0);
}

#[test]
fn a_prefix_limit_change_carries_its_usage_over() {
    let e = engine(json!({"prefixLimit": {"connectionsPerSecond": 10, "burst": 10}}));
    for i in 1..=10 {
        assert_eq!(reason(&e, net(i), T0), None);
    }
    // 10 used at 10/s (TAT T0 + 1 s) → 10 used at 1/s (TAT T0 + 10 s, tolerance 9 s).
    e.set_policy(
        Some(policy(
            json!({"prefixLimit": {"connectionsPerSecond": 1, "burst": 10}}),
        )),
        T0,
    );
    assert_eq!(
        reason(&e, net(11), T0 + S - 1),
        Some(BlockReason::PrefixRateLimited)
    );
    assert_eq!(reason(&e, net(11), T0 + S), None);
    assert_eq!(
        reason(&e, net(12), T0 + S),
        Some(BlockReason::PrefixRateLimited)
    );
}

#[test]
fn observe_mode_reports_the_new_guards_and_admits() {
    let e = engine(json!({
        "mode": "observe",
        "prefixLimit": {"connectionsPerSecond": 1, "burst": 1, "maxConcurrent": 10},
        "listenerLimit": {"connectionsPerSecond": 1, "burst": 2},
    }));
    let verdict = |a: &Admission| a.verdict.map(|v| (v.reason, v.observed));
    let a = e.admit(net(1), T0);
    assert_eq!(verdict(&a), None);
    let b = e.admit(net(2), T0);
    assert_eq!(verdict(&b), Some((BlockReason::PrefixRateLimited, true)));
    assert!(b.admitted() && b.guard.is_some());
    let c = e.admit(ip("198.51.100.1"), T0);
    assert_eq!(verdict(&c), None);
    let d = e.admit(ip("192.0.2.1"), T0);
    assert_eq!(verdict(&d), Some((BlockReason::ListenerOverloaded, true)));
    // Observed connections are counted on their prefix too.
    assert_eq!(e.prefix_active(net(1)), 2);
    drop((a, b, c, d));
    assert_eq!(e.prefix_active(net(1)), 0);
}

// ---------- listener budget and known-good clients

#[test]
fn the_listener_budget_sheds_new_clients_but_not_known_good_ones() {
    let e = engine(json!({
        "rateLimit": {"connectionsPerSecond": 1, "burst": 3},
        "listenerLimit": {"connectionsPerSecond": 1, "burst": 2},
    }));
    let good = ip("192.0.2.10");
    assert_eq!(reason(&e, good, T0), None);
    assert!(e.mark_known_good(good, T0));
    assert_eq!(e.known_good_clients(), 1);
    assert_eq!(reason(&e, v4(0x0a00_0001), T0), None); // the budget's second token
    for i in 2..=61 {
        assert_eq!(
            reason(&e, v4(0x0a00_0000 + i), T0),
            Some(BlockReason::ListenerOverloaded)
        );
    }
    // The known-good client is exempt (and not counted), within its own limits...
    assert_eq!(reason(&e, good, T0), None);
    assert_eq!(reason(&e, good, T0), None);
    // ... which still apply.
    assert_eq!(reason(&e, good, T0), Some(BlockReason::RateLimited));
    // The budget's refusals consumed nothing: a refused new client still has its own burst,
    // and the budget gave back exactly one token per second.
    assert_eq!(reason(&e, v4(0x0a00_0002), T0 + S), None);
    assert_eq!(
        reason(&e, v4(0x0a00_0003), T0 + S),
        Some(BlockReason::ListenerOverloaded)
    );
    // The mark expires after knownGoodTtlMs (default 1 h, kept to the second).
    assert!(e.is_known_good(good, T0 + 3600 * S - 1));
    assert!(!e.is_known_good(good, T0 + 3600 * S));
    let t = T0 + 3600 * S;
    assert_eq!(reason(&e, v4(0x0a00_0100), t), None);
    assert_eq!(reason(&e, v4(0x0a00_0101), t), None);
    assert_eq!(reason(&e, good, t), Some(BlockReason::ListenerOverloaded));
    assert_eq!(e.known_good_clients(), 0);
}

#[test]
fn the_listener_pending_cap_counts_handshakes_of_clients_that_are_not_known_good() {
    let e = engine(json!({"listenerLimit": {"maxPendingHandshakes": 2}}));
    let good = ip("192.0.2.10");
    assert!(e.mark_known_good(good, T0));
    let p1 = e.pending_handshake(v4(0x0a00_0001), T0).unwrap();
    let p2 = e.pending_handshake(v4(0x0a00_0002), T0).unwrap();
    assert_eq!(e.listener_pending(), 2);
    let refused = e.pending_handshake(v4(0x0a00_0003), T0).unwrap_err();
    assert_eq!(refused.reason, BlockReason::ListenerOverloaded);
    // Nothing was counted for the refused client.
    assert_eq!(e.counts(v4(0x0a00_0003)), (0, 0));
    let g = e.pending_handshake(good, T0).unwrap();
    assert_eq!((e.listener_pending(), e.counts(good)), (2, (0, 1)));
    drop(p1);
    assert_eq!(e.listener_pending(), 1);
    let p3 = e.pending_handshake(v4(0x0a00_0003), T0).unwrap();
    drop((p2, p3, g));
    assert_eq!(e.listener_pending(), 0);
}

#[test]
fn known_good_marks_are_lost_in_the_box_and_kept_over_idle_entries() {
    let e = engine(json!({
        "rateLimit": {"connectionsPerSecond": 1, "burst": 1},
        "penaltyBox": {"durationMs": 10_000},
        "knownGoodTtlMs": 60_000,
        "maxTrackedIps": 3,
    }));
    let (good, bad) = (ip("192.0.2.1"), ip("192.0.2.2"));
    for c in [good, bad] {
        assert_eq!(reason(&e, c, T0), None);
        assert!(e.mark_known_good(c, T0));
    }
    assert_eq!(e.known_good_clients(), 2);
    // A known-good client over its own limit is boxed, and loses its mark.
    assert_eq!(reason(&e, bad, T0), Some(BlockReason::RateLimited));
    assert!(!e.is_known_good(bad, T0));
    assert_eq!(e.known_good_clients(), 1);
    // A boxed client cannot be marked.
    assert!(!e.mark_known_good(bad, T0 + S));
    // The sweep keeps the known-good entry while its mark runs (it is not idle); the other one's
    // box ended at T0 + 10 s, so it is idle and goes ...
    assert_eq!(e.evict_tick(T0 + 30 * S, 1_000), 1);
    assert!(e.is_tracked(good) && !e.is_tracked(bad));
    // ... and at the cap newcomers (rate-limited for a second) replace each other first.
    for i in 0..20 {
        assert_eq!(reason(&e, v4(0x0b00_0000 + i), T0 + 30 * S), None);
        assert!(e.is_tracked(good));
    }
    assert_eq!(e.tracked_ips(), 3);
    // Once the mark has expired the sweep uncounts it and the entry goes.
    assert_eq!(e.known_good_clients(), 1);
    assert_eq!(e.evict_tick(T0 + 3_600 * S, 1_000), 3);
    assert_eq!(e.known_good_clients(), 0);
    assert!(!e.is_tracked(good));
}

// ---------- defense mode

fn defense_engine(extra: serde_json::Value) -> Engine {
    let mut cfg = json!({
        "defense": {"mode": "auto", "minConnectionsPerSecond": 10, "holdMs": 3_000, "sigma": 3},
    });
    if let (Some(c), Some(x)) = (cfg.as_object_mut(), extra.as_object()) {
        for (k, v) in x {
            c.insert(k.clone(), v.clone());
        }
    }
    engine(cfg)
}

/// `n` new connections from distinct addresses during second `sec` (after T0).
fn burst(e: &Engine, sec: u64, n: u32, base: u32) {
    for i in 0..n {
        let a = e.admit(v4(base + i), T0 + sec * S + u64::from(i));
        assert!(a.admitted());
    }
}

#[test]
fn defense_turns_on_above_the_threshold_and_off_after_hold() {
    let e = defense_engine(json!({}));
    assert_eq!(e.defense_tick(T0), None);
    // A steady 5/s over the whole 5-minute window: the threshold is max(10, 5 + 3 × 0) = 10.
    for s in 0..301 {
        burst(&e, s, 5, 0x0a00_0000 + (s as u32) * 100);
        assert_eq!(e.defense_tick(T0 + (s + 1) * S), None, "second {s}");
    }
    assert!(!e.defense_active());
    // 10 in a second is not above it (and is learned: 5.02 + 3 × 0.29 is still under the floor);
    // 11 is.
    burst(&e, 301, 10, 0x0b00_0000);
    assert_eq!(e.defense_tick(T0 + 302 * S), None);
    burst(&e, 302, 11, 0x0c00_0000);
    let on = e.defense_tick(T0 + 303 * S + 50 * MS).unwrap();
    assert!(on.active && e.defense_active());
    assert_eq!((on.rate, on.threshold), (11, 10.0));
    // Quiet again: still on until holdMs after the end of the last second above.
    for s in 303..305 {
        assert_eq!(e.defense_tick(T0 + (s + 1) * S), None, "second {s}");
        assert!(e.defense_active());
    }
    // A second above within the hold restarts it.
    burst(&e, 305, 30, 0x0d00_0000);
    assert_eq!(e.defense_tick(T0 + 306 * S), None);
    for s in 306..308 {
        assert_eq!(e.defense_tick(T0 + (s + 1) * S), None, "second {s}");
        assert!(e.defense_active());
    }
    // The end of second 308 is 3 s (holdMs) after the end of second 305.
    let off = e.defense_tick(T0 + 309 * S).unwrap();
    assert!(!off.active && !e.defense_active());
    assert_eq!((off.rate, off.threshold), (0, 10.0));
}

#[test]
fn surges_while_on_do_not_raise_the_baseline_and_forced_modes_apply_at_once() {
    let e = defense_engine(json!({"defense": {"mode": "auto", "minConnectionsPerSecond": 30}}));
    // A full window (300 s) of a steady 20/s: threshold max(30, 20 + 3 × 0) = 30.
    assert_eq!(e.defense_tick(T0), None);
    for s in 0..301 {
        burst(&e, s, 20, 0x0a00_0000 + (s as u32) * 100);
        assert_eq!(e.defense_tick(T0 + (s + 1) * S), None, "second {s}");
    }
    // A long surge at 100/s turns it on and keeps it on: its seconds are not learned.
    for s in 301..400 {
        burst(&e, s, 100, 0x0b00_0000 + (s as u32) * 1000);
        let c = e.defense_tick(T0 + (s + 1) * S);
        assert_eq!(
            c.map(|c| (c.active, c.rate, c.threshold)),
            (s == 301).then_some((true, 100, 30.0)),
            "second {s}"
        );
    }
    assert!(e.defense_active());
    // In the first 5 minutes every second is learned: a listener that starts busier than the
    // floor turns defense on at its first second and off again once its normal is known.
    let e = defense_engine(json!({}));
    e.defense_tick(T0);
    burst(&e, 0, 50, 0x0c00_0000);
    let on = e.defense_tick(T0 + S).unwrap();
    assert_eq!((on.active, on.rate, on.threshold), (true, 50, 10.0));
    for s in 1..3 {
        burst(&e, s, 50, 0x0c00_0000 + (s as u32) * 100);
        assert_eq!(e.defense_tick(T0 + (s + 1) * S), None, "second {s}");
    }
    burst(&e, 3, 50, 0x0c00_0300);
    let off = e.defense_tick(T0 + 4 * S).unwrap();
    assert_eq!((off.active, off.rate, off.threshold), (false, 50, 50.0));
    // 'on' forces it on without waiting for a tick; the event follows at the next tick.
    let e = defense_engine(json!({}));
    e.set_policy(Some(policy(json!({"defense": {"mode": "on"}}))), T0);
    assert!(e.defense_active());
    let c = e.defense_tick(T0 + 100 * MS).unwrap();
    assert!(c.active);
    assert_eq!(c.threshold, 100.0);
    e.set_policy(Some(policy(json!({"defense": {"mode": "off"}}))), T0 + S);
    assert!(!e.defense_active());
    assert!(!e.defense_tick(T0 + S + 100 * MS).unwrap().active);
    assert_eq!(e.defense_tick(T0 + 2 * S), None);
}

#[test]
fn defense_tightens_clients_that_are_not_known_good() {
    let e = engine(json!({
        "rateLimit": {"connectionsPerSecond": 10, "burst": 9},
        "prefixLimit": {"connectionsPerSecond": 100, "burst": 100},
        "defense": {"mode": "on", "factor": 0.25},
    }));
    let (good, other) = (ip("192.0.2.1"), ip("198.51.100.1"));
    assert!(e.mark_known_good(good, T0));
    // factor 0.25: ⌊0.25 × 8⌋ + 1 = 3 at once, then 2.5/s.
    for _ in 0..3 {
        assert_eq!(reason(&e, other, T0), None);
    }
    assert_eq!(reason(&e, other, T0), Some(BlockReason::RateLimited));
    assert_eq!(
        reason(&e, other, T0 + 400 * MS - 1),
        Some(BlockReason::RateLimited)
    );
    // The known-good client keeps its full burst of 9.
    for _ in 0..9 {
        assert_eq!(reason(&e, good, T0), None);
    }
    assert_eq!(reason(&e, good, T0), Some(BlockReason::RateLimited));
    // The prefix rate is tightened the same way: 100 burst → ⌊0.25 × 99⌋ + 1 = 25 at once.
    let e = engine(json!({
        "prefixLimit": {"connectionsPerSecond": 100, "burst": 100},
        "defense": {"mode": "on", "factor": 0.25},
    }));
    let admitted = (1..=40)
        .filter(|&i| reason(&e, net(i), T0).is_none())
        .count();
    assert_eq!(admitted, 25);
}

#[test]
fn clients_first_seen_in_defense_get_new_client_max_pending_and_the_short_timeout() {
    let e = defense_engine(json!({"slowHandshake": {"maxPendingPerIp": 8}}));
    let old = ip("192.0.2.1");
    let _seen = e.admit(old, T0);
    e.set_policy(
        Some(policy(json!({
            "slowHandshake": {"maxPendingPerIp": 8},
            "defense": {"mode": "on", "newClientMaxPending": 1},
        }))),
        T0,
    );
    let newcomer = ip("198.51.100.7");
    let a = e.admit(newcomer, T0);
    assert!(a.verdict.is_none());
    let p1 = e.pending_handshake(newcomer, T0).unwrap();
    assert!(p1.tightened());
    assert_eq!(
        e.pending_handshake(newcomer, T0).unwrap_err().reason,
        BlockReason::SlowHandshake
    );
    // A client tracked before defense began keeps maxPendingPerIp.
    let held: Vec<_> = (0..8)
        .map(|_| e.pending_handshake(old, T0).unwrap())
        .collect();
    assert!(held.iter().all(|g| g.tightened()));
    // Known-good clients are not tightened at all.
    assert!(e.mark_known_good(newcomer, T0));
    let p2 = e.pending_handshake(newcomer, T0).unwrap();
    assert!(!p2.tightened());
    let p = e.policy().unwrap();
    assert_eq!(p.defense_handshake_timeout_ns(), 3_000 * MS);
    drop((p1, p2, held, a));
}

// ---------- escalation

#[test]
fn a_client_boxed_again_within_memory_gets_the_previous_duration_times_factor_capped() {
    let e = engine(json!({
        "rateLimit": {"connectionsPerSecond": 1, "burst": 1},
        "penaltyBox": {"durationMs": 10_000,
                       "escalation": {"factor": 2, "maxDurationMs": 35_000, "memoryMs": 60_000}},
    }));
    let a = ip("192.0.2.66");
    let remaining = |now| {
        e.blocked(now)
            .penalty_boxed
            .first()
            .and_then(|b| b.remaining_ms)
    };
    let mut t = T0;
    for expected in [10_000, 20_000, 35_000, 35_000] {
        assert_eq!(reason(&e, a, t), None);
        assert_eq!(reason(&e, a, t), Some(BlockReason::RateLimited));
        assert_eq!(remaining(t), Some(expected));
        // Quiet until the deadline, then back within the memory.
        t += expected * MS + 5 * S;
        assert_eq!(remaining(t), None);
    }
    // Continued excess while boxed moves the deadline by the current (escalated) duration.
    assert_eq!(reason(&e, a, t), None);
    assert_eq!(reason(&e, a, t), Some(BlockReason::RateLimited));
    assert_eq!(reason(&e, a, t + S / 2), Some(BlockReason::PenaltyBoxed));
    assert_eq!(remaining(t + S / 2), Some(35_000));
    // The escalation memory keeps the entry over idle ones until it runs out.
    t += 35_500 * MS;
    assert_eq!(e.evict_tick(t + 59 * S, 1_000), 0);
    // Past memoryMs after the last deadline: back to durationMs.
    t += 61 * S;
    assert_eq!(reason(&e, a, t), None);
    assert_eq!(reason(&e, a, t), Some(BlockReason::RateLimited));
    assert_eq!(remaining(t), Some(10_000));
}

#[test]
fn a_prefix_escalates_like_a_client() {
    let e = engine(json!({
        "prefixLimit": {"connectionsPerSecond": 1, "burst": 1},
        "penaltyBox": {"durationMs": 1_000, "escalation": {"factor": 3}},
    }));
    let remaining = |now| {
        e.blocked(now)
            .penalty_boxed
            .first()
            .and_then(|b| b.remaining_ms)
    };
    assert_eq!(reason(&e, net(1), T0), None);
    assert_eq!(reason(&e, net(2), T0), Some(BlockReason::PrefixRateLimited));
    assert_eq!(remaining(T0), Some(1_000));
    let t = T0 + 10 * S;
    assert_eq!(reason(&e, net(3), t), None);
    assert_eq!(reason(&e, net(4), t), Some(BlockReason::PrefixRateLimited));
    assert_eq!(remaining(t), Some(3_000));
}

// ---------- both tiers under a flood

/// 2,000,000 addresses, each in its own /24, against `maxTrackedIps: 1000000`: both tables stay
/// at exactly the cap, and boxed clients and boxed prefixes are kept over the flood's idle
/// entries.
#[test]
fn flood_of_two_million_addresses_pins_both_tiers_at_their_caps() {
    let cap = 1_000_000usize;
    let flood = 2_000_000u32;
    let started = Instant::now();
    let rss0 = rss_bytes();
    let e = engine(json!({
        "rateLimit": {"connectionsPerSecond": 10, "burst": 10},
        "prefixLimit": {"connectionsPerSecond": 10, "burst": 20},
        "penaltyBox": {"durationMs": 600_000},
        "maxTrackedIps": cap,
    }));
    // 1,000 boxed clients (each in its own /24 of 10.0.0.0/8, so no prefix is limited) and 100
    // boxed prefixes (in 172.16.0.0/16).
    let boxed: Vec<IpAddr> = (0..1_000u32)
        .map(|i| v4(0x0a00_0000 | (i << 8) | 1))
        .collect();
    for &a in &boxed {
        for _ in 0..10 {
            assert_eq!(reason(&e, a, T0), None);
        }
        assert_eq!(reason(&e, a, T0), Some(BlockReason::RateLimited));
    }
    let boxed_prefixes: Vec<IpAddr> = (0..100u32).map(|i| v4(0xac10_0000 | (i << 8))).collect();
    for &p in &boxed_prefixes {
        let p = u32::from(match p {
            IpAddr::V4(v) => v,
            _ => unreachable!(),
        });
        for c in 0..20 {
            assert_eq!(reason(&e, v4(p | (c + 1)), T0), None);
        }
        assert_eq!(
            reason(&e, v4(p | 100), T0),
            Some(BlockReason::PrefixRateLimited)
        );
    }
    // One connection per address, each in its own /24, 1 µs apart.
    let end = common::engine::flood(&e, flood, |i| v4(0x4000_0000u32.wrapping_add(i << 8) | 1));
    assert_eq!(e.tracked_ips(), cap);
    assert_eq!(e.tracked_prefixes(), cap);
    for &a in &boxed {
        assert_eq!(reason(&e, a, end), Some(BlockReason::PenaltyBoxed));
    }
    for &p in &boxed_prefixes {
        let fresh = match p {
            IpAddr::V4(v) => v4(u32::from(v) | 200),
            _ => unreachable!(),
        };
        assert_eq!(reason(&e, fresh, end), Some(BlockReason::PenaltyBoxed));
    }
    let v = e.blocked(end);
    let prefixes = v.penalty_boxed.iter().filter(|b| b.note.is_some()).count();
    assert_eq!(
        (v.penalty_boxed.len() - prefixes, prefixes),
        (boxed.len(), boxed_prefixes.len())
    );
    let heap = e.table_memory_bytes() + e.prefix_table_memory_bytes();
    let rss = rss_bytes().zip(rss0).map(|(a, b)| a.saturating_sub(b));
    println!(
        "flood, both tiers: {flood} addresses in {flood} /24s, cap {cap}: tracked {} clients and {} prefixes, boxed kept {}/{} + {}/{} prefixes, heap {:.1} B/entry, RSS delta {} B/entry, {:.1?}",
        e.tracked_ips(),
        e.tracked_prefixes(),
        boxed.len(),
        boxed.len(),
        prefixes,
        boxed_prefixes.len(),
        heap as f64 / (2 * cap) as f64,
        rss.map_or("n/a".into(), |r| format!("{:.1}", r as f64 / (2 * cap) as f64)),
        started.elapsed()
    );
    assert!(heap / (2 * cap) <= 96);
}

/// What a newly attached XDP program is given: every running known-good mark, with the deadline
/// the known-good listener would be told (the mark's end plus half a TTL); expired marks and
/// unmarked clients are left out.
#[test]
fn known_good_marks_lists_running_marks_with_the_mirrored_deadline() {
    let e = engine(json!({"knownGoodTtlMs": 10_000}));
    let (good, late, plain) = (ip("198.51.100.1"), ip("198.51.100.2"), ip("198.51.100.3"));
    assert!(e.mark_known_good(good, T0));
    assert!(e.mark_known_good(late, T0 + 5 * S));
    assert!(e.admit(plain, T0).admitted());
    let mut marks = e.known_good_marks(T0 + 9 * S);
    marks.sort();
    assert_eq!(
        marks,
        vec![
            (IpKey::new(good, 64), (T0 + 10 * S) + 5 * S),
            (IpKey::new(late, 64), (T0 + 15 * S) + 5 * S),
        ]
    );
    assert_eq!(
        e.known_good_marks(T0 + 10 * S),
        vec![(IpKey::new(late, 64), (T0 + 15 * S) + 5 * S)]
    );
}
