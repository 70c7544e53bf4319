//! The proxy instance: its tokio runtime, listeners, route table, engines and the operations the
//! JS API maps onto (`start`, `stop`, `updateConfig`, `blockedIps`, `blockIp`, `metrics`).
//!
//! Plain Rust: the napi layer only converts values and calls these methods.
//!
//! One method per JS operation on [`Proxy`], each short, in the order of the API table; what runs
//! beside them — the cluster tier's view of the proxy and the every-100-ms work (capacity
//! windows, kernel ban and known-good sync) — is in [`background`].

mod background;
mod bans;
mod metrics;
mod workers;

use crate::capacity::CapacityRegistry;
use crate::clock;
use crate::cluster::Cluster;
use crate::config::proxy::ListenerId;
use crate::config::proxy::ProxyConfig;
use crate::config::update::{BlockRequest, ConfigUpdate, UnblockRequest};
use crate::config::{ConfigError, ConfigIssue};
use crate::events::{DefenseEvent, EventHub, EventSink};
use crate::listener::bind_listener;
use crate::metrics::ListenerMetrics;
use crate::protection::{
    BanOrigin, BlockReason, BlockedEntry, BlockedIps, DynamicBlocks, DynamicRule, Engine,
    Explanation, Listed, ProtectionPolicy,
};
use crate::proxy::routes::RouteTable;
use crate::shared::{ListenerRt, Shared};
use crate::xdp::sync::{build_policy, map_sizes, BoxedClient, KnownGoodClient, XdpSlot};
use crate::xdp::{BanReason, XdpError, XdpManager, XdpMode, XdpStatus};
use arc_swap::ArcSwap;
use background::{
    push_bans, push_known_good, sample_cpu, share_kernel_bans, sync_dynamic, tick_capacities,
    ClusterPeer,
};
pub use background::{KERNEL_EXTENDED_NOTE, KERNEL_SYN_BAN_NOTE};
pub use metrics::ProxyMetrics;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use workers::{Lifetimes, Workers};

/// Entries examined per listener per eviction tick (every 100 ms).
pub const EVICTION_BUDGET: usize = 4096;

/// The period of the background work (eviction, defense mode, capacity, bans), ms.
const TICK_MS: u64 = 100;

/// Background ticks between two summaries of refused connections (one a second).
const SUMMARY_EVERY_TICKS: u64 = 10;

struct Running {
    /// This proxy's claims on its listening addresses (released once its sockets are closed).
    held: Vec<crate::listener::HeldAddr>,
    life: Lifetimes,
    workers: Workers,
}

/// One proxy: what `new RampartProxy(config)` creates. Its connections live on the workers
/// ([`workers`]); `rt` is the small runtime of the background work and of `stop`.
pub struct Proxy {
    rt: Option<tokio::runtime::Runtime>,
    shared: Arc<Shared>,
    worker_threads: usize,
    running: Mutex<Option<Running>>,
}

/// Error of `start()`: the OS error of the first listener that could not bind.
#[derive(Debug)]
pub struct StartError {
    /// Node-style code (`EADDRINUSE`, `EACCES`, `EADDRNOTAVAIL`, ...), or `ERR_RAMPART`.
    pub code: String,
    /// `listen EADDRINUSE: address already in use 127.0.0.1:8443`.
    pub message: String,
}

fn one_issue(path: &str, message: String) -> ConfigError {
    ConfigError::new(vec![ConfigIssue {
        path: path.into(),
        message,
    }])
}

/// What `explain(ip)` found ([`Proxy::explain`]).
#[derive(Debug, Clone)]
pub struct ExplainReport {
    /// Each listener's port and the engine's view of the client there.
    pub listeners: Vec<(u16, Explanation)>,
    /// Kernel bans covering the client: `(port, reason, remaining ns)`; `None` without XDP.
    pub kernel: Option<Vec<(u16, BanReason, u64)>>,
}

/// Why `attachXdp` failed.
#[derive(Debug)]
pub enum AttachError {
    /// A program is already attached (by this proxy) to the named interface.
    AlreadyAttached(String),
    /// Loading or attaching failed ([`XdpError`] names the cause).
    Xdp(XdpError),
    /// Attached, but writing the policy failed; the program was detached again.
    PolicySync(XdpError),
}

