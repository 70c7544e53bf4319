//! Engine behaviour with injected time: GCRA limits, penalty box, swaps, keys, observe mode,
//! concurrency and pending guards, ClientHello checks, blocked view.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;
use common::engine::*;
use rampart::protection::{
    Admission, BlockReason, BlockedEntry, DynamicBlocks, Engine, HelloFacts, IpKey,
};
use serde_json::json;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// `None` when admitted cleanly, else the refusal reason (asserting it is enforced).
fn try_admit(e: &Engine, addr: &str, now: u64) -> Option<BlockReason> {
    let a = e.admit(ip(addr), now);
    match a.verdict {
        None => None,
        Some(v) => {
            assert!(!v.observed);
            assert!(a.guard.is_none());
            Some(v.reason)
        }
    }
}

fn ips(list: &[BlockedEntry]) -> Vec<(String, Option<u64>)> {
    list.iter()
        .map(|b| (b.ip.clone(), b.remaining_ms))
        .collect()
}

#[test]
fn burst_admits_exactly_burst_then_one_per_interval() {
    let e = engine(json!({"rateLimit": {"connectionsPerSecond": 10, "burst": 3}}));
    for _ in 0..3 {
        assert_eq!(try_admit(&e, "192.0.2.1", T0), None);
    }
    assert_eq!(
        try_admit(&e, "192.0.2.1", T0),
        Some(BlockReason::RateLimited)
    );
    assert_eq!(
        try_admit(&e, "192.0.2.1", T0 + 100 * MS - 1),
        Some(BlockReason::RateLimited)
    );
    assert_eq!(try_admit(&e, "192.0.2.1", T0 + 100 * MS), None);
    assert_eq!(
        try_admit(&e, "192.0.2.1", T0 + 100 * MS),
        Some(BlockReason::RateLimited)
    );
    assert_eq!(try_admit(&e, "192.0.2.1", T0 + 200 * MS), None);
    // A different client is independent.
    assert_eq!(try_admit(&e, "192.0.2.2", T0), None);
}

#[test]
fn burst_defaults_to_rate() {
    let e = engine(json!({"rateLimit": {"connectionsPerSecond": 4}}));
    for _ in 0..4 {
        assert_eq!(try_admit(&e, "192.0.2.1", T0), None);
    }
    assert_eq!(
        try_admit(&e, "192.0.2.1", T0),
        Some(BlockReason::RateLimited)
    );
    let e = engine(json!({"rateLimit": {"connectionsPerSecond": 0.5}}));
    assert_eq!(try_admit(&e, "192.0.2.1", T0), None);
    assert_eq!(
        try_admit(&e, "192.0.2.1", T0 + 2 * S - 1),
        Some(BlockReason::RateLimited)
    );
    assert_eq!(try_admit(&e, "192.0.2.1", T0 + 2 * S), None);
}

#[test]
fn rate_and_sustained_are_independent() {
    // 10/s burst 10; 20/min (one per 3 s) burst 20.
    let e = engine(json!({
        "rateLimit": {"connectionsPerSecond": 10},
        "sustained": {"connectionsPerMinute": 20},
    }));
    let a = "198.51.100.7";
    let admitted = |now| (0..100).filter(|_| try_admit(&e, a, now).is_none()).count();
    assert_eq!(admitted(T0), 10); // the per-second burst
    assert_eq!(admitted(T0 + S), 10); // per-second refilled; sustained now at its burst of 20
    assert_eq!(admitted(T0 + 2 * S), 0); // per-second refilled, sustained exhausted
    assert_eq!(try_admit(&e, a, T0 + 2 * S), Some(BlockReason::RateLimited));
    assert_eq!(admitted(T0 + 3 * S), 1); // one sustained interval later
    assert_eq!(admitted(T0 + 6 * S), 1);
    // A sustained refusal did not consume the per-second limit: 10 fresh per-second arrivals
    // were refused at 2 s, yet at 9 s exactly the sustained credit (one) is admitted.
    assert_eq!(admitted(T0 + 9 * S), 1);
}

