//! The state every task of one proxy shares: listeners (config, engine, counters), the live
//! route table, the `blockIp` set, the event hub and the XDP slot, and the one place refusals and
//! runtime errors are counted and reported.
//!
//! [`crate::server::Proxy`] builds it and drives its lifecycle; the accept loops and connection
//! tasks ([`crate::listener`]) read it. Nothing here waits on I/O.

use crate::clock;
use crate::config::proxy::ListenerConfig;
use crate::config::proxy::ListenerId;
use crate::config::socket::SocketOptions;
use crate::events::{BlockedEvent, ErrorEvent, EventHub};
use crate::http2::Violation;
use crate::metrics::{ErrorReason, ListenerMetrics};
use crate::protection::{DynamicBlocks, Engine, Verdict};
use crate::proxy::routes::RouteTable;
use crate::xdp::sync::XdpSlot;
use arc_swap::ArcSwap;
use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Code of the `'error'` event of a route that failed to build.
pub(crate) const ROUTE_FAILED: &str = "route_failed";

/// Runtime state of one listener.
pub(crate) struct ListenerRt {
    /// Config (the protection field is only the initial policy; the engine holds the live one).
    pub config: ListenerConfig,
    /// `host:port` (`[::]:8443` for IPv6), as events and metrics label it.
    pub label: String,
    /// Protection engine (always present; with no policy only dynamic blocks apply).
    pub engine: Engine,
    /// Counters.
    pub metrics: ListenerMetrics,
}

/// State shared by every task of one proxy.
pub(crate) struct Shared {
    /// Listeners, in config order (a listener is named by its index).
    pub listeners: Vec<ListenerRt>,
    /// Live route table; swapped whole by `updateConfig`.
    pub routes: ArcSwap<RouteTable>,
    /// `blockIp` entries: the one set every engine reads and the kernel's map derives from.
    pub dynamic: Arc<DynamicBlocks>,
    /// Events.
    pub events: EventHub,
    /// Ban changes waiting for the background tick (`'ban'` events).
    pub bans: Arc<crate::events::ban::BanQueue>,
    /// The XDP filter (when attached), its ban queue and its failure count.
    pub xdp: XdpSlot,
    /// `tcpKeepalive`, `halfCloseTimeoutMs`, copy buffer sizes (fixed for the proxy's life).
    pub socket: SocketOptions,
    /// `udsSourceAddressHeader` (fixed for the proxy's life): what `updateConfig` and
    /// `resolveConnection` routes get when they leave a field out.
    pub route_defaults: crate::config::proxy::RouteDefaults,
    /// Per-route counters by name and group, kept across route-table swaps.
    pub route_metrics: crate::metrics::route::RouteRegistry,
    /// TLS resumption state (session caches, ticket keys) kept across route-table swaps.
    pub tls_sessions: crate::tls::sessions::TlsCache,
    /// Per-route upstream capacity by name, kept across route-table swaps.
    pub capacities: crate::capacity::CapacityRegistry,
    /// The cluster tier on Redis (ProxyConfig `cluster`), if configured.
    pub cluster: Option<Arc<crate::cluster::Cluster>>,
    /// Connections of suspended routes waiting for `resolveConnection`.
    pub suspensions: crate::proxy::suspend::Suspensions,
    /// `isolateRoutes`: a route that fails to build is dropped and reported, not the config.
    pub isolate_routes: bool,
    /// Routes that failed to build since the proxy was created, each counted once per build
    /// (`rampart_route_failures_total`).
    pub route_failures: std::sync::atomic::AtomicU64,
}

impl Shared {
    /// The listener `li`.
    pub(crate) fn listener(&self, li: ListenerId) -> &ListenerRt {
        &self.listeners[li.0]
    }

    /// Counts and reports one refusal (or observe-mode decision) on listener `li`, with the
    /// connection's JA3/JA4 (`""` when the ClientHello was not read) and, for `h2_flood`, the
    /// limit the client exceeded (the event's `detail`, counted per detail).
    pub(crate) fn report_block(
        &self,
        li: ListenerId,
        ip: IpAddr,
        v: Verdict,
        detail: Option<Violation>,
        (ja3, ja4): (&str, &str),
    ) {
        let l = &self.listener(li);
        l.metrics.blocked(v.reason);
        if let Some(d) = detail {
            l.metrics.h2_flood(d);
        }
        let ev = BlockedEvent {
            ip,
            port: l.config.port,
            listener: &l.label,
            reason: v.reason.as_str(),
            ja3,
            ja4,
            observed: v.observed,
            detail: detail.map_or("", Violation::as_str),
            shadow: false,
        };
        self.events.blocked(&ev, ip, v.reason, clock::now_ns());
    }

    /// Counts and reports one refusal of `protection.shadow` on listener `li` (the connection
    /// was admitted): `shadowByReason`, and `'blocked'` with `shadow: true` (within the same
    /// per-second cap as every `'blocked'`).
    pub(crate) fn report_shadow(
        &self,
        li: ListenerId,
        ip: IpAddr,
        reason: crate::protection::BlockReason,
    ) {
        let l = &self.listener(li);
        l.metrics.shadow(reason);
        let ev = BlockedEvent {
            ip,
            port: l.config.port,
            listener: &l.label,
            reason: reason.as_str(),
            ja3: "",
            ja4: "",
            observed: true,
            detail: "",
            shadow: true,
        };
        self.events.blocked(&ev, ip, reason, clock::now_ns());
    }

