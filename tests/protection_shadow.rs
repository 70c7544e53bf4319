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
