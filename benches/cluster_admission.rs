//! The cluster tier's cost at accept: one admission decision with `cluster` off (the engine
//! alone) and on (the engine, then the `clusterRateLimit` lease check the accept path makes,
//! `Cluster::admit`), on the same engine, keys and moment, in the same run (README: Running
//! several nodes; BENCHMARKS.md: Cluster tier).
//!
//! Redis is real: the bench starts a `redis-server` on a free loopback port (killed at the end)
//! and warms every client's lease through the cluster tier's own background refills (EVALSHA of
//! the GCRA script) before measuring, with a lease (10000 tokens) and a limit (1e9/s) that no
//! measured decision exhausts: what is measured is the warm path, a lease lookup and one token
//! taken. The clock is injected (the instant warming began, so no lease lapses meanwhile), and
//! once the leases are warm the cluster tier's background tasks are stopped, so neither their
//! work (health `PING`, the idle-lease purge, which reads the real clock) nor their CPU share
//! enters the figure: it is the accept path's own cost. `KEYS` clients, one thread. Without
//! `redis-server` on PATH the bench says so and exits.

use criterion::{criterion_group, criterion_main, Criterion};
use rampart::cluster::{Cluster, Node};
use rampart::config::error::Issues;
use rampart::config::protection::policy_from_json;
use rampart::protection::{DynamicBlocks, Engine, ProtectionPolicy};
use serde_json::json;
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

const KEYS: usize = 100_000;
const PORT: u16 = 443;

struct Quiet;

impl Node for Quiet {
    fn serves(&self, _: u16) -> bool {
        true
    }
    fn apply_box(&self, _: IpAddr, _: Option<u16>, _: u64, _: u64) {}
    fn apply_prefix_box(&self, _: ipnet::IpNet, _: Option<u16>, _: u64, _: u64) {}
    fn apply_block(
        &self,
        _: ipnet::IpNet,
        _: Option<u16>,
        _: Option<u64>,
        _: Option<String>,
        _: u64,
    ) {
    }
    fn apply_unblock(&self, _: ipnet::IpNet, _: Option<u16>) {}
    fn unavailable(&self, m: String) {
        eprintln!("cluster unavailable during the bench: {m}");
    }
}

struct Redis(Child);

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Fixture {
    keys: Vec<IpAddr>,
    engine: Engine,
    policy: Arc<ProtectionPolicy>,
    cluster: Arc<Cluster>,
    now: u64,
    _rt: tokio::runtime::Runtime,
    /// Taken (and so killed) when the bench ends: a static fixture is never dropped.
    redis: std::sync::Mutex<Option<Redis>>,
    _stop: CancellationToken,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let redis = Redis(
            Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server on PATH (apt-get install redis-server)"),
        );
        let mut issues = Issues::default();
        let cfg = rampart::config::cluster::parse_cluster(
            &json!({ "redis": { "url": format!("redis://127.0.0.1:{port}"), "keyPrefix": "bench:" },
                     "nodeId": "bench", "shareBans": false }),
            "cluster",
            &mut issues,
        )
        .expect("valid cluster config");
        let cluster = Cluster::new(cfg).expect("redis client");
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let stop = CancellationToken::new();
        {
            let _g = rt.enter();
            cluster.start(Arc::new(Quiet), stop.clone());
        }
        let policy = Arc::new(
            policy_from_json(&json!({
                "rateLimit": {"connectionsPerSecond": 1000, "burst": 1000},
                "sustained": {"connectionsPerMinute": 60000, "burst": 60000},
                "penaltyBox": {"durationMs": 600000},
                "maxConcurrentPerIp": 100,
                "maxTrackedIps": KEYS,
                "clusterRateLimit": {"connectionsPerSecond": 1e9, "burst": 1e9, "lease": 10000},
            }))
            .expect("valid policy"),
        );
        let keys: Vec<IpAddr> = (0..KEYS as u32)
            .map(|i| IpAddr::V4(Ipv4Addr::from(i.wrapping_mul(2_654_435_761) ^ 0x0a00_0000)))
            .collect();
        let now = rampart::clock::now_ns();
        let engine = Engine::new(PORT, Arc::new(DynamicBlocks::new()));
        engine.set_policy(Some(policy.clone()), now);
        // Warm: every client asks once (admitted on credit), the refill task leases its tokens.
        let t = Instant::now();
        loop {
            for &k in &keys {
                let _ = cluster.admit(Some(&policy), PORT, k, now);
            }
            std::thread::sleep(Duration::from_millis(200));
            let s = cluster.snapshot();
            if s.lease_refills >= KEYS as u64 {
                eprintln!(
                    "leases warm: {} refills for {KEYS} clients in {:.1} s",
                    s.lease_refills,
                    t.elapsed().as_secs_f64()
                );
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(120),
                "leases not warm after 120 s: {s:?}"
            );
        }
        stop.cancel();
        std::thread::sleep(Duration::from_millis(300));
        for &k in &keys {
            assert!(engine.admit(k, now).verdict.is_none());
        }
        Fixture {
            keys,
            engine,
            policy,
            cluster,
            now,
            _rt: rt,
            redis: std::sync::Mutex::new(Some(redis)),
            _stop: stop,
        }
    })
}

