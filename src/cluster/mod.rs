//! The cluster tier on Redis (ProxyConfig `cluster`, README: Running several nodes): bans that
//! reach every node, the per-client `clusterRateLimit` shared by all nodes, and a circuit
//! breaker that falls back to local limits.
//!
//! Client: the `redis` crate (tokio, [`redis::aio::ConnectionManager`] for commands, a dedicated
//! pub/sub connection for the ban channel). It is the most used Rust client, maintained by the
//! redis-rs organisation; its connection manager reconnects by itself, multiplexes concurrent
//! commands on one socket (so refills pipeline without a pool) and `Script` does EVALSHA with a
//! fallback to loading the script. `fred` would also fit; it brings its own reconnection and
//! pooling policy, which we would have to mirror in the breaker.
//!
//! Nothing here is on the accept path except non-blocking calls: [`Cluster::boxed`] (the
//! engine's box listener: a `try_send`), [`Cluster::leases_on`] (one atomic load) and
//! [`Cluster::refill_lease`] (a `try_send`, once per lease). `clusterRateLimit`'s leases live in the engines'
//! tables, beside each client's entry, and are decided there ([`crate::protection::lease`]). The
//! rest runs as tasks on the proxy's tokio runtime:
//! - **writer**: local bans (boxes, `blockIp`, `unblockIp`, the kernel's own bans found by
//!   [`Cluster::kernel_scan`], see [`kernel`]) → `SET key value PX ttl` + `PUBLISH`,
//!   batched in one pipeline; what cannot be written (breaker open, Redis down) is kept, bounded,
//!   and replayed when Redis is back (bans made during an outage are reconciled, not lost);
//! - **subscriber**: the ban channel; every message is checked as local input is
//!   ([`BanMessage::check`]; what fails is counted in `rejectedMessages` and reported at most
//!   once a second as `cluster_message_rejected`), and one from another node is applied to the
//!   engines (and through them to XDP). A node never republishes what it received: remote bans are
//!   applied with the box listener muted on that thread, and messages carry their origin
//!   `nodeId`; a node ignores its own;
//! - **reconcile**: on every (re)subscription and at the end of every outage: replay, then `SCAN`
//!   every ban key and apply the live ones with their `PTTL`, checked as messages are, in O(keys)
//!   ([`Cluster::load`]);
//! - **refill**: lease refills, each one EVALSHA of [`GCRA_SCRIPT`], sent concurrently, the
//!   answers written back through [`Node::update_lease`];
//! - **health**: a `PING` every [`HEALTH_MS`] so an outage is seen (and its end) without traffic;
//!   refreshes the TTL of this node's bans that have none ([`message::REFRESH_MS`]).
//!
//! Every command goes through the [`breaker`]: after `failures` failed or timed-out commands
//! Redis is not asked for `openMs`, `clusterRateLimit` is not applied (local limits alone) and one
//! `'error'` `cluster_unavailable` is emitted per outage.

pub mod breaker;
pub mod kernel;
pub mod message;

use crate::clock::{self, ms_to_ns, ns_to_ms_ceil};
use crate::config::cluster::ClusterConfig;
use crate::config::update::BlockRequest;
use crate::protection::{BlockReason, ClusterRateLimit, Engine, IpKey, LeaseRequest, LeaseUpdate};
use breaker::Breaker;
use futures_util::StreamExt;
use ipnet::IpNet;
use kernel::{KernelBan, KernelBans};
use message::{
    wall_us, BanKind, BanMessage, Keys, Op, MAX_MESSAGE_BYTES, PERMANENT_TTL_MS, REFRESH_MS,
};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use serde::Serialize;
use std::cell::Cell;
use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::hash::{BuildHasher, RandomState};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::sync::{mpsc, Notify};
use tokio_util::sync::CancellationToken;

/// `'error'` event code of an outage (one per outage).
pub const CLUSTER_UNAVAILABLE: &str = "cluster_unavailable";
/// `'error'` event code of ban messages or ban keys read from Redis and rejected (at most one
/// event per [`REJECT_REPORT_MS`], with the count since the previous one).
pub const CLUSTER_REJECTED: &str = "cluster_message_rejected";
/// Least time between two `cluster_message_rejected` events, ms.
pub const REJECT_REPORT_MS: u64 = 1_000;
/// The `clusterRateLimit` GCRA (Redis Lua, `TIME` as the clock).
pub const GCRA_SCRIPT: &str = include_str!("gcra.lua");
/// Local bans waiting to be written (between two writer batches).
pub const BAN_QUEUE: usize = 65_536;
/// Refill requests waiting (a full queue: the client is admitted on credit or refused by its
/// lease, and asks again on its next connection).
pub const REFILL_QUEUE: usize = 65_536;
/// Local bans kept for replay while Redis is unreachable (oldest dropped beyond).
pub const REPLAY_MAX: usize = 100_000;
/// Most operations per pipeline.
pub const BATCH: usize = 512;
/// Health `PING` period, ms.
pub const HEALTH_MS: u64 = 250;
/// Propagation-delay samples kept (the newest).
pub const DELAY_SAMPLES: usize = 1024;
/// Messages this node published whose echo on the ban channel is still awaited, kept at most
/// (a whole replay and a full ban queue in flight at once; 8 bytes each).
pub const ECHOES_KEPT: usize = REPLAY_MAX + BAN_QUEUE;
/// Ban keys read per `SCAN` step of a load (each step's values are read and applied before the
/// next step, so a load never holds the whole key list).
pub const SCAN_COUNT: usize = 1000;

thread_local! {
    /// Set while this thread applies a ban received from another node: the box listener does
    /// not publish it again (no echo).
    static REMOTE: Cell<bool> = const { Cell::new(false) };
}

/// What the cluster tier needs from the proxy it runs in (implemented by the server; keeps this
/// module free of the proxy's types).
pub trait Node: Send + Sync + 'static {
    /// Whether a listener of this node serves `port`.
    fn serves(&self, port: u16) -> bool;
    /// Puts `ip`'s client in the penalty box of the listeners on `port` (every listener when
    /// `None`) for `remaining_ns` from `now_ns`.
    fn apply_box(&self, ip: IpAddr, port: Option<u16>, remaining_ns: u64, now_ns: u64);
    /// Puts the prefix `net` in the penalty box of the listeners on `port` (every listener when
    /// `None`) for `remaining_ns` from `now_ns`, as a local prefix box.
    fn apply_prefix_box(&self, net: IpNet, port: Option<u16>, remaining_ns: u64, now_ns: u64);
    /// Adds a `blockIp` entry (`ttl_ms` `None`: until `unblockIp`).
    fn apply_block(
        &self,
        net: IpNet,
        port: Option<u16>,
        ttl_ms: Option<u64>,
        note: Option<String>,
        now_ns: u64,
    );
    /// Removes `blockIp` entries as `unblockIp(net, { port })` does.
    fn apply_unblock(&self, net: IpNet, port: Option<u16>);
    /// Emits `'error'` `cluster_unavailable` with `message`.
    fn unavailable(&self, message: String);
    /// Emits `'error'` `cluster_message_rejected` with `message` (aggregated by the caller).
    fn rejected(&self, message: String);
    /// Adds `blockIp` entries in one write (a load from Redis: one snapshot of the set, not one
    /// per entry).
    fn apply_blocks(&self, blocks: Vec<BlockRequest>, now_ns: u64);
    /// Applies the refill task's `u` to the cluster lease of `key` on listener `listener` (the
    /// index given to [`Cluster::refill_lease`], [`Engine::update_lease`]); returns what it
    /// returns (0 when no such listener or lease).
    fn update_lease(&self, listener: usize, key: IpKey, u: LeaseUpdate) -> u64;
    /// Clients holding a cluster lease on all listeners ([`Engine::lease_clients`]).
    fn lease_clients(&self) -> u64;
}

