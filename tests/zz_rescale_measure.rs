mod common;
use common::engine::*;
use serde_json::json;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Instant;

#[test]
fn measure() {
    let e = engine(
        json!({"rateLimit": {"connectionsPerSecond": 10, "burst": 10}, "maxTrackedIps": 2000000}),
    );
    let n = 1_000_000u32;
    for i in 0..n {
        let ip = IpAddr::V4(Ipv4Addr::from(0x0b00_0000 + i));
        drop(e.admit(ip, T0));
    }
    assert_eq!(e.tracked_ips(), n as usize);
    let t = Instant::now();
    e.set_policy(Some(policy(json!({"rateLimit": {"connectionsPerSecond": 20, "burst": 10}, "maxTrackedIps": 2000000}))), T0 + MS);
    let lazy = t.elapsed();
    let t = Instant::now();
    let slots = e.table_memory_bytes() / 49;
    let examined = e.evict_tick(T0 + 2 * MS, slots);
    let eager = t.elapsed();
    assert_eq!(e.tracked_ips(), n as usize);
    eprintln!("MEASURE slots {slots}");
    eprintln!("MEASURE lazy set_policy {:?}; eager pass over {} entries (examined/removed {}) {:?} = {:.1} ns/entry; per 64-entry lock hold ~{:.1} us", lazy, n, examined, eager, eager.as_nanos() as f64 / n as f64, eager.as_nanos() as f64 / n as f64 * 64.0 / 1000.0);
    // second pass: already normalized
    let t = Instant::now();
    e.evict_tick(T0 + 3 * MS, slots);
    eprintln!("MEASURE second pass (no rescale) {:?}", t.elapsed());
}