#[test]
fn penalty_box_entry_extension_expiry() {
    let e = engine(json!({
        "rateLimit": {"connectionsPerSecond": 1, "burst": 1},
        "penaltyBox": {"durationMs": 10_000},
    }));
    let boxes = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&boxes);
    e.set_box_listener(Some(Arc::new(move |k: IpKey, d: u64, _prefix: bool| {
        sink.lock().unwrap().push((k.to_string(), d))
    })));
    let a = "203.0.113.9";
    assert_eq!(try_admit(&e, a, T0), None);
    // The exhausting attempt is rate_limited and boxes the client.
    assert_eq!(try_admit(&e, a, T0), Some(BlockReason::RateLimited));
    let v = e.blocked(T0);
    assert_eq!(ips(&v.penalty_boxed), vec![(a.to_string(), Some(10_000))]);
    assert_eq!(ips(&v.rate_limited), vec![(a.to_string(), Some(1_000))]);
    // A conforming attempt while boxed is refused and debited, without extension.
    assert_eq!(try_admit(&e, a, T0 + S), Some(BlockReason::PenaltyBoxed));
    assert_eq!(
        ips(&e.blocked(T0 + S).penalty_boxed),
        vec![(a.to_string(), Some(9_000))]
    );
    // It was debited: at 1.5 s the limit is exhausted, which resets the deadline.
    assert_eq!(
        try_admit(&e, a, T0 + 1_500 * MS),
        Some(BlockReason::PenaltyBoxed)
    );
    assert_eq!(
        ips(&e.blocked(T0 + 1_500 * MS).penalty_boxed),
        vec![(a.to_string(), Some(10_000))]
    );
    assert_eq!(
        ips(&e.blocked(T0 + 11_500 * MS - 1).penalty_boxed),
        vec![(a.to_string(), Some(1))]
    );
    // Quiet until the deadline: readmitted.
    assert_eq!(try_admit(&e, a, T0 + 11_500 * MS), None);
    let v = e.blocked(T0 + 11_500 * MS);
    assert!(v.penalty_boxed.is_empty());
    assert_eq!(
        *boxes.lock().unwrap(),
        vec![
            (a.to_string(), T0 + 10 * S),
            (a.to_string(), T0 + 11_500 * MS)
        ]
    );
}

#[test]
fn quiet_client_is_readmitted_at_the_deadline() {
    let e = engine(json!({
        "rateLimit": {"connectionsPerSecond": 1, "burst": 1},
        "penaltyBox": {"durationMs": 5_000},
    }));
    let a = "203.0.113.10";
    assert_eq!(try_admit(&e, a, T0), None);
    assert_eq!(try_admit(&e, a, T0), Some(BlockReason::RateLimited));
    // One conforming knock per second never extends the box.
    for s in 1..5 {
        assert_eq!(
            try_admit(&e, a, T0 + s * S),
            Some(BlockReason::PenaltyBoxed)
        );
    }
    // (A knock at 5 s − 1 ns would be excess: TAT is 5 s after the four debits.)
    assert_eq!(
        ips(&e.blocked(T0 + 5 * S - 1).penalty_boxed),
        vec![(a.to_string(), Some(1))]
    );
    assert_eq!(try_admit(&e, a, T0 + 5 * S), None);
}

#[test]
fn deadline_never_moves_backwards_and_survives_swaps() {
    let long = json!({
        "rateLimit": {"connectionsPerSecond": 1, "burst": 1},
        "penaltyBox": {"durationMs": 60_000},
    });
    let e = engine(long);
    let a = "203.0.113.11";
    assert_eq!(try_admit(&e, a, T0), None);
    assert_eq!(try_admit(&e, a, T0), Some(BlockReason::RateLimited));
    // Swap to a shorter box (and a new blocklist): the running deadline is kept.
    e.set_policy(
        Some(policy(json!({
            "rateLimit": {"connectionsPerSecond": 1, "burst": 1},
            "penaltyBox": {"durationMs": 1_000},
            "blocklist": ["192.0.2.0/24"],
        }))),
        T0 + S,
    );
    // Excess under the short box would set now + 1 s, earlier than the kept deadline: no change.
    assert_eq!(
        try_admit(&e, a, T0 + 2 * S),
        Some(BlockReason::PenaltyBoxed)
    );
    assert_eq!(
        try_admit(&e, a, T0 + 2 * S),
        Some(BlockReason::PenaltyBoxed)
    );
    assert_eq!(
        ips(&e.blocked(T0 + 2 * S).penalty_boxed),
        vec![(a.to_string(), Some(58_000))]
    );
    assert_eq!(
        ips(&e.blocked(T0 + 60 * S - 1).penalty_boxed),
        vec![(a.to_string(), Some(1))]
    );
    assert_eq!(try_admit(&e, a, T0 + 60 * S), None);
}

#[test]
fn disabling_and_reenabling_the_box_does_not_resurrect_deadlines() {
    let boxed = json!({
        "rateLimit": {"connectionsPerSecond": 1, "burst": 1},
        "penaltyBox": {"durationMs": 60_000},
    });
    let e = engine(boxed.clone());
    let a = "203.0.113.12";
    assert_eq!(try_admit(&e, a, T0), None);
    assert_eq!(try_admit(&e, a, T0), Some(BlockReason::RateLimited));
    e.set_policy(
        Some(policy(
            json!({"rateLimit": {"connectionsPerSecond": 1, "burst": 1}}),
        )),
        T0 + S,
    );
    assert!(e.blocked(T0 + S).penalty_boxed.is_empty());
    e.set_policy(Some(policy(boxed)), T0 + 2 * S);
    assert!(e.blocked(T0 + 2 * S).penalty_boxed.is_empty());
    assert_eq!(try_admit(&e, a, T0 + 2 * S), None);
    // Removing protection entirely and re-adding it behaves the same.
    assert_eq!(try_admit(&e, a, T0 + 2 * S), Some(BlockReason::RateLimited));
    e.set_policy(None, T0 + 3 * S);
    assert_eq!(try_admit(&e, a, T0 + 3 * S), None);
    e.set_policy(Some(policy(json!({"penaltyBox": {}}))), T0 + 4 * S);
    assert_eq!(try_admit(&e, a, T0 + 4 * S), None);
}