impl std::fmt::Display for AttachError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::AlreadyAttached(i) => {
                write!(f, "XDP is already attached to {i}; detachXdp() first")
            }
            Self::Xdp(e) => write!(f, "{e}"),
            Self::PolicySync(e) => write!(f, "XDP policy sync failed, detached again: {e}"),
        }
    }
}

impl std::error::Error for AttachError {}

fn errno_code(e: &std::io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::EADDRINUSE) => "EADDRINUSE",
        Some(libc::EADDRNOTAVAIL) => "EADDRNOTAVAIL",
        Some(libc::EACCES) => "EACCES",
        Some(libc::EPERM) => "EPERM",
        Some(libc::EINVAL) => "EINVAL",
        Some(libc::EMFILE) => "EMFILE",
        Some(libc::EAFNOSUPPORT) => "EAFNOSUPPORT",
        _ => "ERR_RAMPART_LISTEN",
    }
}

impl Proxy {
    /// Builds a proxy (no socket yet) with its background runtime (one thread; the connection
    /// workers start with the listeners).
    pub fn new(cfg: ProxyConfig, sink: EventSink) -> std::io::Result<Proxy> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("rampart-bg")
            .enable_all()
            .build()?;
        let dynamic = Arc::new(DynamicBlocks::new());
        let xdp = XdpSlot::default();
        let cluster = match cfg.cluster.clone() {
            Some(c) => Some(Cluster::new(c).map_err(std::io::Error::other)?),
            None => None,
        };
        let now = clock::now_ns();
        let ban_queue = Arc::new(crate::events::ban::BanQueue::default());
        let listeners = cfg
            .listeners
            .iter()
            .map(|lc| {
                let engine = Engine::new(lc.port, dynamic.clone());
                engine.set_policy(lc.protection.clone(), now);
                xdp.bans.listen(&engine);
                xdp.known_good.listen(&engine);
                bans::listen(&ban_queue, &engine, lc.port);
                if let Some(c) = &cluster {
                    c.listen(&engine);
                }
                ListenerRt {
                    label: lc.label(),
                    config: lc.clone(),
                    engine,
                    metrics: ListenerMetrics::default(),
                }
            })
            .collect();
        let route_metrics = crate::metrics::route::RouteRegistry::default();
        let tls_sessions = crate::tls::sessions::TlsCache::new(
            cluster.as_ref().and_then(|c| c.ticket_keys().cloned()),
        );
        let capacities = CapacityRegistry::new(cfg.overload.event_loop_delay_ms);
        let routes = RouteTable::build(
            &cfg.routes,
            &cfg.listeners,
            &route_metrics,
            &tls_sessions,
            &capacities,
        )
        .with_failing(cfg.failing_routes.clone());
        let shared = Arc::new(Shared {
            listeners,
            routes: ArcSwap::from_pointee(routes),
            dynamic,
            events: EventHub::new(sink, cfg.blocked_events_per_second),
            bans: ban_queue,
            xdp,
            socket: cfg.socket,
            route_defaults: cfg.route_defaults,
            route_metrics,
            tls_sessions,
            capacities,
            cluster,
            suspensions: crate::proxy::suspend::Suspensions::new(cfg.listeners.len()),
            isolate_routes: cfg.isolate_routes,
            route_failures: Default::default(),
        });
        // Queued for JS: delivered after the constructor returns, so a listener attached right
        // after `new RampartProxy()` hears them.
        shared.report_failing_routes(&cfg.failing_routes);
        Ok(Proxy {
            rt: Some(rt),
            shared,
            worker_threads: cfg.worker_threads,
            running: Mutex::new(None),
        })
    }

    fn rt(&self) -> &tokio::runtime::Runtime {
        self.rt
            .as_ref()
            .expect("runtime lives as long as the proxy")
    }

    /// The XDP slot (`None` when not attached). Never held across an await.
    fn xdp(&self) -> std::sync::MutexGuard<'_, Option<XdpManager>> {
        self.shared.xdp.lock()
    }

    /// Every listener's `(port, live policy)`, in listener order (for the kernel policy).
    fn live_policies(&self) -> Vec<(u16, Option<Arc<ProtectionPolicy>>)> {
        self.shared
            .listeners
            .iter()
            .map(|l| (l.config.port, l.engine.policy()))
            .collect()
    }

    /// Binds every listener (one SO_REUSEPORT socket per worker) and starts accepting. On any
    /// bind failure every socket already bound is closed and nothing runs.
    pub fn start(&self) -> Result<(), StartError> {
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        if running.is_some() {
            return Err(StartError {
                code: "ERR_RAMPART_STARTED".into(),
                message: "the proxy is already started".into(),
            });
        }
        let mut bound = Vec::new();
        let mut held = Vec::new();
        for (li, l) in self.shared.listeners.iter().enumerate() {
            let addr = SocketAddr::new(l.config.host, l.config.port);
            match bind_listener(addr, self.worker_threads) {
                Ok((socks, claim)) => {
                    bound.push((li, socks));
                    held.push(claim);
                }
                Err(e) => {
                    let code = errno_code(&e);
                    return Err(StartError {
                        code: code.into(),
                        message: format!("listen {code}: {e} {addr}"),
                    });
                }
            }
        }
        let _guard = self.rt().enter();
        let life = Lifetimes {
            accept_stop: CancellationToken::new(),
            accept_tasks: TaskTracker::new(),
            conn_cancel: CancellationToken::new(),
            conns: TaskTracker::new(),
            background: CancellationToken::new(),
        };
        // Worker i owns socket i of every listener.
        let mut per_worker: Vec<Vec<_>> = (0..self.worker_threads).map(|_| Vec::new()).collect();
        for (li, socks) in bound {
            for (w, s) in socks.into_iter().enumerate() {
                per_worker[w % self.worker_threads].push((ListenerId(li), s));
            }
        }
        let workers = Workers::start(&self.shared, per_worker, &life).map_err(|e| StartError {
            code: errno_code(&e).into(),
            message: format!("listen: {e}"),
        })?;
        let r = Running {
            held,
            life,
            workers,
        };
        self.spawn_background(&r.life.background);
        if let Some(c) = &self.shared.cluster {
            c.start(
                Arc::new(ClusterPeer(self.shared.clone())),
                r.life.background.clone(),
            );
        }
        *running = Some(r);
        Ok(())
    }

    fn spawn_background(&self, stop: &CancellationToken) {
        let shared = self.shared.clone();
        let stop1 = stop.clone();
        self.rt().spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(TICK_MS));
            let mut n = 0u64;
            let mut next_cpu_sample = 0u64;
            let mut ban_tracker = crate::events::ban::BanTracker::default();
            loop {
                tokio::select! {
                    _ = stop1.cancelled() => break,
                    _ = tick.tick() => {}
                }
                let now = clock::now_ns();
                sample_cpu(&shared, now, &mut next_cpu_sample);
                let overloaded = tick_capacities(&shared, now);
                for l in &shared.listeners {
                    l.engine.set_upstream_overloaded(overloaded);
                    l.engine.evict_tick(now, EVICTION_BUDGET);
                    if let Some(c) = l.engine.defense_tick(now) {
                        shared.events.defense(&DefenseEvent {
                            port: l.config.port,
                            listener: &l.label,
                            active: c.active,
                            rate: c.rate,
                            threshold: c.threshold,
                        });
                    }
                }
                let boxed = shared.xdp.bans.drain();
                let known_good = shared.xdp.known_good.drain();
                if let Some(mgr) = shared.xdp.lock().as_ref() {
                    push_bans(&shared, mgr, &boxed);
                    share_kernel_bans(&shared, mgr, now);
                    push_known_good(&shared, mgr, &known_good);
                    sync_dynamic(&shared, mgr, false);
                    bans::kernel_extensions(&shared, mgr, &ban_tracker, now);
                    if n.is_multiple_of(10) {
                        mgr.sweep(now);
                    }
                }
                bans::tick(&shared, &mut ban_tracker, now);
                n += 1;
                if n.is_multiple_of(SUMMARY_EVERY_TICKS) {
                    shared.events.flush_summary(TICK_MS * SUMMARY_EVERY_TICKS);
                }
            }
        });
    }

    /// The embedding process's event-loop delay (ms), measured now: above
    /// `overload.eventLoopDelayMs` every route counts as overloaded (docs/protection.md: Upstream
    /// capacity).
    pub fn report_event_loop_delay(&self, delay_ms: f64) {
        (self.shared.capacities).set_external_delay(delay_ms, clock::now_ns());
    }

    /// Stops accepting at once; after `drain_ms` closes the connections still open; returns when
    /// every socket is closed.
    pub fn stop(&self, drain_ms: u64) {
        let r = self
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let Some(Running {
            mut held,
            life,
            mut workers,
        }) = r
        else {
            return;
        };
        self.rt().block_on(async move {
            life.accept_stop.cancel();
            life.accept_tasks.close();
            life.accept_tasks.wait().await;
            // The listening sockets are closed: the addresses are no longer this proxy's.
            held.clear();
            life.conns.close();
            if drain_ms > 0 {
                let drained = life.conns.wait();
                let _ = tokio::time::timeout(Duration::from_millis(drain_ms), drained).await;
            }
            life.conn_cancel.cancel();
            life.conns.wait().await;
            life.background.cancel();
        });
        workers.end();
    }

    /// `updateConfig({ routes, protection })`, validated already ([`crate::config::update`]).
    /// With XDP attached the kernel's policy is staged into the idle map set and flipped first;
    /// if either fails the update throws and nothing changes. Then the routes and each
    /// listener's policy are swapped (pointer stores, which cannot fail).
    pub fn update_config(&self, mut u: ConfigUpdate) -> Result<(), ConfigError> {
        // A route whose certificate alone failed keeps the live one; routes given of which none
        // serves change nothing.
        if let Some(r) = u.routes.as_mut() {
            let live = self.shared.routes.load();
            r.carry_last_good(|sni| {
                let live = live.routes().iter().find(|l| l.config.sni == *sni)?;
                live.config.cert.clone()
            });
            if let Some(e) = r.all_failed() {
                return Err(e);
            }
        }
        let xdp = self.xdp();
        if let Some(mgr) = xdp.as_ref() {
            let mut live = self.live_policies();
            for p in &u.protection {
                for (port, policy) in live.iter_mut() {
                    if *port == p.port {
                        *policy = p.policy.clone();
                    }
                }
            }
            let flipped = mgr.stage(&build_policy(&live)).and_then(|()| mgr.commit());
            if let Err(e) = flipped {
                return Err(one_issue(
                    "protection",
                    format!("the XDP maps could not be updated, nothing changed: {e}"),
                ));
            }
        }
        if let Some(r) = u.routes {
            let listener_cfgs: Vec<_> = self
                .shared
                .listeners
                .iter()
                .map(|l| l.config.clone())
                .collect();
            let table = RouteTable::build(
                &r.routes,
                &listener_cfgs,
                &self.shared.route_metrics,
                &self.shared.tls_sessions,
                &self.shared.capacities,
            );
            self.shared.report_failing_routes(&r.failing);
            self.shared
                .routes
                .store(Arc::new(table.with_failing(r.failing)));
        }
        let now = clock::now_ns();
        for p in u.protection {
            for li in self.shared.listeners_on(p.port) {
                self.shared
                    .listener(li)
                    .engine
                    .set_policy(p.policy.clone(), now);
            }
        }
        Ok(())
    }

    /// `isolateRoutes` (what `updateConfig`'s routes are parsed with).
    pub fn isolate_routes(&self) -> bool {
        self.shared.isolate_routes
    }

    /// The proxy's defaults for a route's left-out fields (`udsSourceAddressHeader`), for the
    /// routes of `updateConfig` and `resolveConnection`.
    pub fn route_defaults(&self) -> crate::config::proxy::RouteDefaults {
        self.shared.route_defaults
    }

    /// The running listeners' configs (what `updateConfig`, `blockIp` and `unblockIp` are
    /// validated against).
    pub fn listener_configs(&self) -> Vec<crate::config::proxy::ListenerConfig> {
        self.shared
            .listeners
            .iter()
            .map(|l| l.config.clone())
            .collect()
    }

    /// `blockedIps({ port, detail })`: every listener's view (or those on `port`), plus the
    /// kernel's own SYN-limit bans under the port they were made for. A `port` no listener has is
    /// a ConfigError at `opts.port`.
    pub fn blocked_ips(&self, port: Option<u16>) -> Result<BlockedIps, ConfigError> {
        if let Some(p) = port.filter(|&p| !self.shared.listeners.iter().any(|l| l.config.port == p))
        {
            return Err(one_issue("opts.port", format!("no listener on port {p}")));
        }
        let now = clock::now_ns();
        let mut out = BlockedIps::default();
        for l in self.shared.listeners_for(port) {
            out.add(l.config.port, l.engine.blocked(now));
        }
        if let Some(mgr) = self.xdp().as_ref() {
            for b in mgr.bans() {
                // Userspace boxes and blockIp entries are listed from the engines already; a
                // box the kernel extended past its userspace deadline is listed from here.
                if b.deadline_ns <= now
                    || b.reason == BanReason::Dynamic
                    || port.is_some_and(|p| p != b.port)
                {
                    continue;
                }
                let ip = b.display();
                if out
                    .penalty_boxed
                    .iter()
                    .any(|x| x.entry.ip == ip && x.port == b.port)
                {
                    continue;
                }
                out.penalty_boxed.push(Listed {
                    entry: BlockedEntry {
                        ip,
                        reason: BlockReason::PenaltyBoxed,
                        remaining_ms: Some(clock::ns_to_ms_ceil(b.deadline_ns - now)),
                        note: Some(
                            if b.reason == BanReason::SynFlood {
                                KERNEL_SYN_BAN_NOTE
                            } else {
                                KERNEL_EXTENDED_NOTE
                            }
                            .to_string(),
                        ),
                    },
                    port: b.port,
                });
            }
        }
        out.finish();
        Ok(out)
    }

    /// `blockIp(cidr, { ttlMs, reason, port })`, validated already: the engine's set, then
    /// the kernel's trie derived from it (a failed kernel write is counted and emitted as
    /// `'error'`; userspace enforces the block either way).
    pub fn block_ip(&self, req: BlockRequest) {
        let now = clock::now_ns();
        if let Some(c) = &self.shared.cluster {
            c.blocked(req.net, req.port, req.ttl_ms, req.reason.clone());
        }
        bans::block_changed(
            &self.shared,
            req.net,
            req.port,
            req.ttl_ms,
            req.reason.as_deref(),
            BanOrigin::Operator,
            false,
        );
        self.shared
            .dynamic
            .block(req.net, req.ttl_ms, req.reason, req.port, now);
        if let Some(mgr) = self.xdp().as_ref() {
            sync_dynamic(&self.shared, mgr, true);
        }
    }

    /// `explain(ip)`: `ip`'s state on every listener ([`Engine::explain`], by port) and the
    /// kernel's bans covering it (`(port, reason, remaining ns)`), at the CLOCK_MONOTONIC ns
    /// returned with them.
    pub fn explain(&self, ip: IpAddr) -> ExplainReport {
        let ip = ip.to_canonical();
        let now = clock::now_ns();
        let listeners = self
            .shared
            .listeners
            .iter()
            .map(|l| (l.config.port, l.engine.explain(ip, now)))
            .collect();
        let kernel = self.xdp().as_ref().map(|mgr| {
            mgr.bans()
                .into_iter()
                .filter(|b| b.deadline_ns > now)
                .filter(|b| {
                    ipnet::IpNet::new(b.ip, b.prefix_len).is_ok_and(|n| n.trunc().contains(&ip))
                })
                .map(|b| (b.port, b.reason, b.deadline_ns - now))
                .collect()
        });
        ExplainReport { listeners, kernel }
    }

    /// `dynamicBlocks()`: every live `blockIp` entry exactly as held (canonical network, port
    /// scope, expiry, reason), sorted by network then port, with the CLOCK_MONOTONIC ns it was
    /// read at (to turn expiries into remaining times).
    pub fn dynamic_blocks(&self) -> (u64, Vec<DynamicRule>) {
        let now = clock::now_ns();
        let mut rules = self.shared.dynamic.rules(None, now);
        rules.sort_by_key(|r| (r.net, r.port));
        (now, rules)
    }

    /// `unblockIp(cidr, { port })`, validated already: true when an entry was removed.
    pub fn unblock_ip(&self, req: UnblockRequest) -> bool {
        let removed = self.shared.dynamic.unblock(req.net, req.port);
        if removed {
            bans::block_changed(
                &self.shared,
                req.net,
                req.port,
                None,
                None,
                BanOrigin::Operator,
                true,
            );
        }
        if let Some(c) = &self.shared.cluster {
            c.unblocked(req.net, req.port);
        }
        if let Some(mgr) = self.xdp().as_ref() {
            sync_dynamic(&self.shared, mgr, true);
        }
        removed
    }

    /// `attachXdp({ interface, mode })`: loads and attaches the XDP program, then syncs the
    /// policy of every listener, every `blockIp` entry and every client already boxed. Blocking
    /// (~100 ms); call it off the JS thread.
    pub fn attach_xdp(&self, interface: &str, mode: XdpMode) -> Result<XdpStatus, AttachError> {
        let mut slot = self.xdp();
        if let Some(m) = slot.as_ref() {
            return Err(AttachError::AlreadyAttached(m.status().interface));
        }
        let sizes = map_sizes(&self.live_policies());
        let mgr = XdpManager::attach(interface, mode, sizes).map_err(AttachError::Xdp)?;
        if let Err(e) = mgr.apply(&build_policy(&self.live_policies())) {
            if let Err(d) = mgr.detach() {
                self.shared
                    .report_xdp_failure("detach after a failed attach", &d);
            }
            return Err(AttachError::PolicySync(e));
        }
        sync_dynamic(&self.shared, &mgr, true);
        let now = clock::now_ns();
        let mut boxed = Vec::new();
        for l in &self.shared.listeners {
            boxed.extend(
                l.engine
                    .boxed(now)
                    .into_iter()
                    .map(|(k, d, prefix)| BoxedClient {
                        ip: k.addr(),
                        port: l.config.port,
                        deadline_ns: d,
                        prefix,
                        net: k.to_ipnet(),
                    }),
            );
        }
        push_bans(&self.shared, &mgr, &boxed);
        // Clients already known-good pass the SYN budget from the first packet, not from their
        // next mark refresh (up to half a knownGoodTtlMs later).
        let mut known_good = Vec::new();
        for l in &self.shared.listeners {
            known_good.extend(l.engine.known_good_marks(now).into_iter().map(|(k, d)| {
                KnownGoodClient {
                    ip: k.addr(),
                    port: l.config.port,
                    deadline_ns: d,
                }
            }));
        }
        push_known_good(&self.shared, &mgr, &known_good);
        let st = self.status_of(&mgr);
        *slot = Some(mgr);
        Ok(st)
    }

    /// `detachXdp()`: removes the program and its pinned maps (no-op when not attached).
    pub fn detach_xdp(&self) -> Result<(), XdpError> {
        let mgr = self.xdp().take();
        match mgr {
            Some(m) => m.detach(),
            None => Ok(()),
        }
    }

    /// `xdpStatus()`.
    pub fn xdp_status(&self) -> XdpStatus {
        match self.xdp().as_ref() {
            Some(m) => self.status_of(m),
            None => XdpStatus::not_attached(),
        }
    }

    fn status_of(&self, mgr: &XdpManager) -> XdpStatus {
        let mut st = mgr.status();
        st.errors = self.shared.xdp.errors.load(Ordering::Relaxed);
        st.ban_queue_overflow = self.shared.xdp.bans.overflow.load(Ordering::Relaxed);
        st.known_good_queue_overflow = self.shared.xdp.known_good.overflow.load(Ordering::Relaxed);
        st.known_good_mirrored = self.shared.xdp.known_good_mirrored.load(Ordering::Relaxed);
        st
    }

    /// `metrics()`.
    pub fn metrics(&self) -> ProxyMetrics {
        let xdp = self.xdp().as_ref().map(|mgr| self.status_of(mgr));
        metrics::read(&self.shared, xdp)
    }

    /// `prometheus()`: text exposition format 0.0.4 of [`Self::metrics`].
    ///
    /// # Errors
    /// When the snapshot does not serialise to JSON (none does: its maps have string keys).
    pub fn prometheus(&self) -> Result<String, serde_json::Error> {
        crate::metrics::prometheus(&self.metrics())
    }

    /// The listener of the suspended connection `id` (what its `resolveConnection` route is
    /// validated against); `None` when `id` is not held (unknown, expired or resolved).
    pub fn suspended_listener(&self, id: u64) -> Option<crate::config::proxy::ListenerConfig> {
        let li = self.shared.suspensions.listener_of(id)?;
        Some(self.shared.listener(li).config.clone())
    }

    /// `resolveConnection(id, route | null)` with the route validated: hands the decision to
    /// the held connection `id`; false when `id` is not held (then nothing happens).
    pub fn resolve_connection(&self, id: u64, r: crate::proxy::suspend::Resolution) -> bool {
        self.shared.suspensions.resolve(id, r)
    }

    /// The cluster tier, if configured (for `blockedIps({ detail: true }).node`).
    pub fn cluster(&self) -> Option<&Arc<Cluster>> {
        self.shared.cluster.as_ref()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(r) = self.running.get_mut().ok().and_then(|r| r.take()) {
            r.life.accept_stop.cancel();
            r.life.conn_cancel.cancel();
            r.life.background.cancel();
        }
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}
