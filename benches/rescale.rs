//! What carrying rate-limit usage over a policy swap costs, lazily (today: one pointer store; each
//! entry is rescaled on its next decision or eviction pass) versus eagerly (every entry rescaled
//! at the swap). The eager cost is measured as one eviction pass over every slot right after a
//! swap that changed the interval: that pass rescales each entry it passes, under the same shard
//! locks an eager swap would take, and a second pass (nothing left to rescale) gives the walk's
//! own cost.
//!
//! `cargo bench --bench rescale` prints: lazy `set_policy`, the eager pass, per-entry cost, the
//! lock hold per 64-entry batch and per shard (256 shards).

use rampart::config::protection::policy_from_json;
use rampart::protection::{DynamicBlocks, Engine};
use serde_json::json;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Instant;

const MS: u64 = rampart::clock::NS_PER_MS;
const T0: u64 = 1_000_000 * MS;

fn main() {
    let n: u32 = std::env::args()
        .skip_while(|a| a != "--entries")
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let policy = |rate: u32| {
        Arc::new(
            policy_from_json(&json!({
                "rateLimit": {"connectionsPerSecond": rate, "burst": 10},
                "maxTrackedIps": 2 * n
            }))
            .expect("valid policy"),
        )
    };
    let e = Engine::new(443, Arc::new(DynamicBlocks::new()));
    e.set_policy(Some(policy(10)), T0);
    for i in 0..n {
        drop(e.admit(IpAddr::V4(Ipv4Addr::from(0x0b00_0000 + i)), T0));
    }
    assert_eq!(e.tracked_ips(), n as usize);
    let slots = e.table_memory_bytes() / 49;

    let t = Instant::now();
    e.set_policy(Some(policy(20)), T0 + MS);
    let lazy = t.elapsed();
    let t = Instant::now();
    e.evict_tick(T0 + 2 * MS, slots);
    let eager = t.elapsed();
    let t = Instant::now();
    e.evict_tick(T0 + 3 * MS, slots);
    let walk = t.elapsed();
    assert_eq!(e.tracked_ips(), n as usize);

    let per_entry = eager.as_nanos() as f64 / f64::from(n);
    println!("entries: {n} ({slots} slots)");
    println!("lazy swap (set_policy, one pointer store): {lazy:?}");
    println!("eager pass (rescale every entry): {eager:?} = {per_entry:.1} ns/entry");
    println!("walk only (second pass, nothing to rescale): {walk:?}");
    println!(
        "lock hold: {:.1} us per 64-entry batch, {:.1} us per shard",
        per_entry * 64.0 / 1000.0,
        per_entry * f64::from(n) / 256.0 / 1000.0
    );
}