#[test]
fn swap_preserves_buckets_and_a_burst_decrease_applies_to_them() {
    let e = engine(json!({"rateLimit": {"connectionsPerSecond": 10, "burst": 10}}));
    let a = "192.0.2.50";
    for _ in 0..5 {
        assert_eq!(try_admit(&e, a, T0), None);
    }
    // Same limits, new policy object: 5 left exactly.
    e.set_policy(
        Some(policy(
            json!({"rateLimit": {"connectionsPerSecond": 10, "burst": 10}, "requireSni": true}),
        )),
        T0,
    );
    assert_eq!(e.tracked_ips(), 1);
    // Burst down to 2: the five debits are honoured (TAT = now + 500 ms, tolerance now 100 ms).
    e.set_policy(
        Some(policy(
            json!({"rateLimit": {"connectionsPerSecond": 10, "burst": 2}}),
        )),
        T0,
    );
    assert_eq!(try_admit(&e, a, T0), Some(BlockReason::RateLimited));
    assert_eq!(
        try_admit(&e, a, T0 + 400 * MS - 1),
        Some(BlockReason::RateLimited)
    );
    assert_eq!(try_admit(&e, a, T0 + 400 * MS), None);
    assert_eq!(
        try_admit(&e, a, T0 + 400 * MS),
        Some(BlockReason::RateLimited)
    );
}

#[test]
fn ipv6_clients_share_their_prefix() {
    let e = engine(json!({"rateLimit": {"connectionsPerSecond": 1, "burst": 1}}));
    assert_eq!(try_admit(&e, "2001:db8:1:2::1", T0), None);
    assert_eq!(
        try_admit(&e, "2001:db8:1:2:aaaa::9", T0),
        Some(BlockReason::RateLimited)
    );
    assert_eq!(try_admit(&e, "2001:db8:1:3::1", T0), None);
    assert_eq!(
        ips(&e.blocked(T0).rate_limited),
        vec![("2001:db8:1:2::/64".to_string(), Some(1_000))]
    );
    let e = engine(json!({
        "rateLimit": {"connectionsPerSecond": 1, "burst": 1},
        "ipv6PrefixLength": 48,
    }));
    assert_eq!(try_admit(&e, "2001:db8:1:2::1", T0), None);
    assert_eq!(
        try_admit(&e, "2001:db8:1:3::1", T0),
        Some(BlockReason::RateLimited)
    );
    assert_eq!(ips(&e.blocked(T0).rate_limited)[0].0, "2001:db8:1::/48");
}

#[test]
fn ipv4_mapped_is_ipv4_for_every_check_and_report() {
    let e = engine(json!({
        "rateLimit": {"connectionsPerSecond": 1, "burst": 1},
        "blocklist": ["198.51.100.0/24"],
        "allowlist": ["::ffff:192.0.2.0/120"],
    }));
    assert_eq!(try_admit(&e, "::ffff:203.0.113.1", T0), None);
    assert_eq!(
        try_admit(&e, "203.0.113.1", T0),
        Some(BlockReason::RateLimited)
    );
    assert_eq!(ips(&e.blocked(T0).rate_limited)[0].0, "203.0.113.1");
    assert_eq!(
        try_admit(&e, "::ffff:198.51.100.5", T0),
        Some(BlockReason::CidrBlocked)
    );
    // The allowlist entry is the IPv4 network 192.0.2.0/24.
    for _ in 0..5 {
        assert_eq!(try_admit(&e, "::ffff:192.0.2.77", T0), None);
        assert_eq!(try_admit(&e, "192.0.2.77", T0), None);
    }
    assert_eq!(e.blocked(T0).cidr_blocklist[0].ip, "198.51.100.0/24");
}

