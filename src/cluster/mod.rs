//! The cluster tier on Redis (ProxyConfig `cluster`, docs/cluster.md): bans that
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
//! - **ticket keys** (`shareTicketKeys`): the shared TLS session-ticket keys, created, rotated
//!   and read through one script ([`ticket_keys`]);
//! - **health**: a `PING` every [`HEALTH_MS`] so an outage is seen (and its end) without traffic;
//!   refreshes the TTL of this node's bans that have none ([`message::REFRESH_MS`]).
//!
//! Every command goes through the [`breaker`]: after `failures` failed or timed-out commands
//! Redis is not asked for `openMs`, `clusterRateLimit` is not applied (local limits alone) and one
//! `'error'` `cluster_unavailable` is emitted per outage.

pub(crate) mod breaker;
pub(crate) mod kernel;
pub(crate) mod message;

mod health;
mod loader;
mod publisher;
mod refiller;
mod subscriber;
pub mod ticket_keys;

use crate::clock::{self, ms_to_ns, ns_to_ms_ceil};
use crate::config::cluster::ClusterConfig;
use crate::config::proxy::ListenerId;
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
    /// `node` is the `nodeId` of the node the ban came from.
    fn apply_box(
        &self,
        ip: IpAddr,
        port: Option<u16>,
        remaining_ns: u64,
        now_ns: u64,
        node: &Arc<str>,
    );
    /// Puts the prefix `net` in the penalty box of the listeners on `port` (every listener when
    /// `None`) for `remaining_ns` from `now_ns`, as a local prefix box.
    /// `node` is the `nodeId` of the node the ban came from.
    fn apply_prefix_box(
        &self,
        net: IpNet,
        port: Option<u16>,
        remaining_ns: u64,
        now_ns: u64,
        node: &Arc<str>,
    );
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
    fn update_lease(&self, listener: ListenerId, key: IpKey, u: LeaseUpdate) -> u64;
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
    listener: ListenerId,
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
    ticket_key_updates: AtomicU64,
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
    /// Shared ticket-key sets read from Redis that changed this node's keys (`shareTicketKeys`:
    /// the first set, then one per rotation).
    pub ticket_key_updates: u64,
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
    ticket_keys: Option<Arc<crate::tls::tickets::SharedTicketKeys>>,
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
        let cfg_share_ticket_keys = cfg.share_ticket_keys;
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
            ticket_keys: cfg_share_ticket_keys.then(Default::default),
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
        if self.ticket_keys.is_some() {
            let me = self.clone();
            let s = stop.clone();
            tokio::spawn(async move { me.ticket_key_task(s).await });
        }
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

    // ---- operator actions (JS thread) ----

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
            d[i] as f64 / clock::US_PER_MS as f64
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
            ticket_key_updates: s.ticket_key_updates.load(Ordering::Relaxed),
            propagation_delay_ms: DelayStats {
                count: d.len() as u64,
                p50: pick(0.5),
                p99: pick(0.99),
                max: d
                    .last()
                    .map_or(0.0, |m| *m as f64 / clock::US_PER_MS as f64),
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

    // ---- tasks ----
}

#[cfg(test)]
mod tests;
