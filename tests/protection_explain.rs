//! `Engine::explain`: the state it reports is exact (injected time), it changes nothing, and its
//! verdict is the one the client's next connection gets — checked on every step of random walks
//! over admissions, closes, time, `blockIp` and boxes.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;
use common::engine::{engine, MS, S, T0};
use proptest::prelude::*;
use rampart::protection::{parse_cidr, BlockReason, DynamicBlocks, Engine};
use serde_json::json;
use std::net::IpAddr;
use std::sync::Arc;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn explain_reports_each_tier_exactly() {
    let e = engine(json!({
        "rateLimit": {"connectionsPerSecond": 1, "burst": 2},
        "maxConcurrentPerIp": 3,
        "penaltyBox": {"durationMs": 10_000},
        "prefixLimit": {"maxConcurrent": 100},
        "allowlist": ["192.0.2.0/24"],
        "blocklist": ["198.51.100.0/24"],
    }));
    let a = ip("203.0.113.9");
    let x = e.explain(a, T0);
    assert_eq!(x.verdict, None);
    assert!(!x.tracked && x.protected && !x.allowlisted);
    assert_eq!(x.key.to_string(), "203.0.113.9");
    let g1 = e.admit(a, T0);
    let g2 = e.admit(a, T0);
    assert!(g1.admitted() && g2.admitted());
    let x = e.explain(a, T0 + 100 * MS);
    assert_eq!((x.active, x.max_concurrent, x.tracked), (2, 3, true));
    // Two of a burst of two in the same instant: the next one waits 900 ms more.
    assert_eq!(x.rate_limited_ms, Some(900));
    assert_eq!(x.verdict, Some(BlockReason::RateLimited));
    let p = x.prefix.as_ref().expect("prefixLimit is set");
    assert_eq!(p.cidr.to_string(), "203.0.113.0/24");
    assert_eq!((p.active, p.max_concurrent), (2, 100));
    // explain changed nothing: the refusal it announced is the one admission gives, and boxes.
    assert_eq!(
        e.admit(a, T0 + 100 * MS).verdict.map(|v| v.reason),
        Some(BlockReason::RateLimited)
    );
    let x = e.explain(a, T0 + 200 * MS);
    assert_eq!(x.boxed, Some((9_900, None)));
    assert_eq!(x.verdict, Some(BlockReason::PenaltyBoxed));
    assert_eq!(
        e.explain(ip("192.0.2.1"), T0).verdict,
        None,
        "allowlisted skips every check"
    );
    assert!(e.explain(ip("192.0.2.1"), T0).allowlisted);
    let b = e.explain(ip("198.51.100.7"), T0);
    assert_eq!(
        (b.blocklisted, b.verdict),
        (true, Some(BlockReason::CidrBlocked))
    );
    drop((g1, g2));
    assert_eq!(e.explain(a, T0 + 200 * MS).active, 0);
    // Known-good mark: reported with its time left.
    let k = ip("203.0.113.10");
    drop(e.admit(k, T0));
    assert!(e.mark_known_good(k, T0));
    assert!(e.explain(k, T0 + S).known_good_ms.is_some());
}

#[test]
fn explain_reports_a_dynamic_block_and_an_h2_box_without_a_policy() {
    let dynamic = Arc::new(DynamicBlocks::new());
    let e = Engine::new(443, Arc::clone(&dynamic));
    let a = ip("2001:db8:1:2::7");
    dynamic.block(
        parse_cidr("2001:db8::/32").unwrap(),
        Some(5_000),
        Some("INC-1".into()),
        None,
        T0,
    );
    let x = e.explain(a, T0 + S);
    assert!(!x.protected);
    assert_eq!(x.verdict, Some(BlockReason::DynamicBlocked));
    assert_eq!(x.dynamic.len(), 1);
    assert_eq!(x.dynamic[0].net.to_string(), "2001:db8::/32");
    assert_eq!(x.key.to_string(), "2001:db8:1:2::/64");
    let c = ip("203.0.113.50");
    assert!(e.box_client(c, 60 * S, T0).is_some());
    let x = e.explain(c, T0 + S);
    assert_eq!(
        x.boxed,
        Some((59_000, Some(rampart::protection::engine::H2_BOX_NOTE)))
    );
    assert_eq!(x.verdict, Some(BlockReason::PenaltyBoxed));
}

#[derive(Debug, Clone)]
enum Step {
    Admit(u8),
    Close(usize),
    Wait(u64),
    Block(u8),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0u8..4).prop_map(Step::Admit),
        2 => any::<usize>().prop_map(Step::Close),
        2 => (0u64..3_000).prop_map(Step::Wait),
        1 => (0u8..4).prop_map(Step::Block),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Before every admission, `explain`'s verdict is the admission's reason.
    #[test]
    fn explain_verdict_is_the_next_admission(steps in prop::collection::vec(step(), 1..120)) {
        let dynamic = Arc::new(DynamicBlocks::new());
        let e = Engine::new(443, Arc::clone(&dynamic));
        e.set_policy(Some(common::engine::policy(json!({
            "rateLimit": {"connectionsPerSecond": 2, "burst": 3},
            "sustained": {"connectionsPerMinute": 30},
            "maxConcurrentPerIp": 2,
            "penaltyBox": {"durationMs": 2_000, "escalation": {"factor": 2}},
            "prefixLimit": {"connectionsPerSecond": 1, "burst": 4, "maxConcurrent": 3, "ipv4PrefixLength": 30},
        }))), T0);
        let mut now = T0;
        let mut open = Vec::new();
        for s in steps {
            match s {
                Step::Admit(i) => {
                    let a: IpAddr = format!("203.0.113.{}", 4 + i).parse().unwrap();
                    let said = e.explain(a, now).verdict;
                    let got = e.admit(a, now);
                    prop_assert_eq!(said, got.verdict.map(|v| v.reason), "client {} at {}", a, now - T0);
                    if got.admitted() {
                        open.push(got);
                    }
                }
                Step::Close(i) if !open.is_empty() => {
                    let n = open.len();
                    drop(open.swap_remove(i % n));
                }
                Step::Close(_) => {}
                Step::Wait(ms) => now += ms * MS,
                Step::Block(i) => {
                    let net = parse_cidr(&format!("203.0.113.{}", 4 + i)).unwrap();
                    dynamic.block(net, Some(500), None, None, now);
                }
            }
        }
    }
}

#[test]
fn explain_reports_a_prefix_over_its_rate() {
    let e = engine(json!({
        "prefixLimit": {"connectionsPerSecond": 1, "burst": 2, "ipv4PrefixLength": 24},
    }));
    assert!(e.admit(ip("203.0.113.1"), T0).admitted());
    assert!(e.admit(ip("203.0.113.2"), T0).admitted());
    let x = e.explain(ip("203.0.113.3"), T0);
    let p = x.prefix.as_ref().expect("prefixLimit is set");
    assert_eq!((p.tracked, p.rate_limited_ms), (true, Some(1_000)));
    assert_eq!(x.verdict, Some(BlockReason::PrefixRateLimited));
    assert_eq!(
        e.admit(ip("203.0.113.3"), T0).verdict.map(|v| v.reason),
        Some(BlockReason::PrefixRateLimited)
    );
}