#[test]
fn allowlist_skips_every_check_and_tracks_nothing() {
    let dynamic = Arc::new(DynamicBlocks::new());
    let e = Engine::new(443, Arc::clone(&dynamic));
    e.set_policy(
        Some(policy(json!({
            "rateLimit": {"connectionsPerSecond": 1, "burst": 1},
            "maxConcurrentPerIp": 1,
            "blocklist": ["10.0.0.0/8"],
            "allowlist": ["10.1.0.0/16"],
            "requireSni": true,
        }))),
        T0,
    );
    dynamic.block(
        rampart::protection::parse_cidr("10.1.2.3").unwrap(),
        None,
        None,
        None,
        T0,
    );
    let mut held = Vec::new();
    for _ in 0..10 {
        let a = e.admit(ip("10.1.2.3"), T0);
        assert!(a.verdict.is_none() && a.guard.is_none());
        held.push(a);
    }
    assert_eq!(e.tracked_ips(), 0);
    let facts = HelloFacts::default();
    assert_eq!(e.check_hello(ip("10.1.2.3"), &facts), None);
    assert_eq!(
        try_admit(&e, "10.2.0.1", T0),
        Some(BlockReason::CidrBlocked)
    );
}

#[test]
fn check_order_blocklist_before_box_before_rate_before_concurrency() {
    let dynamic = Arc::new(DynamicBlocks::new());
    let e = Engine::new(443, Arc::clone(&dynamic));
    e.set_policy(
        Some(policy(json!({
            "rateLimit": {"connectionsPerSecond": 1, "burst": 2},
            "maxConcurrentPerIp": 1,
            "penaltyBox": {"durationMs": 1000},
        }))),
        T0,
    );
    let a = "192.0.2.9";
    let g = e.admit(ip(a), T0);
    assert!(g.admitted());
    // Concurrency full but the rate still conforms: too_many_connections, nothing consumed.
    assert_eq!(try_admit(&e, a, T0), Some(BlockReason::TooManyConnections));
    assert_eq!(try_admit(&e, a, T0), Some(BlockReason::TooManyConnections));
    assert_eq!(
        ips(&e.blocked(T0).concurrency_limited),
        vec![(a.to_string(), None)]
    );
    drop(g);
    assert!(e.blocked(T0).concurrency_limited.is_empty());
    let g = e.admit(ip(a), T0);
    assert!(g.verdict.is_none());
    // Concurrency full and the rate exhausted: rate_limited wins, and boxes.
    assert_eq!(try_admit(&e, a, T0), Some(BlockReason::RateLimited));
    assert_eq!(try_admit(&e, a, T0), Some(BlockReason::PenaltyBoxed));
    dynamic.block(
        rampart::protection::parse_cidr(a).unwrap(),
        Some(10),
        None,
        None,
        T0,
    );
    assert_eq!(try_admit(&e, a, T0), Some(BlockReason::DynamicBlocked));
    assert_eq!(
        try_admit(&e, a, T0 + 10 * MS),
        Some(BlockReason::PenaltyBoxed)
    );
    drop(g);
    assert_eq!(e.counts(ip(a)), (0, 0));
}

#[test]
fn concurrency_guard_counts_and_releases() {
    let e = engine(json!({"maxConcurrentPerIp": 2}));
    let a = "192.0.2.60";
    let g1 = e.admit(ip(a), T0);
    let g2 = e.admit(ip(a), T0);
    assert!(g1.admitted() && g2.admitted());
    assert_eq!(e.counts(ip(a)), (2, 0));
    assert_eq!(try_admit(&e, a, T0), Some(BlockReason::TooManyConnections));
    drop(g1);
    let g3 = e.admit(ip(a), T0);
    assert!(g3.verdict.is_none());
    drop((g2, g3));
    assert_eq!(e.counts(ip(a)), (0, 0));
}

#[test]
fn observe_mode_decides_reports_and_admits() {
    let e = engine(json!({
        "rateLimit": {"connectionsPerSecond": 1, "burst": 1},
        "penaltyBox": {"durationMs": 10_000},
        "maxConcurrentPerIp": 1,
        "blocklist": ["198.51.100.0/24"],
        "requireSni": true,
        "mode": "observe",
    }));
    let a = "192.0.2.70";
    let mut held: Vec<Admission> = Vec::new();
    let mut reasons = Vec::new();
    for _ in 0..3 {
        let adm = e.admit(ip(a), T0);
        assert!(adm.admitted());
        assert!(adm.guard.is_some());
        reasons.push(adm.verdict.map(|v| (v.reason, v.observed)));
        held.push(adm);
    }
    assert_eq!(
        reasons,
        vec![
            None,
            Some((BlockReason::RateLimited, true)),
            Some((BlockReason::PenaltyBoxed, true)),
        ]
    );
    assert_eq!(e.counts(ip(a)), (3, 0));
    let v = e.blocked(T0);
    assert_eq!(ips(&v.penalty_boxed), vec![(a.to_string(), Some(10_000))]);
    let cidr = e.admit(ip("198.51.100.1"), T0);
    assert!(cidr.admitted());
    assert_eq!(cidr.verdict.unwrap().reason, BlockReason::CidrBlocked);
    let facts = HelloFacts {
        complete: true,
        has_sni: false,
        ja3: None,
        ja4: None,
    };
    let v = e.check_hello(ip(a), &facts).unwrap();
    assert_eq!((v.reason, v.observed), (BlockReason::NoSni, true));
    drop(held);
    drop(cidr);
    assert_eq!(e.counts(ip(a)), (0, 0));
}

