//! The proxy instance: its tokio runtime, listeners, route table, engines and the operations the
//! JS API maps onto (`start`, `stop`, `updateConfig`, `blockedIps`, `blockIp`, `metrics`).
//!
//! Plain Rust: the napi layer only converts values and calls these methods.

use crate::clock;
use crate::config::error::Issues;
use crate::config::proxy::{parse_routes, ListenerConfig, ProxyConfig};
use crate::config::value::{self as v, field};
use crate::config::ConfigError;
use crate::events::{BlockedEvent, ErrorEvent, EventHub, EventSink};
use crate::listener::{accept_loop, bind_listener};
use crate::metrics::{ErrorReason, ListenerMetrics, ListenerSnapshot, MetricsSnapshot};
use crate::protection::{
    parse_protection, BlockReason, BlockedEntry, DynamicBlocks, Engine, ProtectionPolicy,
};
use crate::proxy::routes::RouteTable;
use crate::xdp::{XdpManager, XdpMode, XdpStatus};
use crate::xdp_sync::{build_policy, dynamic_block, push_bans, BanQueue};
use arc_swap::ArcSwap;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Entries examined per listener per eviction tick (every 100 ms).
pub const EVICTION_BUDGET: usize = 4096;

/// Runtime state of one listener.
pub struct ListenerRt {
    /// Config (the protection field is only the initial policy; the engine holds the live one).
    pub config: ListenerConfig,
    /// `host:port`.
    pub label: String,
    /// Protection engine (always present; with no policy only dynamic blocks apply).
    pub engine: Engine,
    /// Counters.
    pub metrics: ListenerMetrics,
}

/// State shared by every task of one proxy.
pub struct Shared {
    /// Listeners, in config order.
    pub listeners: Vec<ListenerRt>,
    /// Live route table; swapped whole by `updateConfig`.
    pub routes: ArcSwap<RouteTable>,
    /// `blockIp` entries.
    pub dynamic: Arc<DynamicBlocks>,
    /// Events.
    pub events: EventHub,
    /// The XDP filter, when attached.
    pub xdp: Mutex<Option<XdpManager>>,
    /// Penalty boxes waiting to be mirrored as kernel bans.
    pub bans: Arc<BanQueue>,
}

impl Shared {
    /// Counts and reports one refusal (or observe-mode decision).
    #[allow(clippy::too_many_arguments)]
    pub fn report_block(
        &self,
        li: usize,
        ip: IpAddr,
        reason: BlockReason,
        observed: bool,
        ja3: &str,
        ja4: &str,
        now_ns: u64,
    ) {
        let l = &self.listeners[li];
        l.metrics.blocked(reason);
        let ev = BlockedEvent {
            ip,
            port: l.config.port,
            listener: &l.label,
            reason: reason.as_str(),
            ja3,
            ja4,
            observed,
        };
        self.events.blocked(&ev, ip, reason, now_ns);
    }

    /// Reports a runtime error as an `'error'` event (already counted by the caller).
    pub fn report_error(&self, li: usize, ip: Option<IpAddr>, code: ErrorReason, message: String) {
        let l = &self.listeners[li];
        let ev = ErrorEvent {
            code: code.as_str(),
            message,
            ip: ip.map(|i| i.to_string()),
            port: l.config.port,
            listener: &l.label,
        };
        self.events.error(&ev, clock::now_ns());
    }

    fn listener_index(&self, port: u16) -> Option<usize> {
        self.listeners.iter().position(|l| l.config.port == port)
    }
}

struct Running {
    accept_stop: CancellationToken,
    accept_tasks: TaskTracker,
    conn_cancel: CancellationToken,
    conns: TaskTracker,
    background: CancellationToken,
}

