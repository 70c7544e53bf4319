//! Connection, byte, block and error counters (docs/integrating.md: API, `metrics()`), all relaxed
//! atomics so the hot path never takes a lock; the snapshot `metrics()` reads from them; and their
//! Prometheus text exposition (format 0.0.4), rendered from that snapshot's JSON by the family
//! table of [`families`].
//!
//! This module knows no other engine module's snapshot (cluster tier, XDP filter): the server
//! puts them beside a [`MetricsSnapshot`] and [`prometheus`] reads whatever JSON it is given.

pub mod families;
pub mod family;
pub mod route;
pub mod upstream;

use crate::http2::Violation;
use crate::protection::BlockReason;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// Runtime failures that are not protection decisions (`errorsByReason` keys).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorReason {
    /// No route matched the SNI and there is no default route.
    NoRoute,
    /// The first bytes were not a TLS ClientHello, or it was malformed or over 16 KiB.
    BadClientHello,
    /// The client closed before a full ClientHello arrived (no fingerprint list set).
    ClientClosed,
    /// rustls refused the handshake.
    HandshakeFailed,
    /// Every upstream of the route refused or timed out.
    UpstreamConnectFailed,
    /// Writing the PROXY header to the upstream failed.
    UpstreamWriteFailed,
    /// `accept()` failed (EMFILE, ENFILE, ENOBUFS, ...); the loop backed off.
    AcceptFailed,
    /// The connection was closed after `idleTimeoutMs` without traffic.
    IdleTimeout,
    /// A terminated h2 connection whose client did not speak HTTP/2 the guard can follow (no
    /// connection preface, a header block interrupted); closed, not a flood.
    H2ProtocolError,
    /// On a route that carries HTTP, the first bytes after the TLS handshake were not the
    /// beginning of an HTTP/1.x request head or an HTTP/2 preface and header block.
    BadRequest,
    /// One direction ended and the other did not within `halfCloseTimeoutMs`: closed.
    HalfCloseTimeout,
    /// The route's own `maxConnectionsPerSecond` refused the connection (an error of the route,
    /// not a `'blocked'` event: the client is not at fault).
    RouteRateLimited,
    /// A connection from a trusted load balancer (`acceptProxyProtocol.trustedCidrs`) that did
    /// not begin with a valid PROXY v1/v2 header within `timeoutMs`; closed.
    ProxyHeaderInvalid,
    /// No upstream of the route speaks the protocol the client negotiated in ALPN
    /// (`upstreams[].protocol`; no ALPN counts as `http/1.1`): closed, no upstream connection.
    NoUpstreamForAlpn,
    /// A connection of a suspended route closed by `resolveConnection(id, null)`.
    SuspendRejected,
    /// A connection of a suspended route that `resolveConnection` did not resolve within the
    /// route's `suspendTimeoutMs`; closed.
    SuspendTimeout,
    /// A connection of a suspended route closed at once because its listener already held
    /// `maxPendingSuspended` suspended connections (no `'suspended'` event).
    SuspendQueueFull,
    /// A connection of a suspended route closed because `resolveConnection` gave it a route
    /// that is not valid (reported as `'error'` with every problem).
    ResolveRouteInvalid,
    /// The upstream answered in another application protocol than the connection speaks (an
    /// HTTP/1.x reply to an HTTP/2 connection, HTTP/2 frames to an HTTP/1.1 request): closed,
    /// the upstream's bytes not forwarded, reported as `'error'`.
    UpstreamProtocolMismatch,
}

