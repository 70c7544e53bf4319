//! Shared fixtures for the protection-engine integration tests: time constants (injected
//! CLOCK_MONOTONIC ns) and an engine built from a JSON `ProtectionConfig`.

#![allow(dead_code)]

use rampart::config::protection::policy_from_json;
use rampart::protection::{DynamicBlocks, Engine, ProtectionPolicy};
use serde_json::Value;
use std::sync::Arc;

/// One millisecond in ns.
pub const MS: u64 = 1_000_000;
/// One second in ns.
pub const S: u64 = 1_000_000_000;
/// A start time far from 0, as CLOCK_MONOTONIC would be.
pub const T0: u64 = 1_000 * S;

/// A compiled policy from JSON; panics on an invalid one.
pub fn policy(v: Value) -> Arc<ProtectionPolicy> {
    Arc::new(policy_from_json(&v).expect("valid policy"))
}

/// An engine for port 443 with policy `v` set at `T0`.
pub fn engine(v: Value) -> Engine {
    let e = Engine::new(443, Arc::new(DynamicBlocks::new()));
    e.set_policy(Some(policy(v)), T0);
    e
}
