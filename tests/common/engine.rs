//! Shared fixtures for the protection-engine integration tests: time constants (injected
//! CLOCK_MONOTONIC ns) and an engine built from a JSON `ProtectionConfig`.

#![allow(dead_code)]

use rampart::config::protection::policy_from_json;
use rampart::protection::{DynamicBlocks, Engine, ProtectionPolicy};
use serde_json::Value;
use std::sync::Arc;

/// One millisecond in ns.
pub(crate) const MS: u64 = rampart::clock::NS_PER_MS;
/// One second in ns.
pub(crate) const S: u64 = rampart::clock::NS_PER_SEC;
/// A start time far from 0, as CLOCK_MONOTONIC would be.
pub(crate) const T0: u64 = 1_000 * S;

/// A compiled policy from JSON; panics on an invalid one.
pub(crate) fn policy(v: Value) -> Arc<ProtectionPolicy> {
    Arc::new(policy_from_json(&v).expect("valid policy"))
}

/// An engine for port 443 with policy `v` set at `T0`.
pub(crate) fn engine(v: Value) -> Engine {
    let e = Engine::new(443, Arc::new(DynamicBlocks::new()));
    e.set_policy(Some(policy(v)), T0);
    e
}

/// The IPv4 address with integer value `i`.
pub(crate) fn v4(i: u32) -> std::net::IpAddr {
    std::net::IpAddr::V4(std::net::Ipv4Addr::from(i))
}

/// This process's resident set size (bytes), from `/proc/self/statm`.
pub(crate) fn rss_bytes() -> Option<usize> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: usize = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// An IP-diverse flood: one connection from each of `addr(0)`, …, `addr(n − 1)`, 1 µs apart
/// from `T0` (each asserted admitted and its guard dropped at once), with an eviction tick of
/// 10,000 slots every 65,536 connections, as the engine's background task would. Returns the
/// time after the last one (ns).
pub(crate) fn flood(e: &Engine, n: u32, addr: impl Fn(u32) -> std::net::IpAddr) -> u64 {
    for i in 0..n {
        let now = T0 + u64::from(i) * 1_000;
        let a = e.admit(addr(i), now);
        assert!(a.verdict.is_none(), "flood address {i}");
        if i % 65_536 == 0 {
            e.evict_tick(now, 10_000);
        }
    }
    T0 + u64::from(n) * 1_000
}