impl ErrorReason {
    /// Every reason, in label order.
    pub const ALL: [ErrorReason; 19] = [
        ErrorReason::NoRoute,
        ErrorReason::BadClientHello,
        ErrorReason::ClientClosed,
        ErrorReason::HandshakeFailed,
        ErrorReason::UpstreamConnectFailed,
        ErrorReason::UpstreamWriteFailed,
        ErrorReason::AcceptFailed,
        ErrorReason::IdleTimeout,
        ErrorReason::H2ProtocolError,
        ErrorReason::BadRequest,
        ErrorReason::HalfCloseTimeout,
        ErrorReason::RouteRateLimited,
        ErrorReason::ProxyHeaderInvalid,
        ErrorReason::NoUpstreamForAlpn,
        ErrorReason::SuspendRejected,
        ErrorReason::SuspendTimeout,
        ErrorReason::SuspendQueueFull,
        ErrorReason::ResolveRouteInvalid,
        ErrorReason::UpstreamProtocolMismatch,
    ];
    /// Label (`no_route`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorReason::NoRoute => "no_route",
            ErrorReason::BadClientHello => "bad_client_hello",
            ErrorReason::ClientClosed => "client_closed",
            ErrorReason::HandshakeFailed => "handshake_failed",
            ErrorReason::UpstreamConnectFailed => "upstream_connect_failed",
            ErrorReason::UpstreamWriteFailed => "upstream_write_failed",
            ErrorReason::AcceptFailed => "accept_failed",
            ErrorReason::IdleTimeout => "idle_timeout",
            ErrorReason::H2ProtocolError => "h2_protocol_error",
            ErrorReason::BadRequest => "bad_request",
            ErrorReason::HalfCloseTimeout => "half_close_timeout",
            ErrorReason::RouteRateLimited => "route_rate_limited",
            ErrorReason::ProxyHeaderInvalid => "proxy_header_invalid",
            ErrorReason::NoUpstreamForAlpn => "no_upstream_for_alpn",
            ErrorReason::SuspendRejected => "suspend_rejected",
            ErrorReason::SuspendTimeout => "suspend_timeout",
            ErrorReason::SuspendQueueFull => "suspend_queue_full",
            ErrorReason::ResolveRouteInvalid => "resolve_route_invalid",
            ErrorReason::UpstreamProtocolMismatch => "upstream_protocol_mismatch",
        }
    }
    /// Position in [`ErrorReason::ALL`] (the discriminant).
    pub const fn index(self) -> usize {
        self as usize
    }
}

/// Counters of one listener.
#[derive(Debug, Default)]
pub struct ListenerMetrics {
    /// Connections currently open (admitted, not yet closed).
    pub active: AtomicI64,
    /// Connections half-closed now: the upstream ended its side, the client has not
    /// (`halfCloseTimeoutMs` bounds them).
    pub half_closed: AtomicI64,
    /// Connections admitted.
    pub accepted: AtomicU64,
    /// Connections refused, per [`BlockReason`] index.
    pub blocked_by_reason: [AtomicU64; BlockReason::ALL.len()],
    /// Runtime failures, per [`ErrorReason`] index.
    pub errors_by_reason: [AtomicU64; ErrorReason::ALL.len()],
    /// `h2_flood` refusals, per [`Violation`] index (their sum is `blocked_by_reason[h2_flood]`).
    pub h2_flood_by_detail: [AtomicU64; Violation::ALL.len()],
    /// Bytes read from clients.
    pub bytes_received: AtomicU64,
    /// Bytes written to clients (read from upstreams).
    pub bytes_sent: AtomicU64,
    /// Refusals of `protection.shadow` (admitted connections), per [`BlockReason`] index.
    pub shadow_by_reason: [AtomicU64; BlockReason::ALL.len()],
}

impl ListenerMetrics {
    /// Counts one refusal.
    pub fn blocked(&self, r: BlockReason) {
        self.blocked_by_reason[r.index()].fetch_add(1, Ordering::Relaxed);
    }
    /// Counts one refusal of `protection.shadow`.
    pub fn shadow(&self, r: BlockReason) {
        self.shadow_by_reason[r.index()].fetch_add(1, Ordering::Relaxed);
    }
    /// Counts the detail of one `h2_flood` (the refusal itself is counted by [`Self::blocked`]).
    pub fn h2_flood(&self, v: Violation) {
        self.h2_flood_by_detail[v.index()].fetch_add(1, Ordering::Relaxed);
    }
    /// Counts one runtime error.
    pub fn error(&self, r: ErrorReason) {
        self.errors_by_reason[r.index()].fetch_add(1, Ordering::Relaxed);
    }
    /// Total refusals.
    pub fn blocked_total(&self) -> u64 {
        self.blocked_by_reason
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum()
    }
    /// Total errors.
    pub fn errors_total(&self) -> u64 {
        self.errors_by_reason
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum()
    }
}