#[derive(Debug, Clone)]
enum Outgoing {
    Ban {
        kind: BanKind,
        net: IpNet,
        port: Option<u16>,
        /// CLOCK_MONOTONIC deadline; `None`: until `unblockIp`.
        deadline_ns: Option<u64>,
        note: Option<String>,
    },
    Unban {
        net: IpNet,
        port: Option<u16>,
    },
}

#[derive(Debug, Clone, Copy)]
struct Refill {
    /// Which listener's engine holds the lease (several may share a port).
    listener: usize,
    port: u16,
    key: IpKey,
    limit: ClusterRateLimit,
}

#[derive(Debug, Clone)]
struct Origin {
    /// The `node` the message named (shared by every ban of that node loaded at once).
    node: Arc<str>,
    port: Option<u16>,
    deadline_ns: Option<u64>,
}

#[derive(Default)]
struct Stats {
    connected: AtomicBool,
    subscribed: AtomicBool,
    breaker_open: AtomicBool,
    bans_published: AtomicU64,
    bans_received: AtomicU64,
    lease_refills: AtomicU64,
    errors: AtomicU64,
    queue_overflow: AtomicU64,
    rejected: AtomicU64,
    delays_us: Mutex<VecDeque<u64>>,
}

/// Rejections not yet reported in a `cluster_message_rejected` event.
#[derive(Default)]
struct PendingRejects {
    count: u64,
    first: Option<String>,
}

/// Hashes of the messages this node published, until their echo comes back on the channel.
#[derive(Default)]
struct Echoes {
    awaited: HashSet<u64>,
    order: VecDeque<u64>,
}

/// Propagation delay of received bans (sender's wall clock to receiver's), ms, over the newest
/// [`DELAY_SAMPLES`] messages.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DelayStats {
    /// Samples.
    pub count: u64,
    /// Median, ms.
    pub p50: f64,
    /// 99th percentile, ms.
    pub p99: f64,
    /// Largest, ms.
    pub max: f64,
}

/// `metrics().cluster`.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSnapshot {
    /// This node's `nodeId`.
    pub node_id: String,
    /// Redis answers commands and the ban channel is subscribed.
    pub connected: bool,
    /// The breaker is open (Redis is not asked; local limits alone apply).
    pub breaker_open: bool,
    /// Local bans written and published.
    pub bans_published: u64,
    /// Bans received from other nodes (messages and reconciliation loads).
    pub bans_received: u64,
    /// `clusterRateLimit` lease refills answered by Redis.
    pub lease_refills: u64,
    /// Failed or timed-out Redis commands.
    pub errors: u64,
    /// Bans or refill requests not queued because a queue was full.
    pub queue_overflow: u64,
    /// Ban messages and ban keys read from Redis that failed validation and were dropped.
    pub rejected_messages: u64,
    /// Clients holding a lease entry.
    pub lease_clients: u64,
    /// Propagation delay of received ban messages.
    pub propagation_delay_ms: DelayStats,
}

