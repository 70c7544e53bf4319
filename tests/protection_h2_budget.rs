//! The HTTP/2 guard's per-client budgets as the policy sets them (`http2.clientFactor`, the
//! per-connection limits), through the engine's public API.

use rampart::config::protection::policy_from_json;
use rampart::http2::{Budget, ClientBudget};
use rampart::protection::dynamic::DynamicBlocks;
use rampart::protection::Engine;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

const S: u64 = rampart::clock::NS_PER_SEC;
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
fn the_factor_and_the_limits_come_from_the_policy() {
    let e = engine();
    let p = policy_from_json(&serde_json::json!({
        "allowlist": ["10.0.0.9"],
        "http2": { "maxResetsPerSecond": 10, "clientFactor": 3 },
    }))
    .expect("valid");
    e.set_policy(Some(Arc::new(p)), T0);
    // 10/s burst 20 per connection → 30/s burst 60 per client.
    assert_eq!(
        spend(&e.h2_client_budget(ip(1)), Budget::Resets, T0, 1000),
        60
    );
    // An allowlisted client is never counted.
    assert_eq!(
        spend(&e.h2_client_budget(ip(9)), Budget::Resets, T0, 1000),
        1000
    );
}