/// `metrics().listeners[i]`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListenerSnapshot {
    /// Bound address.
    pub address: String,
    /// Port.
    pub port: u16,
    /// Open connections.
    pub active_connections: i64,
    /// Connections half-closed now (the upstream ended its side, the client has not).
    pub half_closed_connections: i64,
    /// Admitted connections.
    pub accepted: u64,
    /// Refused connections.
    pub blocked: u64,
    /// Refusals per reason (every reason present, zero included).
    pub blocked_by_reason: BTreeMap<&'static str, u64>,
    /// `h2_flood` refusals per detail (every detail present, zero included).
    pub h2_flood_by_detail: BTreeMap<&'static str, u64>,
    /// Refusals of `protection.shadow` per reason (only the shadow's reasons,
    /// [`crate::protection::SHADOW_REASONS`], zero included); the connections were admitted.
    pub shadow_by_reason: BTreeMap<&'static str, u64>,
    /// Errors.
    pub errors: u64,
    /// Errors per reason.
    pub errors_by_reason: BTreeMap<&'static str, u64>,
    /// Bytes read from clients.
    pub bytes_received: u64,
    /// Bytes sent to clients.
    pub bytes_sent: u64,
    /// Per-IP entries tracked by this listener's engine.
    pub tracked_ips: u64,
    /// Connections admitted without a per-IP entry because the table was at `maxTrackedIps`
    /// and every candidate held connections (fail-open, as a full stick table does).
    pub untracked_admissions: u64,
    /// Prefixes tracked by the prefix tier (`prefixLimit`).
    pub tracked_prefixes: u64,
    /// Clients holding a known-good mark.
    pub known_good_clients: u64,
    /// Defense mode on (1) or off (0).
    pub defense_active: u8,
    /// Connections of suspended routes held now, waiting for `resolveConnection`.
    pub pending_suspended: u64,
}

/// What a listener reports beside its counters: its engine's gauges, and the connections of
/// suspended routes it holds.
#[derive(Debug, Clone, Copy, Default)]
pub struct EngineGauges {
    /// Per-IP entries.
    pub tracked_ips: u64,
    /// Admissions without an entry.
    pub untracked_admissions: u64,
    /// Prefix entries.
    pub tracked_prefixes: u64,
    /// Known-good clients.
    pub known_good_clients: u64,
    /// Defense mode on.
    pub defense_active: bool,
    /// Connections of suspended routes held now.
    pub pending_suspended: u64,
}

