//! The cluster tier's cost at accept: one admission decision as the accept path makes it
//! (`listener::admit`: `Engine::admit_clustered` with the breaker's flag, then a refill request
//! only when the lease asks for one), all three sides through that one function, on the same keys
//! and moment, in the same run (README: Running several nodes; BENCHMARKS.md: Cluster tier):
//! - "cluster on": the breaker read, then the engine's decision taking the client's
//!   `clusterRateLimit` lease token in the same critical section;
//! - "cluster off": the same engine with the flag false (no cluster tier, or its breaker open);
//! - "no clusterRateLimit": an engine of the same policy without the cluster limit, tracking the
//!   same clients — a listener that never had the feature (its table keeps 48-byte slots, where
//!   the clustered one keeps 64-byte slots of entry and lease, on which "off" also decides).
//!
//! Redis is real: the bench starts a `redis-server` on a free loopback port (killed at the end)
//! and warms every client's lease through the cluster tier's own background refills (EVALSHA of
//! the GCRA script) before measuring, with a lease (10000 tokens) and a limit (1e9/s) that no
//! measured decision exhausts: what is measured is the warm path, one token taken from the lease
//! kept in the client's entry's slot. The clock is injected (the instant warming began, so no lease
//! lapses meanwhile), and once the leases are warm the cluster tier's background tasks are
//! stopped, so neither their work (the health `PING`) nor their CPU share enters the figure: it
//! is the accept path's own cost. `KEYS` clients, one thread. Without
//! `redis-server` on PATH the bench says so and exits.
#![allow(missing_docs)] // criterion_main! generates an undocumented `main`

use criterion::{criterion_group, criterion_main, Criterion};
use rampart::cluster::{Cluster, Node};
use rampart::config::error::Issues;
use rampart::config::protection::policy_from_json;
use rampart::config::proxy::ListenerId;
use rampart::protection::{DynamicBlocks, Engine, IpKey, LeaseUpdate};
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

/// The bench's node: bans go nowhere, lease updates to the one engine.
struct Quiet(Arc<Engine>);