static CURSOR: AtomicUsize = AtomicUsize::new(0);

/// Cluster off: the engine's decision (its guard dropped at once).
fn off(f: &Fixture, i: usize) -> bool {
    let a = f.engine.admit(f.keys[i % KEYS], f.now);
    black_box(a.verdict.is_none())
}

/// Cluster on: the engine's decision, then the lease check, as the accept path makes them
/// (`listener::admit`: the policy in force read once, the lease prefetched, the engine's decision,
/// then `Cluster::admit`).
fn on(f: &Fixture, i: usize) -> bool {
    let ip = f.keys[i % KEYS];
    let policy = f.engine.policy_ref();
    f.cluster.prefetch(policy.get(), PORT, ip);
    let a = f.engine.admit(ip, f.now);
    let c = a.verdict.is_none() && f.cluster.admit(policy.get(), PORT, ip, f.now).is_none();
    black_box(c)
}

fn run(iters: u64, decide: fn(&Fixture, usize) -> bool) -> Duration {
    let f = fixture();
    let start_at = CURSOR.fetch_add(iters as usize, Ordering::Relaxed);
    let t = Instant::now();
    for i in 0..iters as usize {
        assert!(decide(f, start_at + i), "a warm client was refused");
    }
    t.elapsed()
}

fn cluster_admission(c: &mut Criterion) {
    if Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_err()
    {
        eprintln!("skipped: redis-server not found on PATH (apt-get install redis-server)");
        return;
    }
    let f = fixture();
    let _ = &f.policy;
    let mut g = c.benchmark_group("admission_cluster_100k_ips");
    g.bench_function("cluster off", |b| b.iter_custom(|iters| run(iters, off)));
    g.bench_function("cluster on (leases warm)", |b| {
        b.iter_custom(|iters| run(iters, on))
    });
    g.finish();
    report();
    if let Ok(mut redis) = f.redis.lock() {
        drop(redis.take()); // kills it
    }
}

/// Paired rounds (off then on, same keys, same moment) so machine noise hits both; prints the
/// median per-decision times and the median of the per-round ratios.
fn report() {
    const ROUNDS: usize = 9;
    const N: u64 = 500_000;
    let (mut a, mut b, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let x = run(N, off).as_nanos() as f64 / N as f64;
        let y = run(N, on).as_nanos() as f64 / N as f64;
        a.push(x);
        b.push(y);
        ratio.push(y / x);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "\nadmission at {KEYS} IPs, 1 thread, {ROUNDS} paired rounds: cluster off {:.1} ns, on {:.1} ns per decision; ratio on/off = {:.3} (load average {})",
        median(&mut a),
        median(&mut b),
        median(&mut ratio),
        load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
    );
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    targets = cluster_admission
}
criterion_main!(benches);