#[test]
fn hello_checks_in_order() {
    let ja3 = "e7d705a3286e19ea42f587b344ee6865";
    let ja4 = "t13d1516h2_8daaf6152771_b186095e22b6";
    let e = engine(json!({
        "requireSni": true,
        "ja3Blocklist": [ja3.to_uppercase()],
        "ja4Blocklist": [ja4],
    }));
    let a = ip("192.0.2.80");
    let f = |complete, has_sni, j3, j4| HelloFacts {
        complete,
        has_sni,
        ja3: j3,
        ja4: j4,
    };
    let reason = |facts: HelloFacts<'_>| e.check_hello(a, &facts).map(|v| v.reason);
    assert_eq!(
        reason(f(
            true,
            true,
            Some("00000000000000000000000000000000"),
            None
        )),
        None
    );
    assert_eq!(
        reason(f(false, true, None, None)),
        Some(BlockReason::IncompleteHandshake)
    );
    assert_eq!(
        reason(f(true, false, Some(ja3), Some(ja4))),
        Some(BlockReason::NoSni)
    );
    assert_eq!(
        reason(f(true, true, Some(ja3), Some(ja4))),
        Some(BlockReason::Ja3Blocked)
    );
    let upper = ja4.to_uppercase();
    assert_eq!(
        reason(f(true, true, None, Some(&upper))),
        Some(BlockReason::Ja4Blocked)
    );
    // Without fingerprint lists an incomplete ClientHello is not refused for that.
    let e2 = engine(json!({}));
    assert_eq!(e2.check_hello(a, &f(false, false, None, None)), None);
    let e3 = engine(json!({"requireSni": true}));
    assert_eq!(
        e3.check_hello(a, &f(false, false, None, None))
            .map(|v| v.reason),
        Some(BlockReason::NoSni)
    );
}

#[test]
fn pending_handshakes_are_capped_per_ip() {
    let e = engine(json!({"slowHandshake": {"maxPendingPerIp": 2}}));
    let a = ip("192.0.2.90");
    let p1 = e.pending_handshake(a, T0).unwrap();
    let p2 = e.pending_handshake(a, T0).unwrap();
    let v = e.pending_handshake(a, T0).unwrap_err();
    assert_eq!((v.reason, v.observed), (BlockReason::SlowHandshake, false));
    assert_eq!(e.counts(a), (0, 2));
    drop(p1);
    assert!(e.pending_handshake(a, T0).is_ok());
    drop(p2);
    assert_eq!(e.counts(a), (0, 0));
    // Default is 64.
    let e = engine(json!({}));
    let held: Vec<_> = (0..64)
        .map(|_| e.pending_handshake(a, T0).unwrap())
        .collect();
    assert!(e.pending_handshake(a, T0).is_err());
    drop(held);
    // Observe mode: reported as observed, not counted.
    let e = engine(json!({"slowHandshake": {"maxPendingPerIp": 1}, "mode": "observe"}));
    let g = e.pending_handshake(a, T0).unwrap();
    let v = e.pending_handshake(a, T0).unwrap_err();
    assert_eq!((v.reason, v.observed), (BlockReason::SlowHandshake, true));
    assert_eq!(e.counts(a), (0, 1));
    drop(g);
}

#[test]
fn boxed_clients_are_listed_with_their_deadline() {
    let e = engine(json!({
        "rateLimit": {"connectionsPerSecond": 1, "burst": 1},
        "penaltyBox": {"durationMs": 2_000},
    }));
    assert_eq!(try_admit(&e, "2001:db8:5::1", T0), None);
    assert_eq!(
        try_admit(&e, "2001:db8:5::2", T0),
        Some(BlockReason::RateLimited)
    );
    let boxed = boxed_at(&e, T0);
    assert_eq!(
        boxed,
        vec![("2001:db8:5::/64".to_string(), T0 + 2 * S, false)]
    );
    assert!(e.boxed(T0 + 2 * S).is_empty());
}

#[test]
fn no_policy_applies_only_dynamic_blocks() {
    let dynamic = Arc::new(DynamicBlocks::new());
    let e = Engine::new(8443, Arc::clone(&dynamic));
    assert_eq!(try_admit(&e, "192.0.2.1", T0), None);
    assert_eq!(e.tracked_ips(), 0);
    dynamic.block(
        rampart::protection::parse_cidr("192.0.2.0/24").unwrap(),
        None,
        Some("incident 42".into()),
        None,
        T0,
    );
    assert_eq!(
        try_admit(&e, "192.0.2.1", T0),
        Some(BlockReason::DynamicBlocked)
    );
    let v = e.blocked(T0);
    assert_eq!(v.dynamic_blocklist.len(), 1);
    assert_eq!(v.dynamic_blocklist[0].ip, "192.0.2.0/24");
    assert_eq!(v.dynamic_blocklist[0].note.as_deref(), Some("incident 42"));
    assert_eq!(e.check_hello(ip("192.0.2.1"), &HelloFacts::default()), None);
}

