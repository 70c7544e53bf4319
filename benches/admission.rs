//! One admission decision at 1M tracked IPs, on 1 and 2 threads, against the `governor` crate's
//! keyed limiter (one GCRA limit, dashmap store) on the same key distribution, in the same run.
//!
//! Rampart's decision checks two GCRA limits (`rateLimit`, `sustained`), the penalty box and
//! `maxConcurrentPerIp` (taking and dropping the per-IP guard); governor's checks one limit.
//! Both get an injected clock (no clock read in the loop). Times are per decision; on 2 threads
//! each thread makes the decisions, so the figure is the per-thread latency under sharing.
//! Memory: RSS delta (`/proc/self/statm`) / 1M keys after filling each structure.
#![allow(missing_docs)] // criterion_main! generates an undocumented `main`
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use criterion::{criterion_group, criterion_main, Criterion};
use governor::clock::FakeRelativeClock;
use governor::{Quota, RateLimiter};
use rampart::config::protection::policy_from_json;
use rampart::protection::{DynamicBlocks, Engine};
use serde_json::json;
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

const KEYS: usize = 1_000_000;
const T0: u64 = 1_000_000_000_000;

type Governor = RateLimiter<
    IpAddr,
    governor::state::keyed::DefaultKeyedStateStore<IpAddr>,
    FakeRelativeClock,
    governor::middleware::NoOpMiddleware<<FakeRelativeClock as governor::clock::Clock>::Instant>,
>;

struct Fixture {
    keys: Vec<IpAddr>,
    engine: Engine,
    governor: Governor,
    engine_bytes: f64,
    engine_heap: f64,
    governor_bytes: f64,
}

fn rss() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: usize = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn splitmix(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        // 1M distinct addresses spread over the IPv4 space, visited in a random order.
        let mut seed = 42u64;
        let mut keys: Vec<IpAddr> = (0..KEYS as u32)
            .map(|i| IpAddr::V4(Ipv4Addr::from(i.wrapping_mul(2_654_435_761) ^ 0x0a00_0000)))
            .collect();
        for i in (1..keys.len()).rev() {
            let j = (splitmix(&mut seed) % (i as u64 + 1)) as usize;
            keys.swap(i, j);
        }
        let policy = policy_from_json(&json!({
            "rateLimit": {"connectionsPerSecond": 1000, "burst": 1000},
            "sustained": {"connectionsPerMinute": 60000, "burst": 60000},
            "penaltyBox": {"durationMs": 600000},
            "maxConcurrentPerIp": 100,
            "maxTrackedIps": KEYS,
        }))
        .expect("valid policy");
        let before = rss();
        let engine = Engine::new(443, Arc::new(DynamicBlocks::new()));
        engine.set_policy(Some(Arc::new(policy)), T0);
        for &k in &keys {
            assert!(engine.admit(k, T0).verdict.is_none());
        }
        assert_eq!(engine.tracked_ips(), KEYS);
        let engine_bytes = (rss() - before) as f64 / KEYS as f64;
        let engine_heap = engine.table_memory_bytes() as f64 / KEYS as f64;

        let before = rss();
        let quota = Quota::per_second(NonZeroU32::new(1000).unwrap())
            .allow_burst(NonZeroU32::new(1000).unwrap());
        let governor = RateLimiter::dashmap_with_clock(quota, FakeRelativeClock::default());
        for k in &keys {
            assert!(governor.check_key(k).is_ok());
        }
        let governor_bytes = (rss() - before) as f64 / KEYS as f64;
        Fixture {
            keys,
            engine,
            governor,
            engine_bytes,
            engine_heap,
            governor_bytes,
        }
    })
}

static CURSOR: AtomicUsize = AtomicUsize::new(0);

fn rampart_decision(f: &Fixture, i: usize) -> bool {
    let a = f.engine.admit(f.keys[i % KEYS], T0 + 1_000_000_000);
    black_box(a.verdict.is_none())
}

fn governor_decision(f: &Fixture, i: usize) -> bool {
    black_box(f.governor.check_key(&f.keys[i % KEYS]).is_ok())
}

fn run(threads: usize, iters: u64, decide: fn(&Fixture, usize) -> bool) -> Duration {
    let f = fixture();
    let start_at = CURSOR.fetch_add(iters as usize * threads, Ordering::Relaxed);
    if threads == 1 {
        let t = Instant::now();
        for i in 0..iters as usize {
            decide(f, start_at + i);
        }
        return t.elapsed();
    }
    let barrier = std::sync::Barrier::new(threads + 1);
    std::thread::scope(|s| {
        for t in 0..threads {
            let barrier = &barrier;
            s.spawn(move || {
                barrier.wait();
                let base = start_at + t * KEYS / threads;
                for i in 0..iters as usize {
                    decide(f, base + i);
                }
                barrier.wait();
            });
        }
        barrier.wait();
        let t = Instant::now();
        barrier.wait();
        t.elapsed()
    })
}

fn admission(c: &mut Criterion) {
    fixture();
    let mut g = c.benchmark_group("admission_1M_ips");
    for threads in [1usize, 2] {
        let (rname, gname): (&'static str, &'static str) = if threads == 1 {
            ("rampart/1 thread", "governor/1 thread")
        } else {
            ("rampart/2 threads", "governor/2 threads")
        };
        g.bench_function(rname, |b| {
            b.iter_custom(|iters| run(threads, iters, rampart_decision))
        });
        g.bench_function(gname, |b| {
            b.iter_custom(|iters| run(threads, iters, governor_decision))
        });
    }
    g.finish();
    report();
}

/// Paired rounds (rampart then governor, same keys, same moment) so machine noise hits both;
/// prints the median per-decision times and the median of the per-round ratios.
fn report() {
    let f = fixture();
    const ROUNDS: usize = 9;
    const N: u64 = 500_000;
    println!();
    for threads in [1usize, 2] {
        let mut r = Vec::new();
        let mut g = Vec::new();
        let mut ratio = Vec::new();
        for _ in 0..ROUNDS {
            let a = run(threads, N, rampart_decision).as_nanos() as f64 / N as f64;
            let b = run(threads, N, governor_decision).as_nanos() as f64 / N as f64;
            r.push(a);
            g.push(b);
            ratio.push(a / b);
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        println!(
            "admission at 1M IPs, {threads} thread(s), {ROUNDS} paired rounds: rampart {:.1} ns, governor {:.1} ns per decision; ratio rampart/governor = {:.2}",
            median(&mut r),
            median(&mut g),
            median(&mut ratio)
        );
    }
    println!(
        "memory per tracked IP: rampart {:.1} B (RSS delta; table heap {:.1} B), governor {:.1} B (RSS delta)",
        f.engine_bytes, f.engine_heap, f.governor_bytes
    );
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    targets = admission
}
criterion_main!(benches);
