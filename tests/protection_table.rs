//! The per-IP table through the engine: lazy projection, eviction invariants, the cap and its
//! priority, and a 2M-address flood.

mod common;
use common::engine::*;
use rampart::config::protection::policy_from_json;
use rampart::protection::{BlockReason, Engine};
use serde_json::json;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

fn reason(e: &Engine, ip: IpAddr, now: u64) -> Option<BlockReason> {
    e.admit(ip, now).verdict.map(|v| v.reason)
}

#[test]
fn a_pause_before_eviction_cannot_reset_a_limit() {
    let e = engine(json!({"rateLimit": {"connectionsPerSecond": 1, "burst": 1}}));
    let a = v4(0x0a00_0001);
    assert_eq!(reason(&e, a, T0), None);
    assert_eq!(e.evict_tick(T0 + 500 * MS, 1_000_000), 0);
    assert_eq!(reason(&e, a, T0 + 500 * MS), Some(BlockReason::RateLimited));
    assert_eq!(e.evict_tick(T0 + S - 1, 1_000_000), 0);
    // Projected to a fresh client at TAT: evicting it changes nothing.
    assert_eq!(e.evict_tick(T0 + S, 1_000_000), 1);
    assert_eq!(e.tracked_ips(), 0);
    assert_eq!(reason(&e, a, T0 + S), None);
}

#[test]
fn sustained_state_and_boxes_keep_entries() {
    let e = engine(json!({
        "sustained": {"connectionsPerMinute": 1, "burst": 1},
        "penaltyBox": {"durationMs": 120_000},
    }));
    let a = v4(0x0a00_0002);
    let b = v4(0x0a00_0003);
    assert_eq!(reason(&e, a, T0), None);
    assert_eq!(reason(&e, b, T0), None);
    assert_eq!(reason(&e, b, T0), Some(BlockReason::RateLimited));
    assert_eq!(e.evict_tick(T0 + 59 * S, 1_000_000), 0);
    assert_eq!(e.evict_tick(T0 + 60 * S, 1_000_000), 1); // a: sustained TAT reached
    assert!(!e.is_tracked(a) && e.is_tracked(b));
    assert_eq!(e.evict_tick(T0 + 120 * S - 1, 1_000_000), 0); // b: still boxed
    assert_eq!(e.evict_tick(T0 + 120 * S, 1_000_000), 1);
}

#[test]
fn entries_with_connections_or_handshakes_are_never_evicted() {
    let e = engine(json!({"maxConcurrentPerIp": 2, "maxTrackedIps": 1}));
    let a = v4(0x0a00_0004);
    let conn = e.admit(a, T0);
    assert!(conn.guard.is_some());
    assert_eq!(e.evict_tick(T0 + 3_600 * S, 1_000_000), 0);
    // At the cap with only a connected entry: the newcomer is admitted untracked.
    let b = e.admit(v4(0x0a00_0005), T0);
    assert!(b.verdict.is_none() && b.guard.is_none());
    assert_eq!(e.untracked_admissions(), 1);
    assert_eq!(e.tracked_ips(), 1);
    assert_eq!(e.counts(a), (1, 0));
    drop(conn);
    let pending = e.pending_handshake(a, T0).unwrap();
    assert_eq!(e.evict_tick(T0 + 3_600 * S, 1_000_000), 0);
    drop(pending);
    assert_eq!(e.evict_tick(T0 + 3_600 * S, 1_000_000), 1);
}

#[test]
fn the_cap_evicts_idle_then_limited_then_boxed() {
    // Each engine hashes with its own random seeds: 5,000 of them put the four clients in every
    // arrangement of shards (the same shard, neighbours, far apart) many times over.
    for _ in 0..5_000 {
        cap_priority_once();
    }
}

fn cap_priority_once() {
    let e = engine(json!({
        "rateLimit": {"connectionsPerSecond": 1, "burst": 10},
        "penaltyBox": {"durationMs": 60_000},
        "maxTrackedIps": 3,
    }));
    let (boxed, limited, idle) = (v4(0x0a00_0010), v4(0x0a00_0011), v4(0x0a00_0012));
    for _ in 0..10 {
        assert_eq!(reason(&e, boxed, T0), None);
    }
    assert_eq!(reason(&e, boxed, T0), Some(BlockReason::RateLimited));
    for _ in 0..5 {
        assert_eq!(reason(&e, limited, T0), None); // TAT = T0 + 5 s
    }
    assert_eq!(reason(&e, idle, T0), None); // TAT = T0 + 1 s: idle from then on
    let t = T0 + 2 * S;
    let d = v4(0x0a00_0013);
    assert_eq!(reason(&e, d, t), None);
    assert!(!e.is_tracked(idle) && e.is_tracked(limited) && e.is_tracked(boxed));
    // d (TAT t + 1 s) is closer to idle than `limited` (T0 + 5 s): it goes first.
    let f = v4(0x0a00_0014);
    assert_eq!(reason(&e, f, t), None);
    assert!(!e.is_tracked(d) && e.is_tracked(limited) && e.is_tracked(boxed));
    // With `limited` connected, newcomers replace each other; the boxed client stays.
    let held = e.admit(limited, t);
    assert!(held.guard.is_some());
    for i in 0..50 {
        assert_eq!(reason(&e, v4(0x0b00_0000 + i), t), None);
        assert_eq!(e.tracked_ips(), 3);
        assert!(e.is_tracked(boxed) && e.is_tracked(limited));
    }
    // Only the boxed client left to give up: it goes, last.
    let g1 = e.admit(v4(0x0c00_0001), t);
    let g2 = e.admit(v4(0x0c00_0002), t);
    assert!(g1.guard.is_some() && g2.guard.is_some());
    assert!(!e.is_tracked(boxed));
    assert_eq!(e.tracked_ips(), 3);
    assert!(e.admit(v4(0x0c00_0003), t).guard.is_none());
}

