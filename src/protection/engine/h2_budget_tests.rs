use super::*;
use crate::http2::{Budget, ClientBudget, H2GuardConfig, Violation};
use crate::protection::dynamic::DynamicBlocks;
use crate::protection::h2_budget::{SETS, WAYS};
use std::net::Ipv4Addr;

const S: u64 = crate::clock::NS_PER_SEC;
const T0: u64 = 1000 * S;

fn engine() -> Engine {
    Engine::new(443, Arc::new(DynamicBlocks::default()))
}

fn ip(n: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + n))
}

/// Admits `kind` at `now` until refused; how many were admitted (at most `cap`).
fn spend(b: &impl ClientBudget, kind: Budget, now: u64, cap: u32) -> u32 {
    (0..cap).take_while(|_| b.admit(kind, now)).count() as u32
}

#[test]
fn limits_are_the_connection_limits_times_the_factor() {
    let g = H2GuardConfig::default();
    let [streams, resets, control] = client_limits(&g, 2.0);
    // 100000/s burst 100 per connection → 200000/s burst 200 per client.
    assert_eq!(streams, Gcra::new(5_000, 200));
    // 50/s burst 100 → 100/s burst 200; 100/s burst 200 → 200/s burst 400.
    assert_eq!(resets, Gcra::new(10_000_000, 200));
    assert_eq!(control, Gcra::new(5_000_000, 400));
}

#[test]
fn connections_of_one_client_share_its_budget() {
    let e = engine();
    // Four connections of the same client: the burst (200 resets) is shared, not 4 × 200.
    let conns: Vec<_> = (0..4).map(|_| e.h2_client_budget(ip(1))).collect();
    let mut admitted = 0;
    for c in &conns {
        admitted += spend(c, Budget::Resets, T0, 60);
    }
    assert_eq!(admitted, 200);
    assert!(!conns[3].conforms(Budget::Resets, T0));
    // One more every 10 ms.
    assert!(conns[0].admit(Budget::Resets, T0 + 10_000_000));
    assert!(!conns[1].admit(Budget::Resets, T0 + 10_000_000));
    // Budgets are separate: streams and control frames are untouched.
    assert!(conns[2].conforms(Budget::Streams, T0) && conns[2].conforms(Budget::ControlFrames, T0));
    // Another client has its own.
    assert_eq!(
        spend(&e.h2_client_budget(ip(2)), Budget::Resets, T0, 1000),
        200
    );
}

#[test]
fn the_table_is_bounded_and_reuses_ways_whose_debt_is_paid() {
    let e = engine();
    // More clients than the table holds, each spending one reset: a way whose TATs are all in
    // the past is reused without an eviction, so clients 20 ms apart never evict anybody.
    let n = (SETS * WAYS) as u32 + 1000;
    for k in 0..n {
        let now = T0 + u64::from(k) * 20_000_000;
        assert!(e.h2_client_budget(ip(k)).admit(Budget::Resets, now));
    }
    assert_eq!(e.h2_budget_evictions(), 0);
    assert_eq!(e.h2_budgets.allocated_sets(), SETS);
    // All at once: every client still holds debt, so a full set evicts (counted), and the
    // table never grows.
    let e = engine();
    for k in 0..n {
        assert!(e.h2_client_budget(ip(k)).admit(Budget::Resets, T0));
    }
    assert!(
        e.h2_budget_evictions() >= 1000,
        "{}",
        e.h2_budget_evictions()
    );
    assert_eq!(e.h2_budgets.allocated_sets(), SETS);
}

#[test]
fn a_rapid_reset_boxes_at_the_first_violation_other_violations_count() {
    let e = engine();
    let deadline = e.record_h2_flood(ip(1), Violation::RapidReset, T0);
    // No policy: the default box of 600000 ms.
    assert_eq!(deadline, Some(T0 + 600 * S));
    assert_eq!(e.record_h2_flood(ip(2), Violation::ControlFrames, T0), None);
    assert_eq!(
        e.record_h2_flood(ip(2), Violation::StreamRate, T0 + S),
        None
    );
    assert_eq!(
        e.record_h2_flood(ip(2), Violation::ControlFrames, T0 + 2 * S),
        Some(T0 + 602 * S),
        "the third within 60 s (boxAfterViolations 3)"
    );
}