    /// Counts one runtime error on listener `li`; with a `message`, also emits it as `'error'`.
    pub(crate) fn report_error(
        &self,
        li: ListenerId,
        ip: Option<IpAddr>,
        code: ErrorReason,
        message: Option<String>,
    ) {
        self.report_error_with(li, ip, code, message.map(|m| (m, &[][..])));
    }

    /// Counts one `resolve_route_invalid` on listener `li` (the held connection `id` was closed)
    /// and emits it as `'error'`: `issues` (each `route.*` problem) as the event's `errors`, and
    /// spelled out in its message.
    pub(crate) fn report_resolve_invalid(
        &self,
        li: ListenerId,
        ip: IpAddr,
        id: u64,
        issues: &[crate::config::ConfigIssue],
    ) {
        let why: Vec<String> = (issues.iter())
            .map(|i| format!("{}: {}", i.path, i.message))
            .collect();
        let message = format!(
            "resolveConnection({id}): the route is not valid, the connection is closed: {}",
            why.join("; ")
        );
        let code = ErrorReason::ResolveRouteInvalid;
        self.report_error_with(li, Some(ip), code, Some((message, issues)));
    }

    /// [`Shared::report_error`] whose `'error'` event, when `event` is given, carries its message
    /// and `errors` list.
    fn report_error_with(
        &self,
        li: ListenerId,
        ip: Option<IpAddr>,
        code: ErrorReason,
        event: Option<(String, &[crate::config::ConfigIssue])>,
    ) {
        let l = &self.listener(li);
        l.metrics.error(code);
        if let Some((message, errors)) = event {
            let ev = ErrorEvent {
                code: code.as_str(),
                message,
                ip: ip.map(|i| i.to_string()),
                port: Some(l.config.port),
                listener: Some(&l.label),
                errors,
            };
            self.events.error(&ev, clock::now_ns());
        }
    }

    /// Counts one failed XDP map write (`metrics().xdp.errors`) and emits it as `'error'`
    /// (`xdp_sync_failed`, no listener: the kernel maps serve every listener).
    pub(crate) fn report_xdp_failure(&self, what: &str, err: &crate::xdp::XdpError) {
        self.xdp.errors.fetch_add(1, Ordering::Relaxed);
        let ev = ErrorEvent {
            code: crate::xdp::sync::XDP_SYNC_FAILED,
            message: format!("{what}: {err}"),
            ip: None,
            port: None,
            listener: None,
            errors: &[],
        };
        self.events.error(&ev, clock::now_ns());
    }

    /// Emits `'error'` `cluster_unavailable` (no listener: Redis serves every listener).
    pub(crate) fn report_cluster_unavailable(&self, message: String) {
        let ev = ErrorEvent {
            code: crate::cluster::CLUSTER_UNAVAILABLE,
            message,
            ip: None,
            port: None,
            listener: None,
            errors: &[],
        };
        self.events.error(&ev, clock::now_ns());
    }

    /// Emits `'error'` `cluster_message_rejected` (no listener; the cluster tier aggregates).
    pub(crate) fn report_cluster_rejected(&self, message: String) {
        let ev = ErrorEvent {
            code: crate::cluster::CLUSTER_REJECTED,
            message,
            ip: None,
            port: None,
            listener: None,
            errors: &[],
        };
        self.events.error(&ev, clock::now_ns());
    }

    /// Counts and emits (`'error'`, code `route_failed`) each route of a new route table that
    /// failed to build (docs/proxy.md: Route isolation).
    pub(crate) fn report_failing_routes(&self, failing: &[crate::config::proxy::FailingRoute]) {
        use crate::events::RouteFailedEvent;
        for f in failing {
            self.route_failures.fetch_add(1, Ordering::Relaxed);
            self.events.route_failed(&RouteFailedEvent {
                code: ROUTE_FAILED,
                message: f.message(),
                ip: None,
                port: None,
                listener: None,
                route: f.route.as_deref(),
                index: f.index,
                errors: &f.issues,
                last_good_cert: f.last_good_cert,
            });
        }
    }

    /// The listeners on `port`, or every listener when `port` is `None` (the scope of a ban or a
    /// listing that may name a port).
    pub(crate) fn listeners_for(
        &self,
        port: Option<u16>,
    ) -> impl Iterator<Item = &ListenerRt> + '_ {
        (self.listeners.iter()).filter(move |l| port.is_none_or(|p| p == l.config.port))
    }

    /// Indexes of the listeners on `port` (a port names every listener bound to it).
    pub(crate) fn listeners_on(&self, port: u16) -> impl Iterator<Item = ListenerId> + '_ {
        self.listeners
            .iter()
            .enumerate()
            .filter(move |(_, l)| l.config.port == port)
            .map(|(i, _)| ListenerId(i))
    }
}

/// Holds one open connection in its listener's gauge (`activeConnections`); released on drop.
pub(crate) struct ActiveGuard {
    shared: Arc<Shared>,
    li: ListenerId,
}

impl ActiveGuard {
    /// Counts a connection on listener `li` and returns the guard with the gauge's previous
    /// value (for the `maxConnections` check).
    pub(crate) fn open(shared: &Arc<Shared>, li: ListenerId) -> (ActiveGuard, i64) {
        let prev = shared
            .listener(li)
            .metrics
            .active
            .fetch_add(1, Ordering::Relaxed);
        (
            ActiveGuard {
                shared: shared.clone(),
                li,
            },
            prev,
        )
    }
}

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.shared
            .listener(self.li)
            .metrics
            .active
            .fetch_sub(1, Ordering::Relaxed);
    }
}