impl ListenerSnapshot {
    /// Reads `m`.
    pub fn read(address: String, port: u16, m: &ListenerMetrics, g: EngineGauges) -> Self {
        let blocked_by_reason = BlockReason::ALL
            .iter()
            .map(|r| {
                (
                    r.as_str(),
                    m.blocked_by_reason[r.index()].load(Ordering::Relaxed),
                )
            })
            .collect();
        let h2_flood_by_detail = Violation::ALL
            .iter()
            .map(|v| {
                (
                    v.as_str(),
                    m.h2_flood_by_detail[v.index()].load(Ordering::Relaxed),
                )
            })
            .collect();
        let shadow_by_reason = crate::protection::SHADOW_REASONS
            .iter()
            .map(|r| {
                (
                    r.as_str(),
                    m.shadow_by_reason[r.index()].load(Ordering::Relaxed),
                )
            })
            .collect();
        let errors_by_reason = ErrorReason::ALL
            .iter()
            .map(|r| {
                (
                    r.as_str(),
                    m.errors_by_reason[r.index()].load(Ordering::Relaxed),
                )
            })
            .collect();
        ListenerSnapshot {
            address,
            port,
            active_connections: m.active.load(Ordering::Relaxed).max(0),
            half_closed_connections: m.half_closed.load(Ordering::Relaxed).max(0),
            accepted: m.accepted.load(Ordering::Relaxed),
            blocked: m.blocked_total(),
            blocked_by_reason,
            h2_flood_by_detail,
            shadow_by_reason,
            errors: m.errors_total(),
            errors_by_reason,
            bytes_received: m.bytes_received.load(Ordering::Relaxed),
            bytes_sent: m.bytes_sent.load(Ordering::Relaxed),
            tracked_ips: g.tracked_ips,
            untracked_admissions: g.untracked_admissions,
            tracked_prefixes: g.tracked_prefixes,
            known_good_clients: g.known_good_clients,
            defense_active: u8::from(g.defense_active),
            pending_suspended: g.pending_suspended,
        }
    }
}

/// `metrics()`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MetricsSnapshot {
    /// Sum of listeners' open connections.
    pub active_connections: i64,
    /// Sum of listeners' half-closed connections.
    pub half_closed_connections: i64,
    /// Sum of admitted connections.
    pub accepted_connections: u64,
    /// Sum of refused connections.
    pub blocked_connections: u64,
    /// `'blocked'` events not emitted because of `blockedEvents.maxPerSecond`.
    pub events_dropped: u64,
    /// Sum of per-IP entries tracked.
    pub tracked_ips: u64,
    /// Sum of connections of suspended routes held now (Symphony's `pendingSuspended`).
    pub pending_suspended: u64,
    /// Per listener.
    pub listeners: Vec<ListenerSnapshot>,
    /// Per route of the live table, in config order.
    pub route_metrics: Vec<route::RouteSnapshot>,
    /// Routes in the live table (Symphony's `routes`).
    pub routes: u64,
    /// Configured routes left out because they failed to build (Symphony's `failingRoutes`;
    /// docs/proxy.md: Route isolation).
    pub failing_routes: u64,
    /// Those routes, each with its problems.
    pub route_failures: Vec<route::RouteFailure>,
    /// Routes that failed to build since the proxy was created, counted once per constructor or
    /// `updateConfig` that gave them.
    pub route_failures_total: u64,
}

impl MetricsSnapshot {
    /// Sums listener snapshots.
    pub fn from_listeners(listeners: Vec<ListenerSnapshot>, events_dropped: u64) -> Self {
        MetricsSnapshot {
            active_connections: listeners.iter().map(|l| l.active_connections).sum(),
            half_closed_connections: listeners.iter().map(|l| l.half_closed_connections).sum(),
            accepted_connections: listeners.iter().map(|l| l.accepted).sum(),
            blocked_connections: listeners.iter().map(|l| l.blocked).sum(),
            pending_suspended: listeners.iter().map(|l| l.pending_suspended).sum(),
            events_dropped,
            tracked_ips: listeners.iter().map(|l| l.tracked_ips).sum(),
            listeners,
            route_metrics: Vec::new(),
            routes: 0,
            failing_routes: 0,
            route_failures: Vec::new(),
            route_failures_total: 0,
        }
    }
}

/// Prometheus text exposition format 0.0.4 of `snapshot` (the `metrics()` value, with whatever
/// the server puts beside a [`MetricsSnapshot`]): every family of [`families::FAMILIES`].
///
/// # Errors
/// When `snapshot` does not serialise to JSON (a map with non-string keys; none of Rampart's do).
pub fn prometheus<T: Serialize>(snapshot: &T) -> Result<String, serde_json::Error> {
    let root = serde_json::to_value(snapshot)?;
    Ok(family::render(families::FAMILIES, &root))
}