#[test]
fn dynamic_blocks_respect_ttl_and_port() {
    let dynamic = Arc::new(DynamicBlocks::new());
    let e443 = Engine::new(443, Arc::clone(&dynamic));
    let e8443 = Engine::new(8443, Arc::clone(&dynamic));
    dynamic.block(
        rampart::protection::parse_cidr("203.0.113.0/24").unwrap(),
        Some(1_500),
        None,
        Some(443),
        T0,
    );
    assert_eq!(
        try_admit(&e443, "203.0.113.4", T0),
        Some(BlockReason::DynamicBlocked)
    );
    assert_eq!(try_admit(&e8443, "203.0.113.4", T0), None);
    assert_eq!(
        ips(&e443.blocked(T0 + 500 * MS).dynamic_blocklist),
        vec![("203.0.113.0/24".to_string(), Some(1_000))]
    );
    assert!(e8443.blocked(T0).dynamic_blocklist.is_empty());
    assert_eq!(
        try_admit(&e443, "203.0.113.4", T0 + 1_500 * MS - 1),
        Some(BlockReason::DynamicBlocked)
    );
    assert_eq!(try_admit(&e443, "203.0.113.4", T0 + 1_500 * MS), None);
    assert!(e443.blocked(T0 + 1_500 * MS).dynamic_blocklist.is_empty());
    assert_eq!(e443.evict_tick(T0 + 2 * S, 100), 0);
    assert_eq!(dynamic.len(), 0);
}

#[test]
fn blocked_view_drops_clients_whose_limit_recovered() {
    let e = engine(json!({"rateLimit": {"connectionsPerSecond": 2, "burst": 1}}));
    assert_eq!(try_admit(&e, "192.0.2.1", T0), None);
    assert_eq!(
        try_admit(&e, "192.0.2.1", T0),
        Some(BlockReason::RateLimited)
    );
    assert_eq!(try_admit(&e, "192.0.2.2", T0), None);
    assert_eq!(
        ips(&e.blocked(T0 + 100 * MS).rate_limited),
        vec![("192.0.2.1".to_string(), Some(400))]
    );
    assert!(e.blocked(T0 + 500 * MS).rate_limited.is_empty());
    // Refused again later: listed again.
    assert_eq!(try_admit(&e, "192.0.2.1", T0 + 500 * MS), None);
    assert_eq!(
        try_admit(&e, "192.0.2.1", T0 + 500 * MS),
        Some(BlockReason::RateLimited)
    );
    assert_eq!(e.blocked(T0 + 500 * MS).rate_limited.len(), 1);
}

#[test]
fn block_reason_strings() {
    let all: Vec<&str> = BlockReason::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(
        all,
        vec![
            "cidr_blocked",
            "dynamic_blocked",
            "penalty_boxed",
            "rate_limited",
            "too_many_connections",
            "max_connections",
            "no_sni",
            "ja3_blocked",
            "ja4_blocked",
            "incomplete_handshake",
            "handshake_timeout",
            "slow_handshake",
            "h2_flood",
            "prefix_rate_limited",
            "prefix_too_many_connections",
            "listener_overloaded",
            "slow_request",
            "cluster_rate_limited",
            "request_rate_limited",
            "upstream_overloaded",
        ]
    );
}

/// Every box the engine reports to its box listener (what the XDP ban queue receives).
fn box_log(e: &Engine) -> Arc<Mutex<Vec<(String, u64)>>> {
    let log: Arc<Mutex<Vec<(String, u64)>>> = Arc::default();
    let l = log.clone();
    e.set_box_listener(Some(Arc::new(move |k: IpKey, d, prefix: bool| {
        assert!(!prefix, "an HTTP/2 offender is a client, not a prefix");
        l.lock().unwrap().push((k.to_string(), d))
    })));
    log
}

#[test]
fn box_client_refuses_until_the_deadline_without_any_policy() {
    let e = Engine::new(8443, Arc::new(DynamicBlocks::new()));
    let log = box_log(&e);
    assert_eq!(e.box_client(ip("192.0.2.7"), 5 * S, T0), Some(T0 + 5 * S));
    // A shorter box never moves the deadline back.
    assert_eq!(e.box_client(ip("192.0.2.7"), S, T0), Some(T0 + 5 * S));
    assert_eq!(
        try_admit(&e, "192.0.2.7", T0 + 5 * S - 1),
        Some(BlockReason::PenaltyBoxed)
    );
    assert_eq!(try_admit(&e, "192.0.2.8", T0), None);
    assert_eq!(try_admit(&e, "192.0.2.7", T0 + 5 * S), None);
    assert_eq!(
        *log.lock().unwrap(),
        vec![
            ("192.0.2.7".to_string(), T0 + 5 * S),
            ("192.0.2.7".to_string(), T0 + 5 * S)
        ]
    );
    // IPv4-mapped is the same client; an IPv6 client is boxed by its /64.
    e.box_client(ip("::ffff:192.0.2.9"), S, T0);
    assert_eq!(
        try_admit(&e, "192.0.2.9", T0),
        Some(BlockReason::PenaltyBoxed)
    );
    e.box_client(ip("2001:db8:1:2::1"), S, T0);
    assert_eq!(
        try_admit(&e, "2001:db8:1:2::ffff", T0),
        Some(BlockReason::PenaltyBoxed)
    );
    assert_eq!(try_admit(&e, "2001:db8:1:3::1", T0), None);
}