/// One proxy: what `new RampartProxy(config)` creates.
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
    ConfigError::new(vec![crate::config::ConfigIssue {
        path: path.into(),
        message,
    }])
}

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
    /// Builds a proxy (no socket yet) with its own multi-thread tokio runtime.
    pub fn new(cfg: ProxyConfig, sink: EventSink) -> std::io::Result<Proxy> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(cfg.worker_threads)
            .thread_name("rampart-worker")
            .enable_all()
            .build()?;
        let dynamic = Arc::new(DynamicBlocks::new());
        let bans = Arc::new(BanQueue::default());
        let now = clock::now_ns();
        let listeners = cfg
            .listeners
            .iter()
            .map(|lc| {
                let engine = Engine::new(lc.port, dynamic.clone());
                engine.set_policy(lc.protection.clone(), now);
                bans.listen(&engine);
                ListenerRt {
                    label: lc.label(),
                    config: lc.clone(),
                    engine,
                    metrics: ListenerMetrics::default(),
                }
            })
            .collect();
        let routes = RouteTable::build(&cfg.routes, &cfg.listeners);
        let shared = Arc::new(Shared {
            listeners,
            routes: ArcSwap::from_pointee(routes),
            dynamic,
            events: EventHub::new(sink, cfg.blocked_events_per_second),
            xdp: Mutex::new(None),
            bans,
        });
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
        self.shared.xdp.lock().unwrap_or_else(|e| e.into_inner())
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
        for (li, l) in self.shared.listeners.iter().enumerate() {
            let addr = SocketAddr::new(l.config.host, l.config.port);
            match bind_listener(addr, self.worker_threads) {
                Ok(socks) => bound.push((li, socks)),
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
        let r = Running {
            accept_stop: CancellationToken::new(),
            accept_tasks: TaskTracker::new(),
            conn_cancel: CancellationToken::new(),
            conns: TaskTracker::new(),
            background: CancellationToken::new(),
        };
        let mut listeners = Vec::new();
        for (li, socks) in bound {
            for s in socks {
                match tokio::net::TcpListener::from_std(s) {
                    Ok(t) => listeners.push((li, t)),
                    Err(e) => {
                        return Err(StartError {
                            code: errno_code(&e).into(),
                            message: format!("listen: {e}"),
                        })
                    }
                }
            }
        }
        for (li, t) in listeners {
            r.accept_tasks.spawn(accept_loop(
                self.shared.clone(),
                li,
                t,
                r.accept_stop.clone(),
                r.conns.clone(),
                r.conn_cancel.clone(),
            ));
        }
        self.spawn_background(&r.background);
        *running = Some(r);
        Ok(())
    }

    fn spawn_background(&self, stop: &CancellationToken) {
        let shared = self.shared.clone();
        let stop1 = stop.clone();
        self.rt().spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            let mut n = 0u64;
            loop {
                tokio::select! {
                    _ = stop1.cancelled() => break,
                    _ = tick.tick() => {}
                }
                let now = clock::now_ns();
                for l in &shared.listeners {
                    l.engine.evict_tick(now, EVICTION_BUDGET);
                }
                let boxed = shared.bans.drain();
                if let Ok(guard) = shared.xdp.lock() {
                    if let Some(mgr) = guard.as_ref() {
                        push_bans(mgr, &boxed);
                        if n.is_multiple_of(10) {
                            mgr.sweep(now);
                        }
                    }
                }
                n += 1;
                if n.is_multiple_of(10) {
                    shared.events.flush_summary(1000);
                }
            }
        });
    }

    /// Stops accepting at once; after `drain_ms` closes the connections still open; returns when
    /// every socket is closed.
    pub fn stop(&self, drain_ms: u64) {
        let r = self
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let Some(r) = r else { return };
        self.rt().block_on(async move {
            r.accept_stop.cancel();
            r.accept_tasks.close();
            r.accept_tasks.wait().await;
            r.conns.close();
            if drain_ms > 0 {
                let _ = tokio::time::timeout(Duration::from_millis(drain_ms), r.conns.wait()).await;
            }
            r.conn_cancel.cancel();
            r.conns.wait().await;
            r.background.cancel();
        });
    }

    /// `updateConfig({ routes, protection })`: validates everything, then swaps (routes first,
    /// then each listener's policy). On error nothing changes.
    pub fn update_config(&self, u: &Value) -> Result<(), ConfigError> {
        let mut issues = Issues::default();
        let Some(obj) = v::object(u, "update", &mut issues) else {
            return Err(ConfigError::new(issues.0));
        };
        v::reject_unknown(obj, &["routes", "protection"], "", &mut issues);
        let listener_cfgs: Vec<ListenerConfig> = self
            .shared
            .listeners
            .iter()
            .map(|l| l.config.clone())
            .collect();
        let routes = field(obj, "routes")
            .and_then(|r| parse_routes(r, "routes", &listener_cfgs, &mut issues));
        let mut policies: Vec<(usize, Option<Arc<ProtectionPolicy>>)> = Vec::new();
        if let Some(p) = field(obj, "protection") {
            if let Some(arr) = v::array(p, "protection", &mut issues) {
                for (i, item) in arr.iter().enumerate() {
                    let path = v::index("protection", i);
                    let Some(o) = v::object(item, &path, &mut issues) else {
                        continue;
                    };
                    v::reject_unknown(o, &["port", "protection"], &path, &mut issues);
                    let port_path = v::join(&path, "port");
                    let li = match field(o, "port") {
                        Some(pv) => v::number_in(pv, &port_path, 1.0, 65535.0, true, &mut issues)
                            .and_then(|port| {
                                let li = self.shared.listener_index(port as u16);
                                if li.is_none() {
                                    let known: Vec<String> = self
                                        .shared
                                        .listeners
                                        .iter()
                                        .map(|l| l.config.port.to_string())
                                        .collect();
                                    issues.push(
                                        &port_path,
                                        format!(
                                            "no listener on port {port}; listeners: {}",
                                            known.join(", ")
                                        ),
                                    );
                                }
                                li
                            }),
                        None => {
                            issues.push(&port_path, "is required");
                            None
                        }
                    };
                    let pol_path = v::join(&path, "protection");
                    let policy = match o.get("protection") {
                        None => {
                            issues.push(&pol_path, "is required (null removes protection)");
                            continue;
                        }
                        Some(Value::Null) => None,
                        Some(pv) => match parse_protection(pv, &pol_path, &mut issues) {
                            Some(p) => Some(Arc::new(p)),
                            None => continue,
                        },
                    };
                    if let Some(li) = li {
                        if policies.iter().any(|(x, _)| *x == li) {
                            issues.push(&port_path, "the same port appears twice in this update");
                        }
                        policies.push((li, policy));
                    }
                }
            }
        }
        issues.finish(())?;
        let xdp = self.xdp();
        if let Some(mgr) = xdp.as_ref() {
            let mut live: Vec<(u16, Option<Arc<ProtectionPolicy>>)> = self
                .shared
                .listeners
                .iter()
                .map(|l| (l.config.port, l.engine.policy()))
                .collect();
            for (li, p) in &policies {
                live[*li].1 = p.clone();
            }
            if let Err(e) = mgr.stage(&build_policy(&live)) {
                return Err(one_issue(
                    "protection",
                    format!("the XDP maps could not be updated, nothing changed: {e}"),
                ));
            }
        }
        if let Some(r) = routes {
            self.shared
                .routes
                .store(Arc::new(RouteTable::build(&r, &listener_cfgs)));
        }
        let now = clock::now_ns();
        for (li, p) in policies {
            self.shared.listeners[li].engine.set_policy(p, now);
        }
        if let Some(mgr) = xdp.as_ref() {
            // The staged set was fully written; the flip is a single index store.
            let _ = mgr.commit();
        }
        Ok(())
    }

    /// `blockedIps({ port, detail })` as JSON.
    pub fn blocked_ips(&self, port: Option<u16>, detail: bool) -> Value {
        let now = clock::now_ns();
        type Lists = [(&'static str, Vec<(u16, BlockedEntry)>); 5];
        let mut lists: Lists = [
            ("rateLimited", vec![]),
            ("concurrencyLimited", vec![]),
            ("cidrBlocklist", vec![]),
            ("penaltyBoxed", vec![]),
            ("dynamicBlocklist", vec![]),
        ];
        for l in &self.shared.listeners {
            if port.is_some_and(|p| p != l.config.port) {
                continue;
            }
            let b = l.engine.blocked(now);
            let p = l.config.port;
            lists[0]
                .1
                .extend(b.rate_limited.into_iter().map(|e| (p, e)));
            lists[1]
                .1
                .extend(b.concurrency_limited.into_iter().map(|e| (p, e)));
            lists[2]
                .1
                .extend(b.cidr_blocklist.into_iter().map(|e| (p, e)));
            lists[3]
                .1
                .extend(b.penalty_boxed.into_iter().map(|e| (p, e)));
            lists[4]
                .1
                .extend(b.dynamic_blocklist.into_iter().map(|e| (p, e)));
        }
        if let Some(mgr) = self.xdp().as_ref() {
            for b in mgr.bans() {
                if b.deadline_ns <= now {
                    continue;
                }
                let reason = match b.reason {
                    crate::xdp::BanReason::SynFlood => BlockReason::XdpDropped,
                    crate::xdp::BanReason::Dynamic => BlockReason::DynamicBlocked,
                    crate::xdp::BanReason::Penalty => BlockReason::PenaltyBoxed,
                };
                if reason == BlockReason::DynamicBlocked {
                    continue; // already listed from the userspace dynamic blocks
                }
                let ip = b.display();
                let port_of = self
                    .shared
                    .listeners
                    .first()
                    .map(|l| l.config.port)
                    .unwrap_or(0);
                if lists[3].1.iter().any(|(_, e)| e.ip == ip) {
                    continue;
                }
                lists[3].1.push((
                    port_of,
                    BlockedEntry {
                        ip,
                        reason,
                        remaining_ms: Some((b.deadline_ns - now).div_ceil(1_000_000)),
                        note: None,
                    },
                ));
            }
        }
        let mut out = serde_json::Map::new();
        for (name, entries) in lists {
            let v = if detail {
                let mut items: Vec<(String, u16, Value)> = entries
                    .into_iter()
                    .map(|(p, e)| {
                        let mut o = json!({ "ip": e.ip, "port": p, "reason": e.reason.as_str() });
                        if let Some(ms) = e.remaining_ms {
                            o["remainingMs"] = json!(ms);
                        }
                        if let Some(note) = &e.note {
                            o["note"] = json!(note);
                        }
                        (e.ip, p, o)
                    })
                    .collect();
                items.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
                items.dedup_by(|a, b| a.0 == b.0 && a.1 == b.1 && a.2["reason"] == b.2["reason"]);
                Value::Array(items.into_iter().map(|x| x.2).collect())
            } else {
                let set: std::collections::BTreeSet<String> =
                    entries.into_iter().map(|(_, e)| e.ip).collect();
                json!(set.into_iter().collect::<Vec<_>>())
            };
            out.insert(name.into(), v);
        }
        Value::Object(out)
    }

    /// `blockIp(cidr, { ttlMs, reason, port })`.
    pub fn block_ip(&self, cidr: &str, opts: &Value) -> Result<(), ConfigError> {
        let mut issues = Issues::default();
        let (ttl, reason, port) = self.parse_block_opts(opts, true, &mut issues);
        issues.finish(())?;
        let now = clock::now_ns();
        let net = self
            .shared
            .dynamic
            .block(cidr, ttl, reason, port, now)
            .map_err(|m| one_issue("cidr", m))?;
        if let Some(mgr) = self.xdp().as_ref() {
            let deadline = ttl.map(|ms| now.saturating_add(ms.saturating_mul(1_000_000)));
            let _ = mgr.block_dynamic(&dynamic_block(net, port, deadline));
        }
        Ok(())
    }

    /// `unblockIp(cidr, { port })`: true when an entry was removed.
    pub fn unblock_ip(&self, cidr: &str, opts: &Value) -> Result<bool, ConfigError> {
        let mut issues = Issues::default();
        let (_, _, port) = self.parse_block_opts(opts, false, &mut issues);
        issues.finish(())?;
        let removed = self
            .shared
            .dynamic
            .unblock(cidr, port)
            .map_err(|m| one_issue("cidr", m))?;
        if let Some(mgr) = self.xdp().as_ref() {
            if let Ok(net) = crate::protection::parse_cidr(cidr) {
                let _ = mgr.unblock_dynamic(net, port);
            }
        }
        Ok(removed)
    }

    /// `attachXdp({ interface, mode })`: loads and attaches the XDP program, then syncs the
    /// policy of every listener, every `blockIp` entry and every IP already boxed. Blocking
    /// (~100 ms); call it off the JS thread.
    pub fn attach_xdp(&self, interface: &str, mode: XdpMode) -> Result<XdpStatus, String> {
        let mut slot = self.xdp();
        if let Some(m) = slot.as_ref() {
            return Err(format!(
                "XDP is already attached to {}; detachXdp() first",
                m.status().interface
            ));
        }
        let mgr = XdpManager::attach(interface, mode).map_err(|e| e.to_string())?;
        let live: Vec<(u16, Option<Arc<ProtectionPolicy>>)> = self
            .shared
            .listeners
            .iter()
            .map(|l| (l.config.port, l.engine.policy()))
            .collect();
        if let Err(e) = mgr.apply(&build_policy(&live)) {
            let _ = mgr.detach();
            return Err(format!("XDP policy sync failed, detached again: {e}"));
        }
        let now = clock::now_ns();
        let blocks: Vec<_> = self
            .shared
            .dynamic
            .rules(None, now)
            .into_iter()
            .map(|r| dynamic_block(r.net, r.port, r.expires_ns))
            .collect();
        let _ = mgr.set_dynamic(&blocks);
        let mut boxed = Vec::new();
        for l in &self.shared.listeners {
            boxed.extend(l.engine.boxed(now).into_iter().map(|(k, d)| (k.addr(), d)));
        }
        push_bans(&mgr, &boxed);
        let st = mgr.status();
        *slot = Some(mgr);
        Ok(st)
    }

    /// `detachXdp()`: removes the program and its pinned maps (no-op when not attached).
    pub fn detach_xdp(&self) -> Result<(), String> {
        let mgr = self.xdp().take();
        match mgr {
            Some(m) => m.detach().map_err(|e| e.to_string()),
            None => Ok(()),
        }
    }

    /// `xdpStatus()`.
    pub fn xdp_status(&self) -> XdpStatus {
        match self.xdp().as_ref() {
            Some(m) => m.status(),
            None => XdpStatus::not_attached(),
        }
    }

    fn parse_block_opts(
        &self,
        opts: &Value,
        full: bool,
        issues: &mut Issues,
    ) -> (Option<u64>, Option<String>, Option<u16>) {
        if opts.is_null() {
            return (None, None, None);
        }
        let Some(o) = v::object(opts, "opts", issues) else {
            return (None, None, None);
        };
        let known: &[&str] = if full {
            &["ttlMs", "reason", "port"]
        } else {
            &["port"]
        };
        v::reject_unknown(o, known, "opts", issues);
        let ttl = field(o, "ttlMs").and_then(|t| v::duration_ms(t, "opts.ttlMs", 1, issues));
        let reason = field(o, "reason")
            .and_then(|r| v::string(r, "opts.reason", issues))
            .map(|s| s.chars().take(200).collect());
        let port = field(o, "port").and_then(|p| {
            let port = v::number_in(p, "opts.port", 1.0, 65535.0, true, issues)? as u16;
            if self.shared.listener_index(port).is_none() {
                issues.push("opts.port", format!("no listener on port {port}"));
                return None;
            }
            Some(port)
        });
        (ttl, reason, port)
    }

    /// `metrics()`.
    pub fn metrics(&self) -> MetricsSnapshot {
        let ls = self
            .shared
            .listeners
            .iter()
            .map(|l| {
                ListenerSnapshot::read(
                    l.label.clone(),
                    l.config.port,
                    &l.metrics,
                    l.engine.tracked_ips() as u64,
                )
            })
            .collect();
        let mut m = MetricsSnapshot::from_listeners(ls, self.shared.events.dropped());
        if let Some(mgr) = self.xdp().as_ref() {
            m.xdp = Some(crate::xdp_sync::status_json(&mgr.status()));
        }
        m
    }

    /// Ports of the listeners, in config order.
    pub fn ports(&self) -> Vec<u16> {
        self.shared
            .listeners
            .iter()
            .map(|l| l.config.port)
            .collect()
    }

    /// Per-reason counts by listener (for tests and dashboards).
    pub fn blocked_by_reason(&self) -> BTreeMap<u16, BTreeMap<&'static str, u64>> {
        self.metrics()
            .listeners
            .into_iter()
            .map(|l| (l.port, l.blocked_by_reason))
            .collect()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(r) = self.running.get_mut().ok().and_then(|r| r.take()) {
            r.accept_stop.cancel();
            r.conn_cancel.cancel();
            r.background.cancel();
        }
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}
