//! `protection.shadow` through the engine, with injected time: what the shadow would refuse is
//! reported on the admission, and nothing is enforced.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;
use common::engine::*;
use rampart::protection::BlockReason;
use serde_json::json;
use std::net::IpAddr;

#[test]
fn shadow_limits_report_without_refusing() {
    let e = engine(json!({
        "rateLimit": {"connectionsPerSecond": 100, "burst": 100},
        "shadow": {"rateLimit": {"connectionsPerSecond": 1, "burst": 2}, "maxConcurrentPerIp": 3},
    }));
    let a: IpAddr = "192.0.2.80".parse().unwrap();
    let mut guards = Vec::new();
    let mut shadow = Vec::new();
    for k in 0..4 {
        let adm = e.admit(a, T0 + k * MS);
        assert!(adm.verdict.is_none(), "never enforced");
        shadow.push(adm.shadow);
        guards.push(adm.guard);
    }
    // Burst 2: the 3rd and 4th are over the shadow rate (checked before the open count).
    assert_eq!(
        shadow,
        [
            None,
            None,
            Some(BlockReason::RateLimited),
            Some(BlockReason::RateLimited)
        ]
    );
    // A second later the rate admits one; four connections are open: over the shadow's 3.
    let adm = e.admit(a, T0 + 1_100 * MS);
    assert!(adm.verdict.is_none());
    assert_eq!(adm.shadow, Some(BlockReason::TooManyConnections));
    // Nothing listed: the shadow boxes and lists nobody.
    let b = e.blocked(T0 + 1_100 * MS);
    assert!(b.rate_limited.is_empty() && b.penalty_boxed.is_empty());
    drop(guards);
}

#[test]
fn a_refusal_of_the_enforced_policy_is_not_reported_as_shadow() {
    let e = engine(json!({
        "rateLimit": {"connectionsPerSecond": 1, "burst": 1},
        "shadow": {"rateLimit": {"connectionsPerSecond": 1, "burst": 1}},
    }));
    let a: IpAddr = "192.0.2.81".parse().unwrap();
    let first = e.admit(a, T0);
    assert!(first.verdict.is_none() && first.shadow.is_none());
    let second = e.admit(a, T0);
    assert_eq!(
        second.verdict.map(|v| v.reason),
        Some(BlockReason::RateLimited)
    );
    assert_eq!(second.shadow, None);
}

#[test]
fn a_shadow_prefix_counts_open_connections_until_their_guards_drop() {
    let e =
        engine(json!({"shadow": {"prefixLimit": {"ipv4PrefixLength": 24, "maxConcurrent": 2}}}));
    let ip = |n: u8| IpAddr::from([198, 51, 100, n]);
    let a = e.admit(ip(1), T0);
    let b = e.admit(ip(2), T0);
    assert_eq!((a.shadow, b.shadow), (None, None));
    let c = e.admit(ip(3), T0);
    assert!(c.verdict.is_none(), "never enforced");
    assert_eq!(c.shadow, Some(BlockReason::PrefixTooManyConnections));
    // Another /24 is not affected.
    assert_eq!(e.admit(IpAddr::from([198, 51, 101, 1]), T0).shadow, None);
    // Three open (the shadow counts real connections, its own refusals included): two closed,
    // one left, so the next is admitted by the shadow too.
    drop((a, b));
    assert_eq!(e.admit(ip(4), T0).shadow, None);
    drop(c);
}

#[test]
fn an_ip_diverse_flood_keeps_the_shadow_bounded_and_a_swap_removes_it() {
    let e = engine(json!({
        "shadow": {
            "blocklist": ["10.0.0.0/8"],
            "rateLimit": {"connectionsPerSecond": 1, "burst": 1},
            "prefixLimit": {"connectionsPerSecond": 1, "burst": 1, "maxConcurrent": 1},
            "listenerLimit": {"connectionsPerSecond": 1000000000, "burst": 1000000},
        },
    }));
    // 200,000 addresses in 782 /24 prefixes, each over nothing enforced: the shadow tables are
    // fixed (the unit tests check their size and eviction), and the shadow still answers after.
    flood(&e, 200_000, |i| v4(0xc000_0000 + i));
    let blocked = IpAddr::from([10, 1, 2, 3]);
    assert_eq!(
        e.admit(blocked, T0 + S).shadow,
        Some(BlockReason::CidrBlocked)
    );
    e.set_policy(Some(policy(json!({}))), T0 + 2 * S);
    assert_eq!(e.admit(blocked, T0 + 2 * S).shadow, None);
}