#[test]
fn box_client_is_listed_and_reaches_the_xdp_sync_with_a_policy_without_penalty_box() {
    let e = engine(json!({"maxConcurrentPerIp": 10}));
    let log = box_log(&e);
    e.box_client(ip("203.0.113.5"), 1_500 * MS, T0);
    assert_eq!(
        try_admit(&e, "203.0.113.5", T0 + S),
        Some(BlockReason::PenaltyBoxed)
    );
    let v = e.blocked(T0 + 500 * MS);
    assert_eq!(
        ips(&v.penalty_boxed),
        vec![("203.0.113.5".to_string(), Some(1_000))]
    );
    assert_eq!(
        v.penalty_boxed[0].note.as_deref(),
        Some(rampart::protection::engine::H2_BOX_NOTE)
    );
    let boxed: Vec<(String, u64)> = e
        .boxed(T0)
        .into_iter()
        .map(|(k, d, prefix)| {
            assert!(!prefix);
            (k.to_string(), d)
        })
        .collect();
    assert_eq!(boxed, vec![("203.0.113.5".to_string(), T0 + 1_500 * MS)]);
    assert_eq!(log.lock().unwrap().len(), 1);
    // At the deadline: admitted, no longer listed; the cleanup forgets the record.
    assert_eq!(try_admit(&e, "203.0.113.5", T0 + 1_500 * MS), None);
    assert!(e.blocked(T0 + 1_500 * MS).penalty_boxed.is_empty());
    e.evict_tick(T0 + 61 * S, 100);
    assert_eq!(e.offenders(), 0);
}

#[test]
fn box_prefix_refuses_the_prefix_and_lists_it_as_a_local_prefix_box() {
    // A received prefix box holds whatever the local policy: none, and one without prefixLimit.
    for e in [
        Engine::new(8443, Arc::new(DynamicBlocks::new())),
        engine(json!({"maxConcurrentPerIp": 10})),
    ] {
        let log: Arc<Mutex<Vec<(String, u64, bool)>>> = Arc::default();
        let l = log.clone();
        e.set_box_listener(Some(Arc::new(move |k: IpKey, d, prefix: bool| {
            l.lock().unwrap().push((k.to_string(), d, prefix))
        })));
        let net = "203.0.113.0/24".parse().unwrap();
        assert_eq!(e.box_prefix(net, 2 * S, T0), Some(T0 + 2 * S));
        assert_eq!(
            try_admit(&e, "203.0.113.77", T0 + S),
            Some(BlockReason::PenaltyBoxed)
        );
        assert_eq!(try_admit(&e, "203.0.114.1", T0 + S), None);
        let v = e.blocked(T0 + S);
        assert_eq!(
            ips(&v.penalty_boxed),
            vec![("203.0.113.0/24".to_string(), Some(1_000))]
        );
        assert_eq!(
            v.penalty_boxed[0].note.as_deref(),
            Some(rampart::protection::PREFIX_NOTE)
        );
        assert!(v.dynamic_blocklist.is_empty());
        let boxed = boxed_at(&e, T0);
        assert_eq!(
            boxed,
            vec![("203.0.113.0/24".to_string(), T0 + 2 * S, true)]
        );
        assert_eq!(
            *log.lock().unwrap(),
            vec![("203.0.113.0/24".to_string(), T0 + 2 * S, true)],
            "the box listener (the XDP ban queue) is told: a prefix"
        );
        assert_eq!(try_admit(&e, "203.0.113.77", T0 + 2 * S), None);
        assert!(e.blocked(T0 + 2 * S).penalty_boxed.is_empty());
        e.evict_tick(T0 + 2 * S, 100);
        assert!(e.boxed(T0).is_empty(), "purged");
    }
}