/// One proxy's cluster tier.
pub struct Cluster {
    cfg: ClusterConfig,
    keys: Keys,
    client: redis::Client,
    conn: OnceLock<ConnectionManager>,
    node: OnceLock<Arc<dyn Node>>,
    script: redis::Script,
    stats: Stats,
    breaker: Mutex<Breaker>,
    out_tx: mpsc::Sender<Outgoing>,
    out_rx: Arc<tokio::sync::Mutex<mpsc::Receiver<Outgoing>>>,
    refill_tx: mpsc::Sender<Refill>,
    refill_rx: Arc<tokio::sync::Mutex<mpsc::Receiver<Refill>>>,
    replay: Mutex<VecDeque<Outgoing>>,
    origins: Mutex<HashMap<(BanKind, IpNet), Origin>>,
    permanent: Mutex<HashSet<String>>,
    reconcile: Notify,
    kernel: Mutex<KernelBans>,
    rejects: Mutex<PendingRejects>,
    echoes: Mutex<Echoes>,
    echo_hasher: RandomState,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Cluster {
    /// The cluster tier for `cfg` (validated); connects nothing until [`Cluster::start`].
    pub fn new(cfg: ClusterConfig) -> Result<Arc<Cluster>, redis::RedisError> {
        let client = redis::Client::open(cfg.redis.url.as_str())?;
        let (out_tx, out_rx) = mpsc::channel(BAN_QUEUE);
        let (refill_tx, refill_rx) = mpsc::channel(REFILL_QUEUE);
        Ok(Arc::new(Cluster {
            keys: Keys::new(&cfg.redis.key_prefix),
            breaker: Mutex::new(Breaker::new(
                cfg.breaker.failures,
                ms_to_ns(cfg.breaker.open_ms),
            )),
            cfg,
            client,
            conn: OnceLock::new(),
            node: OnceLock::new(),
            script: redis::Script::new(GCRA_SCRIPT),
            stats: Stats::default(),
            out_tx,
            out_rx: Arc::new(tokio::sync::Mutex::new(out_rx)),
            refill_tx,
            refill_rx: Arc::new(tokio::sync::Mutex::new(refill_rx)),
            replay: Mutex::new(VecDeque::new()),
            origins: Mutex::new(HashMap::new()),
            permanent: Mutex::new(HashSet::new()),
            reconcile: Notify::new(),
            kernel: Mutex::new(KernelBans::default()),
            rejects: Mutex::new(PendingRejects::default()),
            echoes: Mutex::new(Echoes::default()),
            echo_hasher: RandomState::new(),
        }))
    }

    /// This node's `nodeId`.
    pub fn node_id(&self) -> &str {
        &self.cfg.node_id
    }

    /// Whether bans are shared (`shareBans`).
    pub fn shares_bans(&self) -> bool {
        self.cfg.share_bans
    }

    /// Starts the tasks on the current tokio runtime (call inside `Runtime::enter`); they end
    /// when `stop` fires, and a later call (the proxy started again) starts them anew.
    pub fn start(self: &Arc<Self>, node: Arc<dyn Node>, stop: CancellationToken) {
        let _ = self.node.set(node);
        let (out_rx, refill_rx) = (self.out_rx.clone(), self.refill_rx.clone());
        let mcfg = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_millis(
                self.cfg.redis.connect_timeout_ms,
            )))
            .set_response_timeout(Some(Duration::from_millis(
                self.cfg.redis.command_timeout_ms,
            )))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(2_000));
        if self.conn.get().is_none() {
            match ConnectionManager::new_lazy_with_config(self.client.clone(), mcfg) {
                Ok(c) => {
                    let _ = self.conn.set(c);
                }
                Err(e) => self.failed(format!("Redis client: {e}")),
            }
        }
        let me = self.clone();
        let s = stop.clone();
        tokio::spawn(async move {
            let mut rx = out_rx.lock().await;
            me.writer(&mut rx, s).await
        });
        let me = self.clone();
        let s = stop.clone();
        tokio::spawn(async move {
            let mut rx = refill_rx.lock().await;
            me.refiller(&mut rx, s).await
        });
        let me = self.clone();
        let s = stop.clone();
        tokio::spawn(async move { me.reconciler(s).await });
        let me = self.clone();
        let s = stop.clone();
        tokio::spawn(async move { me.health(s).await });
        if self.cfg.share_bans {
            let me = self.clone();
            tokio::spawn(async move { me.subscriber(stop).await });
        }
    }

    // ---- the accept path (non-blocking) ----

    /// Chains [`Cluster::boxed`] behind `engine`'s box listener (the XDP ban queue), so every
    /// box and prefix box of that listener is shared.
    pub fn listen(self: &Arc<Self>, engine: &Engine) {
        if !self.cfg.share_bans {
            return;
        }
        let prev = engine.box_listener();
        let me = self.clone();
        let port = engine.port();
        engine.set_box_listener(Some(Arc::new(move |key, deadline_ns, prefix| {
            if let Some(p) = &prev {
                p(key, deadline_ns, prefix);
            }
            me.boxed(port, key, deadline_ns, prefix);
        })));
    }

    /// Box listener hook (chained after the XDP one): queues a local box for publishing. Never
    /// blocks; a remote ban being applied on this thread is not published again.
    pub fn boxed(&self, port: u16, key: IpKey, deadline_ns: u64, prefix: bool) {
        if !self.cfg.share_bans || REMOTE.with(Cell::get) {
            return;
        }
        self.queue(Outgoing::Ban {
            kind: if prefix {
                BanKind::Prefix
            } else {
                BanKind::Box
            },
            net: key.to_ipnet(),
            port: Some(port),
            deadline_ns: Some(deadline_ns),
            note: None,
        });
    }

    /// A ban is being written to the kernel from userspace (a local box, or one received from
    /// another node): [`Cluster::kernel_scan`] does not take it for the kernel's own.
    pub fn kernel_written(&self, net: IpNet, port: u16, deadline_ns: u64) {
        if self.cfg.share_bans {
            lock(&self.kernel).written(net, port, deadline_ns);
        }
    }

    /// The server's background tick with XDP attached, at `now_ns`: given the kernel's `banned`
    /// and `banExtended` counters, reads the ban maps back with `read` when they moved and queues
    /// the kernel's own bans and extensions for publishing ([`kernel`]); returns how many.
    pub fn kernel_scan(
        &self,
        banned: u64,
        extended: u64,
        now_ns: u64,
        read: impl FnOnce() -> Vec<KernelBan>,
    ) -> usize {
        if !self.cfg.share_bans || !lock(&self.kernel).should_scan(banned, extended, now_ns) {
            return 0;
        }
        let bans = read();
        let found = lock(&self.kernel).publishable(&bans, now_ns);
        for b in &found {
            self.queue(Outgoing::Ban {
                kind: match (b.syn, b.prefix) {
                    (true, _) => BanKind::Syn,
                    (false, true) => BanKind::Prefix,
                    (false, false) => BanKind::Box,
                },
                net: b.net,
                port: Some(b.port),
                deadline_ns: Some(b.deadline_ns),
                note: None,
            });
        }
        found.len()
    }

    fn queue(&self, o: Outgoing) {
        if self.out_tx.try_send(o).is_err() {
            self.stats.queue_overflow.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Whether admissions take `clusterRateLimit` lease tokens now: false while the breaker is
    /// open (local limits alone). One atomic load, for the accept path
    /// ([`Engine::admit_clustered`]).
    #[inline]
    pub fn leases_on(&self) -> bool {
        !self.stats.breaker_open.load(Ordering::Relaxed)
    }

    /// Queues the lease refill `r` of listener `listener`'s engine (answered through
    /// [`Node::update_lease`]); never waits. False when the queue is full (counted in
    /// `queueOverflow`).
    fn request_refill(&self, listener: usize, r: LeaseRequest) -> bool {
        let sent = self
            .refill_tx
            .try_send(Refill {
                listener,
                port: r.port,
                key: r.key,
                limit: r.limit,
            })
            .is_ok();
        if !sent {
            self.stats.queue_overflow.fetch_add(1, Ordering::Relaxed);
        }
        sent
    }

    /// After an admission that set [`crate::protection::Admission::refill`] (rare: once per
    /// lease): builds `ip`'s refill request on listener `listener`'s `engine` and queues it
    /// (a `try_send` on the refill queue); if it cannot be queued, tells the engine
    /// ([`LeaseUpdate::NotSent`]) so the client's next connection asks again. Never waits.
    pub fn refill_lease(&self, engine: &Engine, listener: usize, ip: IpAddr) {
        if let Some(r) = engine.lease_request(ip) {
            if !self.request_refill(listener, r) {
                engine.update_lease(r.key, LeaseUpdate::NotSent);
            }
        }
    }

    // ---- operator actions (JS thread) ----

    /// `blockIp` was applied locally: share it.
    pub fn blocked(
        &self,
        net: IpNet,
        port: Option<u16>,
        ttl_ms: Option<u64>,
        note: Option<String>,
    ) {
        if !self.cfg.share_bans {
            return;
        }
        let now = clock::now_ns();
        self.queue(Outgoing::Ban {
            kind: BanKind::Block,
            net,
            port,
            deadline_ns: ttl_ms.map(|t| now.saturating_add(ms_to_ns(t))),
            note,
        });
    }

    /// `unblockIp` was applied locally: share it.
    pub fn unblocked(&self, net: IpNet, port: Option<u16>) {
        if self.cfg.share_bans {
            self.queue(Outgoing::Unban { net, port });
        }
    }

    /// The `nodeId` a `blockedIps({detail:true})` entry came from (`ip` as listed, `reason` its
    /// list): the origin of a ban received from another node, else this node; and, when it came
    /// from another node, what kind of ban it was received as.
    pub fn origin(&self, reason: BlockReason, ip: &str, port: u16) -> (String, Option<BanKind>) {
        let net = match ip.parse::<IpNet>() {
            Ok(n) => n,
            Err(_) => match ip.parse::<IpAddr>() {
                Ok(a) => IpNet::from(a),
                Err(_) => return (self.cfg.node_id.clone(), None),
            },
        };
        let kinds: &[BanKind] = match reason {
            BlockReason::PenaltyBoxed => &[BanKind::Box, BanKind::Syn, BanKind::Prefix],
            BlockReason::DynamicBlocked => &[BanKind::Block],
            _ => &[],
        };
        let now = clock::now_ns();
        let origins = lock(&self.origins);
        kinds
            .iter()
            .filter_map(|k| origins.get(&(*k, net)).map(|o| (*k, o)))
            .find(|(_, o)| {
                o.port.is_none_or(|p| p == port) && o.deadline_ns.is_none_or(|d| d > now)
            })
            .map_or_else(
                || (self.cfg.node_id.clone(), None),
                |(k, o)| (o.node.to_string(), Some(k)),
            )
    }

    /// `metrics().cluster`.
    pub fn snapshot(&self) -> ClusterSnapshot {
        let s = &self.stats;
        let mut d: Vec<u64> = lock(&s.delays_us).iter().copied().collect();
        d.sort_unstable();
        let pick = |q: f64| -> f64 {
            if d.is_empty() {
                return 0.0;
            }
            let i = ((d.len() as f64 * q).ceil() as usize).clamp(1, d.len()) - 1;
            d[i] as f64 / 1000.0
        };
        ClusterSnapshot {
            node_id: self.cfg.node_id.clone(),
            connected: s.connected.load(Ordering::Relaxed)
                && (!self.cfg.share_bans || s.subscribed.load(Ordering::Relaxed)),
            breaker_open: s.breaker_open.load(Ordering::Relaxed),
            bans_published: s.bans_published.load(Ordering::Relaxed),
            bans_received: s.bans_received.load(Ordering::Relaxed),
            lease_refills: s.lease_refills.load(Ordering::Relaxed),
            errors: s.errors.load(Ordering::Relaxed),
            queue_overflow: s.queue_overflow.load(Ordering::Relaxed),
            rejected_messages: s.rejected.load(Ordering::Relaxed),
            lease_clients: self.node.get().map_or(0, |n| n.lease_clients()),
            propagation_delay_ms: DelayStats {
                count: d.len() as u64,
                p50: pick(0.5),
                p99: pick(0.99),
                max: d.last().map_or(0.0, |m| *m as f64 / 1000.0),
            },
        }
    }

    // ---- Redis through the breaker ----

    /// Runs one command (or pipeline) unless the breaker is open; a failure or a timeout
    /// (`commandTimeoutMs`) is recorded. `None`: not sent or failed.
    async fn run<T, F, Fut>(&self, f: F) -> Option<T>
    where
        F: FnOnce(ConnectionManager) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        let conn = self.conn.get()?.clone();
        if !lock(&self.breaker).allow(clock::now_ns()) {
            return None;
        }
        let limit = Duration::from_millis(self.cfg.redis.command_timeout_ms);
        match tokio::time::timeout(limit, f(conn)).await {
            Ok(Ok(v)) => {
                self.succeeded();
                Some(v)
            }
            Ok(Err(e)) => {
                self.failed(format!("Redis command failed: {e}"));
                None
            }
            Err(_) => {
                self.failed(format!(
                    "Redis command timed out after {} ms (commandTimeoutMs)",
                    self.cfg.redis.command_timeout_ms
                ));
                None
            }
        }
    }

    fn succeeded(&self) {
        let ended = lock(&self.breaker).success();
        self.stats.breaker_open.store(false, Ordering::Relaxed);
        self.stats.connected.store(true, Ordering::Relaxed);
        if ended {
            self.reconcile.notify_one();
        }
    }

    fn failed(&self, message: String) {
        self.stats.errors.fetch_add(1, Ordering::Relaxed);
        let f = lock(&self.breaker).failure(clock::now_ns());
        if f.open {
            self.stats.breaker_open.store(true, Ordering::Relaxed);
            self.stats.connected.store(false, Ordering::Relaxed);
        }
        if f.outage_began {
            if let Some(n) = self.node.get() {
                n.unavailable(format!(
                    "Redis unreachable, local limits alone apply: {message}"
                ));
            }
        }
    }

    fn keep_for_replay(&self, ops: Vec<Outgoing>) {
        let mut r = lock(&self.replay);
        for o in ops {
            if r.len() >= REPLAY_MAX {
                r.pop_front();
            }
            r.push_back(o);
        }
    }

    // ---- tasks ----

    async fn writer(&self, rx: &mut mpsc::Receiver<Outgoing>, stop: CancellationToken) {
        loop {
            let first = tokio::select! {
                _ = stop.cancelled() => return,
                o = rx.recv() => match o { Some(o) => o, None => return },
            };
            let mut batch = vec![first];
            while batch.len() < BATCH {
                match rx.try_recv() {
                    Ok(o) => batch.push(o),
                    Err(_) => break,
                }
            }
            self.write(batch).await;
        }
    }

    /// Writes and publishes local bans; what fails is kept for replay.
    async fn write(&self, batch: Vec<Outgoing>) {
        let now = clock::now_ns();
        // Coalesce: one write per ban key (the latest deadline), unbans in order.
        let mut ops: Vec<Outgoing> = Vec::with_capacity(batch.len());
        for o in batch {
            if let Outgoing::Ban {
                kind,
                net,
                port,
                deadline_ns,
                ..
            } = &o
            {
                if deadline_ns.is_some_and(|d| d <= now) {
                    continue;
                }
                if let Some(Outgoing::Ban { deadline_ns: d, .. }) = ops.iter_mut().find(|x| {
                    matches!(x, Outgoing::Ban { kind: k, net: n, port: p, .. }
                        if k == kind && n == net && p == port)
                }) {
                    if deadline_ns.is_none() || d.is_some_and(|d| Some(d) < *deadline_ns) {
                        *d = *deadline_ns;
                    }
                    continue;
                }
            }
            ops.push(o);
        }
        if ops.is_empty() {
            return;
        }
        // Unbans without a port remove every per-port blockIp key of the network: find them.
        let mut extra_del: Vec<String> = Vec::new();
        for o in &ops {
            if let Outgoing::Unban { net, port: None } = o {
                let pattern = self.keys.block_pattern(net);
                match self.scan(&pattern).await {
                    Some(keys) => extra_del.extend(keys),
                    None => {
                        self.keep_for_replay(ops);
                        return;
                    }
                }
            }
        }
        let mut pipe = redis::pipe();
        let channel = self.keys.channel();
        let mut permanent_add = Vec::new();
        let mut permanent_del = Vec::new();
        let mut published = 0u64;
        for o in &ops {
            let (msg, key) = match o {
                Outgoing::Ban {
                    kind,
                    net,
                    port,
                    deadline_ns,
                    note,
                } => {
                    let ttl_ms = deadline_ns.map(|d| ns_to_ms_ceil(d.saturating_sub(now)));
                    let key = self.keys.ban(*kind, *port, net);
                    let msg = self.message(Op::Ban, *kind, *net, *port, ttl_ms, note.clone());
                    let px = ttl_ms.unwrap_or(PERMANENT_TTL_MS).max(1);
                    if ttl_ms.is_none() {
                        permanent_add.push(key.clone());
                    }
                    pipe.cmd("SET")
                        .arg(&key)
                        .arg(&msg)
                        .arg("PX")
                        .arg(px)
                        .ignore();
                    (msg, key)
                }
                Outgoing::Unban { net, port } => {
                    let key = self.keys.ban(BanKind::Block, *port, net);
                    let msg = self.message(Op::Unban, BanKind::Block, *net, *port, None, None);
                    pipe.cmd("DEL").arg(&key).ignore();
                    permanent_del.push(*net);
                    (msg, key)
                }
            };
            let _ = key;
            self.await_echo(msg.as_bytes());
            pipe.cmd("PUBLISH").arg(&channel).arg(msg).ignore();
            published += 1;
        }
        for k in &extra_del {
            pipe.cmd("DEL").arg(k).ignore();
        }
        let done = self
            .run(|mut c| async move { pipe.query_async::<()>(&mut c).await })
            .await;
        if done.is_none() {
            self.keep_for_replay(ops);
            return;
        }
        self.stats
            .bans_published
            .fetch_add(published, Ordering::Relaxed);
        let mut origins = lock(&self.origins);
        let mut perm = lock(&self.permanent);
        for k in permanent_add {
            perm.insert(k);
        }
        for net in permanent_del {
            perm.retain(|k| !k.ends_with(&format!(":{net}")));
        }
        for o in &ops {
            match o {
                Outgoing::Ban { kind, net, .. } => origins.remove(&(*kind, *net)),
                Outgoing::Unban { net, .. } => origins.remove(&(BanKind::Block, *net)),
            };
        }
    }

    fn message(
        &self,
        op: Op,
        kind: BanKind,
        net: IpNet,
        port: Option<u16>,
        ttl_ms: Option<u64>,
        note: Option<String>,
    ) -> String {
        let m = BanMessage {
            op,
            node: self.cfg.node_id.clone(),
            kind,
            net,
            port,
            ttl_ms,
            note,
            sent_us: wall_us(),
        };
        serde_json::to_string(&m).unwrap_or_default()
    }

    /// Every key matching `pattern` (`SCAN`, each step through the breaker).
    async fn scan(&self, pattern: &str) -> Option<Vec<String>> {
        let mut out = Vec::new();
        let mut cursor: u64 = 0;
        loop {
            let pat = pattern.to_string();
            let (next, keys): (u64, Vec<String>) = self
                .run(|mut c| async move {
                    redis::cmd("SCAN")
                        .arg(cursor)
                        .arg("MATCH")
                        .arg(pat)
                        .arg("COUNT")
                        .arg(1000)
                        .query_async(&mut c)
                        .await
                })
                .await?;
            out.extend(keys);
            if next == 0 {
                return Some(out);
            }
            cursor = next;
        }
    }

    async fn refiller(&self, rx: &mut mpsc::Receiver<Refill>, stop: CancellationToken) {
        loop {
            let first = tokio::select! {
                _ = stop.cancelled() => return,
                r = rx.recv() => match r { Some(r) => r, None => return },
            };
            let mut batch = vec![first];
            while batch.len() < BATCH {
                match rx.try_recv() {
                    Ok(r) => batch.push(r),
                    Err(_) => break,
                }
            }
            self.refill(batch).await;
        }
    }

    /// One EVALSHA per client, sent concurrently (the connection pipelines them).
    async fn refill(&self, batch: Vec<Refill>) {
        let Some(node) = self.node.get() else {
            return;
        };
        let mut calls = Vec::with_capacity(batch.len());
        for r in &batch {
            let debt = node.update_lease(r.listener, r.key, LeaseUpdate::TakeDebt);
            let interval_us = ((1e6 / r.limit.limit.rate).round() as u64).max(1);
            let tolerance_us = interval_us.saturating_mul(r.limit.limit.burst.saturating_sub(1));
            let mut inv = self.script.key(self.keys.rate(r.port, &r.key.to_string()));
            inv.arg(interval_us)
                .arg(tolerance_us)
                .arg(debt)
                .arg(r.limit.lease);
            calls.push(inv);
        }
        let answers: Option<Vec<(u64, u64)>> = self
            .run(|c| async move {
                let futs = calls.iter().map(|inv| {
                    let mut c = c.clone();
                    async move { inv.invoke_async::<(u64, u64)>(&mut c).await }
                });
                futures_util::future::join_all(futs)
                    .await
                    .into_iter()
                    .collect::<redis::RedisResult<Vec<_>>>()
            })
            .await;
        let now = clock::now_ns();
        match answers {
            Some(a) => {
                for (r, (granted, retry_us)) in batch.iter().zip(a) {
                    let u = LeaseUpdate::Refilled {
                        granted,
                        retry_after_ns: retry_us.saturating_mul(1000),
                        now_ns: now,
                    };
                    node.update_lease(r.listener, r.key, u);
                }
                self.stats
                    .lease_refills
                    .fetch_add(batch.len() as u64, Ordering::Relaxed);
            }
            None => {
                for r in &batch {
                    node.update_lease(r.listener, r.key, LeaseUpdate::Failed);
                }
            }
        }
    }

    async fn health(self: Arc<Self>, stop: CancellationToken) {
        let mut tick = tokio::time::interval(Duration::from_millis(HEALTH_MS));
        let mut n: u64 = 0;
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            let _ = self
                .run(|mut c| async move { redis::cmd("PING").query_async::<String>(&mut c).await })
                .await;
            let now = clock::now_ns();
            n += 1;
            if n.is_multiple_of(REJECT_REPORT_MS / HEALTH_MS) {
                self.report_rejects();
            }
            if n.is_multiple_of(40) {
                lock(&self.origins).retain(|_, o| o.deadline_ns.is_none_or(|d| d > now));
            }
            if n.is_multiple_of(REFRESH_MS / HEALTH_MS) {
                let keys: Vec<String> = lock(&self.permanent).iter().cloned().collect();
                if !keys.is_empty() {
                    let mut pipe = redis::pipe();
                    for k in &keys {
                        pipe.cmd("PEXPIRE").arg(k).arg(PERMANENT_TTL_MS).ignore();
                    }
                    let _ = self
                        .run(|mut c| async move { pipe.query_async::<()>(&mut c).await })
                        .await;
                }
            }
        }
    }

    async fn reconciler(self: Arc<Self>, stop: CancellationToken) {
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = self.reconcile.notified() => {}
            }
            // Own bans made while Redis was away first, so the others receive them too.
            let pending: Vec<Outgoing> = lock(&self.replay).drain(..).collect();
            if !pending.is_empty() {
                self.write(pending).await;
            }
            if self.cfg.share_bans {
                self.load().await;
            }
        }
    }

    /// Loads every live ban key of the other nodes, one `SCAN` step at a time: each step's keys
    /// are read (`GETRANGE` of at most [`MAX_MESSAGE_BYTES`] + 1 bytes, `PTTL`), checked as a
    /// received message is ([`Cluster::read_message`], and the key must be the one its ban is
    /// written under) and applied; what fails is rejected ([`Cluster::reject`]). `blockIp`
    /// entries are applied in batches of at least as many as applied before in this load (one
    /// snapshot of the set per batch), so a load of N keys costs O(N) time. A key carrying this
    /// node's `nodeId` is its own (written by it, or by an earlier run under the same `nodeId`)
    /// and is not applied.
    async fn load(&self) {
        let pattern = self.keys.ban_pattern();
        let mut cursor: u64 = 0;
        let mut blocks: Vec<BlockRequest> = Vec::new();
        let mut flushed: usize = 0;
        let mut names: HashMap<String, Arc<str>> = HashMap::new();
        loop {
            let pat = pattern.clone();
            let Some((next, keys)) = self
                .run(|mut c| async move {
                    redis::cmd("SCAN")
                        .arg(cursor)
                        .arg("MATCH")
                        .arg(pat)
                        .arg("COUNT")
                        .arg(SCAN_COUNT)
                        .query_async::<(u64, Vec<Vec<u8>>)>(&mut c)
                        .await
                })
                .await
            else {
                break;
            };
            if !keys.is_empty() {
                let mut pipe = redis::pipe();
                pipe.ignore_errors();
                for k in &keys {
                    pipe.cmd("GETRANGE")
                        .arg(k)
                        .arg(0)
                        .arg(MAX_MESSAGE_BYTES)
                        .cmd("PTTL")
                        .arg(k);
                }
                let Some(vals) = self
                    .run(|mut c| async move { pipe.query_async::<Vec<redis::Value>>(&mut c).await })
                    .await
                else {
                    break;
                };
                for (k, v) in keys.iter().zip(vals.chunks_exact(2)) {
                    self.load_one(k, &v[0], &v[1], &mut blocks, &mut names);
                }
            }
            if blocks.len() >= BATCH.max(flushed) {
                flushed += blocks.len();
                self.flush_blocks(&mut blocks);
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
        self.flush_blocks(&mut blocks);
    }

    /// One ban key of a load: `value` its `GETRANGE`, `pttl` its `PTTL`.
    fn load_one(
        &self,
        key: &[u8],
        value: &redis::Value,
        pttl: &redis::Value,
        blocks: &mut Vec<BlockRequest>,
        names: &mut HashMap<String, Arc<str>>,
    ) {
        let shown = || {
            let k = String::from_utf8_lossy(key);
            let mut k: String = k.chars().take(160).collect();
            if k.len() < key.len() {
                k.push_str("...");
            }
            k
        };
        let pttl = match pttl {
            redis::Value::Int(-2) => return, // gone since the SCAN
            redis::Value::Int(t) => *t,
            _ => return self.reject(format!("ban key {}: no PTTL", shown())),
        };
        let bytes: &[u8] = match value {
            redis::Value::BulkString(b) => b,
            redis::Value::SimpleString(s) => s.as_bytes(),
            _ => return self.reject(format!("ban key {}: not a string", shown())),
        };
        if bytes.is_empty() && pttl < 0 {
            return; // gone between GETRANGE and PTTL
        }
        let mut m = match self.read_message(bytes) {
            Ok(m) => m,
            Err(e) => return self.reject(format!("ban key {}: {e}", shown())),
        };
        if m.op != Op::Ban {
            return self.reject(format!("ban key {}: holds an unban", shown()));
        }
        if self.keys.ban(m.kind, m.port, &m.net).as_bytes() != key {
            return self.reject(format!(
                "ban key {}: holds a ban of {} {} port {:?}, written under another key",
                shown(),
                m.kind.as_str(),
                m.net,
                m.port
            ));
        }
        if m.node == self.cfg.node_id {
            return;
        }
        // The key's remaining time; a ban with no TTL (until unblockIp) is refreshed by its
        // origin, so its key's PTTL is not its end.
        if m.ttl_ms.is_some() {
            if pttl <= 0 {
                return;
            }
            m.ttl_ms = Some(pttl as u64);
            if let Err(e) = m.check() {
                return self.reject(format!("ban key {}: PTTL: {e}", shown()));
            }
        }
        let node = match names.get(m.node.as_str()) {
            Some(n) => n.clone(),
            None => {
                let n: Arc<str> = Arc::from(m.node.as_str());
                if names.len() < 1024 {
                    names.insert(m.node.clone(), n.clone());
                }
                n
            }
        };
        self.stats.bans_received.fetch_add(1, Ordering::Relaxed);
        let ttl = m.ttl_ms;
        self.apply(&m, ttl, node, Some(blocks));
    }

    /// Applies the `blockIp` entries a load gathered, in one write.
    fn flush_blocks(&self, blocks: &mut Vec<BlockRequest>) {
        if blocks.is_empty() {
            return;
        }
        if let Some(node) = self.node.get() {
            node.apply_blocks(std::mem::take(blocks), clock::now_ns());
        }
        blocks.clear();
    }

    /// A ban message (channel payload or ban key value) as read from Redis: at most
    /// [`MAX_MESSAGE_BYTES`], a [`BanMessage`] whose `net` is canonical, passing
    /// [`BanMessage::check`]. `Err`: why not.
    fn read_message(&self, bytes: &[u8]) -> Result<BanMessage, String> {
        if bytes.len() > MAX_MESSAGE_BYTES {
            return Err(format!(
                "more than {MAX_MESSAGE_BYTES} bytes ({}{})",
                bytes.len(),
                if bytes.len() == MAX_MESSAGE_BYTES + 1 {
                    "+"
                } else {
                    ""
                }
            ));
        }
        let m: BanMessage =
            serde_json::from_slice(bytes).map_err(|e| format!("not a ban message: {e}"))?;
        m.check()?;
        Ok(m)
    }

    /// Counts a message or ban key read from Redis that failed validation (dropped); `why` is
    /// kept for the next `cluster_message_rejected` event when it is the first since the last.
    fn reject(&self, why: String) {
        self.stats.rejected.fetch_add(1, Ordering::Relaxed);
        let mut r = lock(&self.rejects);
        r.count += 1;
        if r.first.is_none() {
            r.first = Some(why);
        }
    }

    /// Emits one `cluster_message_rejected` for the rejections since the last one, if any (the
    /// health task, every [`REJECT_REPORT_MS`]).
    fn report_rejects(&self) {
        let (count, first) = {
            let mut r = lock(&self.rejects);
            (std::mem::take(&mut r.count), r.first.take())
        };
        if count == 0 {
            return;
        }
        if let Some(n) = self.node.get() {
            n.rejected(format!(
                "{count} ban message(s) from Redis rejected (metrics().cluster.rejectedMessages); \
                 the first: {}",
                first.unwrap_or_default()
            ));
        }
    }

    /// This node is about to publish `payload`: its echo on the ban channel is expected.
    fn await_echo(&self, payload: &[u8]) {
        let h = self.echo_hasher.hash_one(payload);
        let mut e = lock(&self.echoes);
        if e.order.len() >= ECHOES_KEPT {
            if let Some(old) = e.order.pop_front() {
                e.awaited.remove(&old);
            }
        }
        if e.awaited.insert(h) {
            e.order.push_back(h);
        }
    }

    /// Whether `payload` is the echo of a message this node published (each echo is taken once).
    fn echoed(&self, payload: &[u8]) -> bool {
        let h = self.echo_hasher.hash_one(payload);
        lock(&self.echoes).awaited.remove(&h)
    }

    async fn subscriber(self: Arc<Self>, stop: CancellationToken) {
        let connect = Duration::from_millis(self.cfg.redis.connect_timeout_ms);
        let mut backoff = Duration::from_millis(100);
        let channel = self.keys.channel();
        loop {
            if stop.is_cancelled() {
                return;
            }
            let ps = tokio::select! {
                _ = stop.cancelled() => return,
                r = tokio::time::timeout(connect, self.client.get_async_pubsub()) => r,
            };
            if let Ok(Ok(mut ps)) = ps {
                let sub = tokio::time::timeout(connect, ps.subscribe(&channel)).await;
                if let Ok(Ok(())) = sub {
                    backoff = Duration::from_millis(100);
                    self.stats.subscribed.store(true, Ordering::Relaxed);
                    self.reconcile.notify_one();
                    let mut stream = ps.on_message();
                    loop {
                        let m = tokio::select! {
                            _ = stop.cancelled() => return,
                            m = stream.next() => m,
                        };
                        match m {
                            Some(m) => self.receive(m.get_payload_bytes()),
                            None => break,
                        }
                    }
                    self.stats.subscribed.store(false, Ordering::Relaxed);
                }
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(Duration::from_secs(2));
        }
    }

    /// One ban-channel message: read and checked ([`Cluster::read_message`]), else rejected.
    /// A message naming this node's `nodeId` is applied by no one: it is the echo of one this
    /// node published (expected, silent) or it is not, and then it is rejected — Redis does not
    /// authenticate senders, so `node` is only what the message claims; a ban is attributed
    /// (`blockedIps({detail:true}).node`) to the valid `nodeId`, other than this node's, that it
    /// names.
    fn receive(&self, payload: &[u8]) {
        let m = match self.read_message(payload) {
            Ok(m) => m,
            Err(e) => return self.reject(format!("ban channel: {e}")),
        };
        if m.node == self.cfg.node_id {
            if !self.echoed(payload) {
                self.reject(format!(
                    "ban channel: a message naming this node ({:?}) that it did not publish",
                    m.node
                ));
            }
            return;
        }
        self.stats.bans_received.fetch_add(1, Ordering::Relaxed);
        {
            let mut d = lock(&self.stats.delays_us);
            if d.len() >= DELAY_SAMPLES {
                d.pop_front();
            }
            d.push_back(wall_us().saturating_sub(m.sent_us));
        }
        let node: Arc<str> = Arc::from(m.node.as_str());
        self.apply(&m, m.ttl_ms, node, None);
    }

    /// Applies another node's ban (or unban), checked already, with `ttl_ms` left to this node's
    /// engines, attributed to `node`. A ban for a port this node does not serve is ignored; one
    /// without a port applies to every listener. With `blocks` (a load), a `blockIp` entry is
    /// gathered there for one write ([`Node::apply_blocks`]) instead of applied alone.
    fn apply(
        &self,
        m: &BanMessage,
        ttl_ms: Option<u64>,
        node_id: Arc<str>,
        blocks: Option<&mut Vec<BlockRequest>>,
    ) {
        let Some(node) = self.node.get() else { return };
        if m.port.is_some_and(|p| !node.serves(p)) {
            return;
        }
        let now = clock::now_ns();
        let deadline_ns = ttl_ms.map(|t| now.saturating_add(ms_to_ns(t)));
        let origin = Origin {
            node: node_id,
            port: m.port,
            deadline_ns,
        };
        match (m.op, m.kind) {
            (Op::Ban, BanKind::Box | BanKind::Syn) => {
                let Some(ttl) = ttl_ms else { return };
                REMOTE.with(|r| r.set(true));
                node.apply_box(m.net.addr(), m.port, ms_to_ns(ttl), now);
                REMOTE.with(|r| r.set(false));
            }
            (Op::Ban, BanKind::Prefix) => {
                let Some(ttl) = ttl_ms else { return };
                REMOTE.with(|r| r.set(true));
                node.apply_prefix_box(m.net, m.port, ms_to_ns(ttl), now);
                REMOTE.with(|r| r.set(false));
            }
            (Op::Ban, BanKind::Block) => match blocks {
                Some(b) => b.push(BlockRequest {
                    net: m.net,
                    ttl_ms,
                    reason: m.note.clone(),
                    port: m.port,
                }),
                None => node.apply_block(m.net, m.port, ttl_ms, m.note.clone(), now),
            },
            (Op::Unban, _) => {
                node.apply_unblock(m.net, m.port);
                lock(&self.origins).remove(&(BanKind::Block, m.net));
                let suffix = format!(":{}", m.net);
                lock(&self.permanent).retain(|k| !k.ends_with(&suffix));
                return;
            }
        }
        lock(&self.origins).insert((m.kind, m.net), origin);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::error::Issues;
    use serde_json::json;

    fn cluster(share_bans: bool) -> Arc<Cluster> {
        let v = json!({ "redis": { "url": "redis://127.0.0.1:1" }, "nodeId": "a",
                        "shareBans": share_bans });
        let mut issues = Issues::default();
        let cfg = crate::config::cluster::parse_cluster(&v, "cluster", &mut issues).unwrap();
        Cluster::new(cfg).unwrap()
    }

    fn queued(c: &Cluster) -> Vec<(BanKind, String, Option<u16>, Option<u64>)> {
        let mut rx = c.out_rx.try_lock().unwrap();
        let mut out = Vec::new();
        while let Ok(o) = rx.try_recv() {
            if let Outgoing::Ban {
                kind,
                net,
                port,
                deadline_ns,
                ..
            } = o
            {
                out.push((kind, net.to_string(), port, deadline_ns));
            }
        }
        out
    }

    fn kb(net: &str, deadline_ns: u64, syn: bool, prefix: bool) -> KernelBan {
        KernelBan {
            net: net.parse().unwrap(),
            port: 8443,
            deadline_ns,
            syn,
            prefix,
        }
    }

    #[test]
    fn kernel_bans_are_queued_for_publishing_and_written_ones_are_not() {
        const S: u64 = 1_000_000_000;
        let c = cluster(true);
        // A box received from another node reached the kernel from userspace.
        c.kernel_written("192.0.2.1/32".parse().unwrap(), 8443, 30 * S);
        let kernel = vec![
            kb("192.0.2.1/32", 30 * S, false, false),
            kb("198.51.100.7/32", 12 * S, true, false),
            kb("203.0.113.0/24", 40 * S, false, true),
        ];
        // Counters unchanged: the maps are not read.
        assert_eq!(c.kernel_scan(0, 0, S, || unreachable!()), 0);
        assert_eq!(c.kernel_scan(1, 0, S, || kernel.clone()), 2);
        assert_eq!(
            queued(&c),
            vec![
                (
                    BanKind::Syn,
                    "198.51.100.7/32".into(),
                    Some(8443),
                    Some(12 * S)
                ),
                (
                    BanKind::Prefix,
                    "203.0.113.0/24".into(),
                    Some(8443),
                    Some(40 * S)
                ),
            ]
        );
        assert_eq!(c.kernel_scan(2, 0, S, || kernel.clone()), 0, "no repeat");
        assert!(queued(&c).is_empty());
        // Without shareBans nothing is read or queued.
        let quiet = cluster(false);
        assert_eq!(quiet.kernel_scan(1, 1, S, || unreachable!()), 0);
    }

    /// Records what the cluster tier asks of the proxy.
    #[derive(Default)]
    struct Calls(Mutex<Vec<String>>);

    impl Node for Calls {
        fn serves(&self, port: u16) -> bool {
            port == 8443
        }
        fn apply_box(&self, ip: IpAddr, port: Option<u16>, remaining_ns: u64, _: u64) {
            let muted = REMOTE.with(Cell::get);
            lock(&self.0).push(format!("box {ip} {port:?} {remaining_ns} muted={muted}"));
        }
        fn apply_prefix_box(&self, net: IpNet, port: Option<u16>, remaining_ns: u64, _: u64) {
            let muted = REMOTE.with(Cell::get);
            lock(&self.0).push(format!(
                "prefix {net} {port:?} {remaining_ns} muted={muted}"
            ));
        }
        fn apply_block(
            &self,
            net: IpNet,
            _: Option<u16>,
            _: Option<u64>,
            _: Option<String>,
            _: u64,
        ) {
            lock(&self.0).push(format!("block {net}"));
        }
        fn apply_unblock(&self, net: IpNet, _: Option<u16>) {
            lock(&self.0).push(format!("unblock {net}"));
        }
        fn unavailable(&self, _: String) {}
        fn rejected(&self, message: String) {
            lock(&self.0).push(format!("rejected {message}"));
        }
        fn apply_blocks(&self, blocks: Vec<BlockRequest>, _: u64) {
            for b in blocks {
                lock(&self.0).push(format!("block {}", b.net));
            }
        }
        fn update_lease(&self, _: usize, _: IpKey, _: LeaseUpdate) -> u64 {
            0
        }
        fn lease_clients(&self) -> u64 {
            0
        }
    }

    #[test]
    fn received_syn_and_prefix_bans_are_boxes_with_their_origin() {
        let c = cluster(true);
        let calls = Arc::new(Calls::default());
        let _ = c.node.set(calls.clone());
        let msg = |kind, net: &str| BanMessage {
            op: Op::Ban,
            node: "b".into(),
            kind,
            net: net.parse().unwrap(),
            port: Some(8443),
            ttl_ms: Some(5000),
            note: None,
            sent_us: 0,
        };
        for m in [
            msg(BanKind::Syn, "198.51.100.7/32"),
            msg(BanKind::Prefix, "203.0.113.0/24"),
        ] {
            c.apply(&m, m.ttl_ms, Arc::from("b"), None);
        }
        assert_eq!(
            *lock(&calls.0),
            [
                "box 198.51.100.7 Some(8443) 5000000000 muted=true",
                "prefix 203.0.113.0/24 Some(8443) 5000000000 muted=true",
            ]
        );
        assert!(!REMOTE.with(Cell::get), "unmuted after");
        assert_eq!(
            c.origin(BlockReason::PenaltyBoxed, "198.51.100.7", 8443),
            ("b".to_string(), Some(BanKind::Syn))
        );
        assert_eq!(
            c.origin(BlockReason::PenaltyBoxed, "203.0.113.0/24", 8443),
            ("b".to_string(), Some(BanKind::Prefix))
        );
        assert_eq!(
            c.origin(BlockReason::DynamicBlocked, "203.0.113.0/24", 8443),
            ("a".to_string(), None),
            "a received prefix box is not a blockIp entry"
        );
        // What the box listener reports while the remote ban is applied is not queued.
        c.boxed(
            8443,
            IpKey::new("198.51.100.7".parse().unwrap(), 64),
            1,
            false,
        );
        REMOTE.with(|r| r.set(true));
        c.boxed(
            8443,
            IpKey::new("198.51.100.8".parse().unwrap(), 64),
            1,
            false,
        );
        REMOTE.with(|r| r.set(false));
        assert_eq!(
            queued(&c),
            vec![(BanKind::Box, "198.51.100.7/32".into(), Some(8443), Some(1))]
        );
    }

    fn rejected(c: &Cluster) -> u64 {
        c.snapshot().rejected_messages
    }

    /// The ban channel: hostile messages are counted and change nothing, this node's own echo is
    /// silent (once), a forgery or a replay in its name is rejected, a valid one applies; one
    /// aggregated report.
    #[test]
    fn received_messages_are_checked_and_rejections_counted() {
        let c = cluster(true);
        let calls = Arc::new(Calls::default());
        let _ = c.node.set(calls.clone());
        let msg = |node: &str, kind: &str, net: &str| {
            format!(
                r#"{{"op":"ban","node":"{node}","kind":"{kind}","net":"{net}","port":8443,"ttlMs":5000,"sentUs":0}}"#
            )
        };
        c.receive(b"{");
        c.receive(msg("b", "prefix", "0.0.0.0/0").as_bytes());
        c.receive(msg("b", "block", "10.0.0.1/8").as_bytes());
        c.receive(&vec![b' '; MAX_MESSAGE_BYTES + 1]);
        assert_eq!(rejected(&c), 4);
        // This node's own message: silent when it published it (its echo), once.
        let own = msg("a", "block", "10.1.0.0/16");
        c.await_echo(own.as_bytes());
        c.receive(own.as_bytes());
        assert_eq!(rejected(&c), 4);
        c.receive(own.as_bytes());
        c.receive(msg("a", "block", "10.2.0.0/16").as_bytes());
        assert_eq!(rejected(&c), 6);
        assert!(lock(&calls.0).is_empty(), "nothing applied");
        assert_eq!(c.snapshot().bans_received, 0);
        c.receive(msg("b", "block", "10.3.0.0/16").as_bytes());
        assert_eq!(*lock(&calls.0), ["block 10.3.0.0/16"]);
        assert_eq!(
            c.origin(BlockReason::DynamicBlocked, "10.3.0.0/16", 8443).0,
            "b"
        );
        c.report_rejects();
        c.report_rejects();
        let calls = lock(&calls.0);
        assert_eq!(calls.len(), 2, "one report: {calls:?}");
        assert!(
            calls[1].starts_with(
                "rejected 6 ban message(s) from Redis rejected (metrics().cluster.rejectedMessages); \
                 the first: ban channel: not a ban message: EOF"
            ),
            "{}",
            calls[1]
        );
    }

    /// A load's ban keys: each must hold a valid ban written under its own name; this node's own
    /// keys are skipped silently, blocks are gathered for one write, the TTL is the key's PTTL.
    #[test]
    fn loaded_ban_keys_are_checked_against_their_names() {
        use redis::Value as V;
        let c = cluster(true);
        let calls = Arc::new(Calls::default());
        let _ = c.node.set(calls.clone());
        let mut blocks = Vec::new();
        let mut names = HashMap::new();
        let val = |node: &str, op: &str, net: &str| {
            V::BulkString(
                format!(
                    r#"{{"op":"{op}","node":"{node}","kind":"block","net":"{net}","port":null,"ttlMs":60000,"sentUs":0}}"#
                )
                .into_bytes(),
            )
        };
        let key = |net: &str| format!("rampart:{{bans}}:block:*:{net}").into_bytes();
        let mut load = |k: Vec<u8>, v: V, pttl: i64| {
            c.load_one(&k, &v, &V::Int(pttl), &mut blocks, &mut names)
        };
        load(key("10.0.0.0/8"), val("b", "ban", "10.1.0.0/16"), 5000); // another key's ban
        load(key("10.0.0.0/8"), val("b", "unban", "10.0.0.0/8"), 5000);
        load(key("10.0.0.0/8"), V::Array(vec![]), 5000); // not a string
        load(
            key("10.0.0.0/8"),
            V::BulkString(vec![b'{'; MAX_MESSAGE_BYTES + 1]),
            5000,
        );
        load(key("10.0.0.0/8"), val("b", "ban", "10.0.0.0/8"), -2); // gone: not a rejection
        load(key("10.0.0.0/8"), val("a", "ban", "10.0.0.0/8"), 5000); // our own
        assert_eq!(rejected(&c), 4);
        load(key("10.0.0.0/8"), val("b", "ban", "10.0.0.0/8"), 1234);
        load(key("10.9.0.0/16"), val("b", "ban", "10.9.0.0/16"), 77);
        assert_eq!(rejected(&c), 4);
        let got: Vec<(String, Option<u64>)> = blocks
            .iter()
            .map(|b| (b.net.to_string(), b.ttl_ms))
            .collect();
        assert_eq!(
            got,
            [
                ("10.0.0.0/8".to_string(), Some(1234)),
                ("10.9.0.0/16".to_string(), Some(77))
            ]
        );
        assert_eq!(names.len(), 1, "the origin's name is shared");
        assert!(
            lock(&calls.0).is_empty(),
            "gathered, not applied one by one"
        );
        c.flush_blocks(&mut blocks);
        assert!(blocks.is_empty());
        assert_eq!(*lock(&calls.0), ["block 10.0.0.0/8", "block 10.9.0.0/16"]);
        assert_eq!(c.snapshot().bans_received, 2);
    }
}