#[test]
fn lowering_the_cap_evicts_down_to_it() {
    let e = engine(json!({"rateLimit": {"connectionsPerSecond": 1, "burst": 1}}));
    for i in 0..5_000 {
        assert_eq!(reason(&e, v4(0x0d00_0000 + i), T0), None);
    }
    e.set_policy(
        Some(Arc::new(
            policy_from_json(&json!({
                "rateLimit": {"connectionsPerSecond": 1, "burst": 1},
                "maxTrackedIps": 1000
            }))
            .unwrap(),
        )),
        T0,
    );
    while e.tracked_ips() > 1000 {
        e.evict_tick(T0, 10_000);
    }
    assert_eq!(e.tracked_ips(), 1000);
    // Ticks do not evict limited entries below the cap.
    assert_eq!(e.evict_tick(T0, 100_000), 0);
}

#[test]
fn ipv6_prefixes_take_one_entry_each() {
    let e = engine(json!({}));
    for i in 0..100u128 {
        let ip = IpAddr::V6((0x2001_0db8_0000_0001_0000_0000_0000_0000u128 | i).into());
        assert!(e.admit(ip, T0).admitted());
    }
    assert_eq!(e.tracked_ips(), 1);
}

/// 2,000,000 distinct addresses against a 1,000,000 cap: the table stays at the cap, boxed
/// clients are kept over the flood, and the memory per entry is printed.
#[test]
fn flood_of_two_million_addresses() {
    let cap = 1_000_000usize;
    let flood = 2_000_000u32;
    let started = Instant::now();
    let rss0 = rss_bytes();
    let e = engine(json!({
        "rateLimit": {"connectionsPerSecond": 10, "burst": 10},
        "penaltyBox": {"durationMs": 600_000},
        "maxTrackedIps": cap,
    }));
    let boxed: Vec<IpAddr> = (0..1_000).map(|i| v4(0x0a00_0000 + i)).collect();
    for &ip in &boxed {
        for _ in 0..10 {
            assert_eq!(reason(&e, ip, T0), None);
        }
        assert_eq!(reason(&e, ip, T0), Some(BlockReason::RateLimited));
    }
    // One connection per address, 1 µs apart (2 s in all): each address is limited for 100 ms,
    // then idle.
    let end = common::engine::flood(&e, flood, |i| v4(0x6440_0000 + i));
    assert_eq!(e.tracked_ips(), cap);
    for &ip in &boxed {
        assert_eq!(reason(&e, ip, end), Some(BlockReason::PenaltyBoxed));
    }
    assert_eq!(e.blocked(end).penalty_boxed.len(), boxed.len());
    let heap = e.table_memory_bytes();
    let rss = rss_bytes().zip(rss0).map(|(a, b)| a.saturating_sub(b));
    println!(
        "flood: {flood} addresses, cap {cap}: tracked {}, boxed kept {}/{}, table heap {} bytes = {:.1} B/entry, RSS delta {} = {} B/entry, {:.1?}",
        e.tracked_ips(),
        boxed.len(),
        boxed.len(),
        heap,
        heap as f64 / cap as f64,
        rss.map_or("n/a".into(), |r| r.to_string()),
        rss.map_or("n/a".into(), |r| format!("{:.1}", r as f64 / cap as f64)),
        started.elapsed()
    );
    assert!(heap / cap <= 96);
}

/// Memory per tracked IP at 1,000,000 clients (DESIGN §5: ≤ 96 B): RSS delta and table heap
/// after filling one engine with 1M distinct IPv4 clients, as `benches/admission.rs` does.
#[test]
fn memory_per_tracked_ip_at_one_million() {
    const KEYS: u32 = 1_000_000;
    let rss0 = rss_bytes();
    let e = engine(json!({
        "rateLimit": {"connectionsPerSecond": 1000, "burst": 1000},
        "sustained": {"connectionsPerMinute": 60000, "burst": 60000},
        "penaltyBox": {"durationMs": 600000},
        "maxConcurrentPerIp": 100,
        "maxTrackedIps": KEYS,
    }));
    for i in 0..KEYS {
        let ip = v4(i.wrapping_mul(2_654_435_761) ^ 0x0a00_0000);
        assert!(e.admit(ip, T0).verdict.is_none());
    }
    assert_eq!(e.tracked_ips(), KEYS as usize);
    let heap = e.table_memory_bytes() as f64 / f64::from(KEYS);
    let rss = rss_bytes()
        .zip(rss0)
        .map(|(a, b)| a.saturating_sub(b) as f64 / f64::from(KEYS));
    println!(
        "memory at 1M tracked IPs: table heap {heap:.1} B/IP, RSS delta {} B/IP",
        rss.map_or("n/a".into(), |r| format!("{r:.1}"))
    );
    // RSS is process-wide and the tests of this file run in parallel: printed, not asserted.
    assert!(heap <= 96.0, "table heap {heap:.1} B per tracked IP");
}