#[test]
fn h2_violations_box_after_box_after_violations_within_60_s() {
    // Defaults: the third violation within 60 s boxes for 600000 ms (no penalty box here).
    let e = Engine::new(443, Arc::new(DynamicBlocks::new()));
    let log = box_log(&e);
    assert_eq!(e.record_h2_violation(ip("198.51.100.1"), T0), None);
    assert_eq!(e.record_h2_violation(ip("198.51.100.1"), T0 + 30 * S), None);
    assert_eq!(try_admit(&e, "198.51.100.1", T0 + 30 * S), None);
    assert_eq!(
        e.record_h2_violation(ip("198.51.100.1"), T0 + 60 * S),
        Some(T0 + 660 * S)
    );
    assert_eq!(
        try_admit(&e, "198.51.100.1", T0 + 60 * S),
        Some(BlockReason::PenaltyBoxed)
    );
    assert_eq!(try_admit(&e, "198.51.100.1", T0 + 660 * S), None);
    assert_eq!(
        *log.lock().unwrap(),
        vec![("198.51.100.1".to_string(), T0 + 660 * S)]
    );
    // Spread over more than 60 s: never boxed.
    for k in 0..10 {
        assert_eq!(
            e.record_h2_violation(ip("198.51.100.2"), T0 + k * 31 * S),
            None
        );
    }
}

#[test]
fn h2_box_follows_the_policy_threshold_duration_mode_and_allowlist() {
    let e = engine(json!({
        "penaltyBox": {"durationMs": 2_000},
        "http2": {"boxAfterViolations": 1},
        "allowlist": ["10.0.0.0/8"],
    }));
    assert_eq!(e.record_h2_violation(ip("192.0.2.1"), T0), Some(T0 + 2 * S));
    assert_eq!(
        try_admit(&e, "192.0.2.1", T0 + 2 * S - 1),
        Some(BlockReason::PenaltyBoxed)
    );
    assert_eq!(try_admit(&e, "192.0.2.1", T0 + 2 * S), None);
    // The allowlist skips every check: not counted, never boxed.
    assert_eq!(e.record_h2_violation(ip("10.1.2.3"), T0), None);
    assert_eq!(e.box_client(ip("10.1.2.3"), S, T0), None);
    assert_eq!(try_admit(&e, "10.1.2.3", T0), None);
    // Observe mode: boxed and reported, admitted anyway.
    e.set_policy(
        Some(policy(
            json!({"mode": "observe", "http2": {"boxAfterViolations": 2}}),
        )),
        T0,
    );
    assert_eq!(e.record_h2_violation(ip("192.0.2.3"), T0), None);
    assert_eq!(
        e.record_h2_violation(ip("192.0.2.3"), T0 + S),
        Some(T0 + S + 600 * S)
    );
    let a: Admission = e.admit(ip("192.0.2.3"), T0 + 2 * S);
    assert!(a.admitted() && a.guard.is_some());
    let v = a.verdict.unwrap();
    assert_eq!((v.reason, v.observed), (BlockReason::PenaltyBoxed, true));
}

#[test]
fn engine_and_guards_cross_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Engine>();
    send_sync::<DynamicBlocks>();
    send_sync::<rampart::protection::ConnGuard>();
    send_sync::<rampart::protection::PendingGuard>();
    send_sync::<Admission>();
}

#[test]
fn a_decision_read_under_the_lock_never_refuses_a_conforming_client_decided_out_of_order() {
    // 1e8/s, burst 1: one connection per 10 ns. Two workers accept connections 1 µs apart from
    // one client; the first reads the clock, is descheduled, and reaches the engine after the
    // second was decided.
    let e = engine(json!({"rateLimit": {"connectionsPerSecond": 1e8, "burst": 1}}));
    let a = ip("198.51.100.20");
    assert!(e.admit(a, T0 + 1_000).verdict.is_none());
    // Its pre-lock read is stale (T0); the read under the lock is after the second decision.
    let reads = std::cell::Cell::new(0u32);
    let clock = || {
        reads.set(reads.get() + 1);
        if reads.get() == 1 {
            T0
        } else {
            T0 + 1_050
        }
    };
    let late = e.admit_clocked(a, clock);
    assert_eq!(late.verdict, None);
    assert_eq!(reads.get(), 2);
    // A stale injected time is clamped to the latest decision time of the shard: with burst 2
    // an arrival "before" the last one is judged at the last one's time and conforms.
    let e2 = engine(json!({"rateLimit": {"connectionsPerSecond": 1e8, "burst": 2}}));
    assert!(e2.admit(a, T0 + 1_000).verdict.is_none());
    assert!(e2.admit(a, T0).verdict.is_none());
    // The two used the burst at T0 + 1000: the next one at that instant is refused.
    assert_eq!(
        e2.admit(a, T0 + 1_000).verdict.map(|v| v.reason),
        Some(BlockReason::RateLimited)
    );
}

/// `Engine::boxed(now)` with keys as strings: `(client or prefix, deadline ns, is a prefix)`.
fn boxed_at(e: &Engine, now: u64) -> Vec<(String, u64, bool)> {
    e.boxed(now)
        .into_iter()
        .map(|(k, d, prefix)| (k.to_string(), d, prefix))
        .collect()
}
