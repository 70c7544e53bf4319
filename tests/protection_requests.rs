//! `requestLimit` through the engine with injected time: the per-client budget over all of a
//! client's requests, the prefix budget, nothing consumed by a refusal, observe mode, eviction
//! keeping a limited budget, and the config's validation.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;
use common::engine::*;
use rampart::config::protection::policy_from_json;
use rampart::protection::{Engine, RequestLimited, RequestScope};
use serde_json::json;
use std::net::IpAddr;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// The outcome of `n` requests of `ip` at `now`: how many passed.
fn passed(e: &Engine, ip: IpAddr, n: u32, now: u64) -> u32 {
    (0..n).filter(|_| e.request(ip, now).is_ok()).count() as u32
}

#[test]
fn a_client_gets_its_burst_then_the_rate_and_the_exact_wait() {
    let e = engine(json!({"requestLimit": {"requestsPerSecond": 10, "burst": 5}}));
    let a = ip("192.0.2.1");
    assert_eq!(passed(&e, a, 8, T0), 5);
    assert_eq!(
        e.request(a, T0),
        Err(RequestLimited {
            retry_after_ns: 100 * MS,
            scope: RequestScope::Client,
            limit: 10.0,
            burst: 5,
            observed: false,
        })
    );
    assert_eq!(
        e.request(a, T0 + 100 * MS - 1).unwrap_err().retry_after_ns,
        1
    );
    assert_eq!(passed(&e, a, 3, T0 + 100 * MS), 1);
    // Another client has its own budget; the same client over IPv4-mapped IPv6 does not.
    assert_eq!(passed(&e, ip("192.0.2.2"), 5, T0), 5);
    assert!(e.request(ip("::ffff:192.0.2.1"), T0 + 100 * MS).is_err());
    // A client is its /64 by default (ipv6PrefixLength), as admission keys it.
    assert_eq!(passed(&e, ip("2001:db8::1"), 3, T0), 3);
    assert_eq!(passed(&e, ip("2001:db8::2"), 3, T0), 2);
}

#[test]
fn the_prefix_budget_is_shared_and_a_refusal_consumes_nothing() {
    let e = engine(json!({
        "requestLimit": {"requestsPerSecond": 100, "burst": 3, "prefixRequestsPerSecond": 1, "prefixBurst": 4},
        "prefixLimit": {"maxConcurrent": 1000, "ipv4PrefixLength": 24},
    }));
    // Client .1 takes 3 (its burst), client .2 takes the prefix's 4th, .3 is refused by the prefix.
    assert_eq!(passed(&e, ip("198.51.100.1"), 5, T0), 3);
    assert_eq!(passed(&e, ip("198.51.100.2"), 1, T0), 1);
    let l = e.request(ip("198.51.100.3"), T0).unwrap_err();
    assert_eq!(
        (l.scope, l.limit, l.burst, l.retry_after_ns),
        (RequestScope::Prefix, 1.0, 4, S)
    );
    // One request per second of the prefix from then on, each a request of .3's own budget.
    assert_eq!(passed(&e, ip("198.51.100.3"), 2, T0 + S), 1);
    assert_eq!(passed(&e, ip("198.51.100.3"), 2, T0 + 2 * S), 1);
    // Another /24 is untouched.
    assert_eq!(passed(&e, ip("198.51.101.1"), 3, T0), 3);
    // A client refusal does not reach the prefix: had it been debited there, the neighbour
    // would find the prefix's burst of 2 spent.
    let e = engine(
        json!({"requestLimit": {"requestsPerSecond": 1, "burst": 1, "prefixRequestsPerSecond": 1, "prefixBurst": 2}}),
    );
    assert_eq!(passed(&e, ip("203.0.113.1"), 1, T0), 1);
    assert_eq!(
        e.request(ip("203.0.113.1"), T0).unwrap_err().scope,
        RequestScope::Client
    );
    // The prefix (default /24) still has one left for a neighbour.
    assert_eq!(passed(&e, ip("203.0.113.9"), 2, T0), 1);
}

#[test]
fn observe_mode_decides_the_same_and_says_so() {
    let e = engine(json!({"mode": "observe", "requestLimit": {"requestsPerSecond": 1}}));
    let a = ip("192.0.2.7");
    assert!(e.request(a, T0).is_ok());
    let l = e.request(a, T0).unwrap_err();
    assert!(l.observed);
    assert_eq!((l.scope, l.burst), (RequestScope::Client, 1));
}

#[test]
fn without_request_limit_or_for_the_allowlist_every_request_passes() {
    let e = engine(json!({"rateLimit": {"connectionsPerSecond": 1}}));
    assert_eq!(passed(&e, ip("192.0.2.1"), 100, T0), 100);
    let e =
        engine(json!({"allowlist": ["192.0.2.0/24"], "requestLimit": {"requestsPerSecond": 1}}));
    assert_eq!(passed(&e, ip("192.0.2.1"), 100, T0), 100);
    assert_eq!(passed(&e, ip("192.0.3.1"), 100, T0), 1);
}

#[test]
fn eviction_keeps_a_limited_request_budget() {
    let e = engine(json!({"requestLimit": {"requestsPerSecond": 1, "burst": 2}}));
    let a = ip("192.0.2.1");
    assert_eq!(passed(&e, a, 3, T0), 2);
    // The TAT is T0 + 2 s: not idle before it, so evicting cannot reset the budget.
    assert_eq!(e.evict_tick(T0 + S, 1_000_000), 0);
    assert!(e.request(a, T0 + S - 1).is_err());
    assert_eq!(e.evict_tick(T0 + 2 * S, 1_000_000), 1);
    assert_eq!(passed(&e, a, 3, T0 + 2 * S), 2);
}

#[test]
fn the_fields_are_validated_with_every_bad_one_named() {
    let err = policy_from_json(&json!({
        "requestLimit": {"burst": 0, "prefixBurst": 2, "prefixRequestsPerSecond": -1, "rps": 1},
        "slowRequest": {"keepAliveTimeoutMs": 0, "maxRequestsPerConnection": 1.5, "x": 1},
    }))
    .unwrap_err();
    let mut paths: Vec<String> = err.issues.iter().map(|i| i.path.clone()).collect();
    paths.sort();
    assert_eq!(
        paths,
        [
            "protection.requestLimit.burst",
            "protection.requestLimit.prefixRequestsPerSecond",
            "protection.requestLimit.requestsPerSecond",
            "protection.requestLimit.rps",
            "protection.slowRequest.keepAliveTimeoutMs",
            "protection.slowRequest.maxRequestsPerConnection",
            "protection.slowRequest.x",
        ]
    );
    let p = policy(json!({
        "requestLimit": {"requestsPerSecond": 2.5},
        "slowRequest": {"keepAliveTimeoutMs": 5000, "maxRequestsPerConnection": 0},
    }));
    let rl = p.request_limit().unwrap();
    assert_eq!((rl.client.rate, rl.client.burst, rl.prefix), (2.5, 3, None));
    assert_eq!(
        (p.keep_alive_timeout_ns(), p.max_requests_per_connection()),
        (5000 * MS, 0)
    );
    let d = policy(json!({}));
    assert!(d.request_limit().is_none());
    assert_eq!(
        (d.keep_alive_timeout_ns(), d.max_requests_per_connection()),
        (75 * S, 1000)
    );
}