impl Node for Quiet {
    fn serves(&self, _: u16) -> bool {
        true
    }
    fn apply_box(&self, _: IpAddr, _: Option<u16>, _: u64, _: u64, _: &Arc<str>) {}
    fn apply_prefix_box(&self, _: ipnet::IpNet, _: Option<u16>, _: u64, _: u64, _: &Arc<str>) {}
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
    fn rejected(&self, m: String) {
        eprintln!("cluster message rejected during the bench: {m}");
    }
    fn apply_blocks(&self, _: Vec<rampart::config::update::BlockRequest>, _: u64) {}
    fn update_lease(&self, _: ListenerId, key: IpKey, u: LeaseUpdate) -> u64 {
        self.0.update_lease(key, u)
    }
    fn lease_clients(&self) -> u64 {
        self.0.lease_clients() as u64
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
    engine: Arc<Engine>,
    /// The same policy without `clusterRateLimit` (a listener without the cluster limit: its
    /// table keeps 48-byte entry-only slots), the same clients tracked.
    plain: Arc<Engine>,
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
        let local = json!({
            "rateLimit": {"connectionsPerSecond": 1000, "burst": 1000},
            "sustained": {"connectionsPerMinute": 60000, "burst": 60000},
            "penaltyBox": {"durationMs": 600000},
            "maxConcurrentPerIp": 100,
            "maxTrackedIps": KEYS,
        });
        let mut clustered = local.clone();
        clustered["clusterRateLimit"] =
            json!({"connectionsPerSecond": 1e9, "burst": 1e9, "lease": 10000});
        let policy = Arc::new(policy_from_json(&clustered).expect("valid policy"));
        let keys: Vec<IpAddr> = (0..KEYS as u32)
            .map(|i| IpAddr::V4(Ipv4Addr::from(i.wrapping_mul(2_654_435_761) ^ 0x0a00_0000)))
            .collect();
        let now = rampart::clock::now_ns();
        let engine = Arc::new(Engine::new(PORT, Arc::new(DynamicBlocks::new())));
        engine.set_policy(Some(policy), now);
        let plain = Arc::new(Engine::new(PORT, Arc::new(DynamicBlocks::new())));
        let policy = policy_from_json(&local).expect("valid policy");
        plain.set_policy(Some(Arc::new(policy)), now);
        let stop = CancellationToken::new();
        {
            let _g = rt.enter();
            cluster.start(Arc::new(Quiet(engine.clone())), stop.clone());
        }
        // Warm: every client asks once (admitted on credit), the refill task leases its tokens.
        let t = Instant::now();
        loop {
            for &k in &keys {
                let _ = decide(&engine, Some(&cluster), k, now);
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
        assert_eq!(engine.lease_clients(), KEYS, "every client holds a lease");
        for &k in &keys {
            assert!(plain.admit(k, now).verdict.is_none());
        }
        Fixture {
            keys,
            engine,
            plain,
            cluster,
            now,
            _rt: rt,
            redis: std::sync::Mutex::new(Some(redis)),
            _stop: stop,
        }
    })
}

static CURSOR: AtomicUsize = AtomicUsize::new(0);

/// Cluster off: the accept path's own code (`listener::admit`) with the cluster tier absent or
/// its breaker open — the same instantiation of `Engine::admit_clustered` as "on", with the flag
/// false (its guard dropped at once).
fn off(f: &Fixture, i: usize) -> bool {
    black_box(decide(&f.engine, None, f.keys[i % KEYS], f.now))
}

/// No cluster limit at all: the engine of the same policy without `clusterRateLimit`, through the
/// same code with no cluster tier.
fn plain(f: &Fixture, i: usize) -> bool {
    black_box(decide(&f.plain, None, f.keys[i % KEYS], f.now))
}

/// As the accept path decides (`listener::admit`): with a cluster tier, the breaker read, the
/// engine's decision with the lease token, a refill request queued if the lease asks for one.
/// Every side of the bench runs this one function.
#[inline(never)]
fn decide(engine: &Engine, cluster: Option<&Cluster>, ip: IpAddr, now: u64) -> bool {
    let a = engine.admit_clustered(ip, || now, cluster.is_some_and(|c| c.leases_on()));
    if let Some(c) = cluster.filter(|_| a.refill) {
        c.refill_lease(engine, ListenerId(0), ip);
    }
    a.verdict.is_none()
}

/// Cluster on (its guard dropped at once).
fn on(f: &Fixture, i: usize) -> bool {
    black_box(decide(&f.engine, Some(&f.cluster), f.keys[i % KEYS], f.now))
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
    let mut g = c.benchmark_group("admission_cluster_100k_ips");
    g.bench_function("cluster off", |b| b.iter_custom(|iters| run(iters, off)));
    g.bench_function("no clusterRateLimit", |b| {
        b.iter_custom(|iters| run(iters, plain))
    });
    g.bench_function("cluster on (leases warm)", |b| {
        b.iter_custom(|iters| run(iters, on))
    });
    g.finish();
    report();
    if let Ok(mut redis) = f.redis.lock() {
        drop(redis.take()); // kills it
    }
}

/// Paired rounds (off, on and the plain engine back to back, same keys, same moment, the order
/// rotating so none always runs first or last) so machine noise hits all three; prints the median
/// per-decision times and the medians of the per-round ratios.
fn report() {
    const ROUNDS: usize = 21;
    const N: u64 = 300_000;
    let sides: [fn(&Fixture, usize) -> bool; 3] = [off, on, plain];
    let mut ns: [Vec<f64>; 3] = Default::default();
    let (mut on_off, mut on_plain) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let mut t = [0.0; 3];
        for k in 0..3 {
            let side = (round + k) % 3;
            t[side] = run(N, sides[side]).as_nanos() as f64 / N as f64;
        }
        for (v, x) in ns.iter_mut().zip(t) {
            v.push(x);
        }
        on_off.push(t[1] / t[0]);
        on_plain.push(t[1] / t[2]);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let [mut a, mut b, mut c] = ns;
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "\nadmission at {KEYS} IPs, 1 thread, {ROUNDS} paired rounds: cluster off {:.1} ns, on {:.1} ns, no clusterRateLimit {:.1} ns per decision; ratio on/off = {:.3}, on/no clusterRateLimit = {:.3} (load average {})",
        median(&mut a),
        median(&mut b),
        median(&mut c),
        median(&mut on_off),
        median(&mut on_plain),
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
