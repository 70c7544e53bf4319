//! `ProxyConfig`, `ListenerConfig` and `RouteConfig` (README: Config): parsing and validation.
//!
//! Everything is checked and compiled here (PEM parsed into rustls keys, SNI patterns normalised,
//! protection policies compiled) so that applying a config is a pointer swap that cannot fail.

use super::error::{ConfigError, Issues};
use super::mtls::{parse_mtls, Mtls};
use super::protection::{cidrs, parse_protection};
use super::socket::{parse_socket_options, SocketOptions, SOCKET_FIELDS};
use super::value::{self as v, field, join};
use crate::protection::cidr::CidrSet;
use crate::protection::ProtectionPolicy;
use crate::tls::certs::{load_certified_key, CertifiedKey};
use serde_json::Value;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

/// Default idle timeout of a proxied connection, in ms (no bytes in either direction).
pub const DEFAULT_IDLE_TIMEOUT_MS: u64 = 60_000;
/// Default upstream connect timeout, in ms.
pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 5_000;
/// Default `ipAffinityTtlMs`: a client keeps its upstream while it reconnects within 1 hour.
pub const DEFAULT_IP_AFFINITY_TTL_MS: u64 = 3_600_000;
/// Default cap on `'blocked'` events per second.
pub const DEFAULT_BLOCKED_EVENTS_PER_SECOND: u64 = 1_000;
/// Default time a trusted peer has to send its whole PROXY header, in ms
/// (`acceptProxyProtocol.timeoutMs`).
pub const DEFAULT_PROXY_HEADER_TIMEOUT_MS: u64 = 3_000;
/// Default `routes[].suspendTimeoutMs`: a suspended connection waits this many ms for
/// `resolveConnection` before it is closed (`suspend_timeout`); Symphony's default.
pub const DEFAULT_SUSPEND_TIMEOUT_MS: u64 = 30_000;
/// Default `listeners[].maxPendingSuspended`: suspended connections one listener holds at once;
/// beyond it a connection for a suspended route is closed at once (`suspend_queue_full`).
pub const DEFAULT_MAX_PENDING_SUSPENDED: u64 = 1_024;

/// The whole validated proxy config.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// Listeners, in the order given.
    pub listeners: Vec<ListenerConfig>,
    /// Routes, compiled.
    pub routes: Vec<RouteConfig>,
    /// Tokio worker threads, also the number of SO_REUSEPORT sockets per listener.
    pub worker_threads: usize,
    /// `'blocked'` events per second before they are only counted.
    pub blocked_events_per_second: u64,
    /// `tcpKeepalive`, `halfCloseTimeoutMs` and the copy buffer sizes.
    pub socket: SocketOptions,
    /// The cluster tier on Redis (`cluster`), if configured.
    pub cluster: Option<super::cluster::ClusterConfig>,
}

/// One listening address.
#[derive(Debug, Clone)]
pub struct ListenerConfig {
    /// Address to bind (`0.0.0.0`, `::` also takes IPv4 clients).
    pub host: IpAddr,
    /// TCP port, 1..=65535. Several listeners may share it on different hosts; the port names
    /// all of them in `updateConfig`, `blockIp` and `blockedIps`, and they share one policy.
    pub port: u16,
    /// Certificate for terminating routes that carry none.
    pub default_cert: Option<Arc<CertifiedKey>>,
    /// Maximum simultaneous connections on this listener; 0 = unlimited.
    pub max_connections: u64,
    /// Close a proxied connection after this many ms without a byte in either direction.
    pub idle_timeout_ms: u64,
    /// Protection policy, if any.
    pub protection: Option<Arc<ProtectionPolicy>>,
    /// Client certificates on this listener's terminated routes (`mtls`; required by default).
    pub mtls: Option<Mtls>,
    /// `mode`: TLS (SNI routing) or plain HTTP/1.1 (ACME HTTP-01 and redirects to https).
    pub mode: ListenerMode,
    /// `acceptProxyProtocol`: peers whose PROXY header names the client.
    pub accept_proxy_protocol: Option<AcceptProxyProtocol>,
    /// `maxPendingSuspended`: connections of suspended routes held at once on this listener
    /// (README: Suspended routes).
    pub max_pending_suspended: u64,
}

/// What a listener speaks (`listeners[].mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ListenerMode {
    /// TLS: SNI routing, termination or passthrough (the default).
    #[default]
    Tls,
    /// HTTP/1.1 without TLS: `GET /.well-known/acme-challenge/<token>` is proxied to the route
    /// whose `sni` matches `Host`, everything else is redirected to https (README: HTTP listener).
    Http,
}

/// `listeners[].acceptProxyProtocol` (README: Client addresses from a load balancer).
#[derive(Debug, Clone)]
pub struct AcceptProxyProtocol {
    /// `trustedCidrs`: a connection from one of these peers must begin with a PROXY v1 or v2
    /// header, whose source address is then the client everywhere.
    pub trusted: CidrSet,
    /// `timeoutMs`: ms from accept to the end of the header.
    pub timeout_ms: u64,
}

impl AcceptProxyProtocol {
    /// Whether `peer` (canonical, see [`IpAddr::to_canonical`]) is a trusted load balancer.
    pub fn trusts(&self, peer: IpAddr) -> bool {
        self.trusted.contains(peer)
    }
}

/// Parses `acceptProxyProtocol: { trustedCidrs, timeoutMs }` at `path`.
fn parse_accept_proxy_protocol(
    val: &Value,
    path: &str,
    issues: &mut Issues,
) -> Option<AcceptProxyProtocol> {
    let obj = v::object(val, path, issues)?;
    let before = issues.len();
    v::reject_unknown(obj, &["trustedCidrs", "timeoutMs"], path, issues);
    let trusted = match field(obj, "trustedCidrs") {
        Some(c) => {
            let p = join(path, "trustedCidrs");
            let nets = cidrs(c, &p, issues);
            if nets.is_empty() && c.as_array().is_some_and(|a| a.is_empty()) {
                issues.push(
                    &p,
                    "must hold at least one CIDR (leave acceptProxyProtocol out to trust no peer)",
                );
            }
            nets
        }
        None => {
            issues.push(
                join(path, "trustedCidrs"),
                "is required (the load balancers' addresses, e.g. ['10.0.0.0/24'])",
            );
            Vec::new()
        }
    };
    let timeout_ms = field(obj, "timeoutMs")
        .and_then(|n| v::duration_ms(n, &join(path, "timeoutMs"), 1, issues))
        .unwrap_or(DEFAULT_PROXY_HEADER_TIMEOUT_MS);
    (issues.len() == before).then(|| AcceptProxyProtocol {
        trusted: CidrSet::new(trusted),
        timeout_ms,
    })
}

impl ListenerConfig {
    /// `host:port` label used in events and metrics (`[::]:8443` for IPv6).
    pub fn label(&self) -> String {
        std::net::SocketAddr::new(self.host, self.port).to_string()
    }
}

/// Where a route sends its connections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Upstream {
    /// TCP `host:port` (host may be a name, resolved at connect time).
    Tcp {
        /// Host name or IP literal.
        host: String,
        /// TCP port.
        port: u16,
    },
    /// Unix domain socket path.
    Uds {
        /// Socket path.
        path: PathBuf,
    },
}

/// What an upstream speaks (`upstreams[].protocol`): a client goes only to upstreams that speak
/// the application protocol it negotiated in ALPN (README: Upstream protocols).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AppProtocol {
    /// `'http/1.1'`: also what a client without ALPN speaks.
    Http1,
    /// `'h2'`: HTTP/2 with prior knowledge (h2c) to the upstream.
    H2,
}

impl AppProtocol {
    /// Every protocol, in [`AppProtocol::index`] order.
    pub const ALL: [AppProtocol; 2] = [AppProtocol::Http1, AppProtocol::H2];

    /// The ALPN protocol id (RFC 7301): `http/1.1` or `h2`.
    pub fn alpn_id(self) -> &'static [u8] {
        match self {
            AppProtocol::Http1 => b"http/1.1",
            AppProtocol::H2 => b"h2",
        }
    }

    /// The protocol a negotiated ALPN id stands for: `h2` is HTTP/2, anything else (no ALPN
    /// included) HTTP/1.1.
    pub fn of_alpn(id: Option<&[u8]>) -> AppProtocol {
        if id == Some(b"h2") {
            AppProtocol::H2
        } else {
            AppProtocol::Http1
        }
    }

    /// Position in [`AppProtocol::ALL`].
    pub const fn index(self) -> usize {
        self as usize
    }
}

/// The header sent to the upstream before any application byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceAddressHeader {
    /// Nothing.
    None,
    /// PROXY protocol v1 (text line).
    ProxyV1,
    /// PROXY protocol v2 (binary).
    ProxyV2,
    /// `'xForwardedFor'`: an `X-Forwarded-For: <client ip>` and `X-Forwarded-Proto: https`
    /// request header on every HTTP/1.1 request (README: Forwarded request headers).
    XForwardedFor,
}

/// Which TLS fingerprints the upstream gets (`forwardFingerprint`): in PROXY v2 TLVs with
/// `sourceAddressHeader: 'proxyProtocolV2'`, else as `X-JA3` / `X-JA4` request headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ForwardFingerprint {
    /// JA3 (TLV 0xE0 / `X-JA3`).
    pub ja3: bool,
    /// JA4 (TLV 0xE1 / `X-JA4`).
    pub ja4: bool,
}

impl ForwardFingerprint {
    /// Nothing forwarded (`'none'`, the default).
    pub const NONE: ForwardFingerprint = ForwardFingerprint {
        ja3: false,
        ja4: false,
    };

    /// Whether any fingerprint is forwarded.
    pub fn any(self) -> bool {
        self.ja3 || self.ja4
    }
}

/// The request headers a route sets on every HTTP/1.1 request (client copies of all four are
/// removed): `X-Forwarded-For` + `X-Forwarded-Proto`, `X-JA3`, `X-JA4`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ForwardHeaders {
    /// `X-Forwarded-For: <client ip>` and `X-Forwarded-Proto: https`.
    pub forwarded_for: bool,
    /// `X-JA3` / `X-JA4`.
    pub fingerprint: ForwardFingerprint,
}

/// What a route carries (`routes[].protocol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RouteProtocol {
    /// Bytes Rampart does not interpret (the default).
    #[default]
    Opaque,
    /// HTTP/1.x (or HTTP/2 with `http2: true`): `slowRequest` applies to terminated connections.
    Http,
}

/// What may turn a followed HTTP/1.x connection into a tunnel (`routes[].tunnels`; README: What
/// Rampart refuses on forwarding routes): the `Upgrade` protocols (RFC 9110 §7.8) a bodiless
/// upgrade request may ask for, and whether `CONNECT` (RFC 9110 §9.3.6) is forwarded. Anything
/// else keeps the connection HTTP/1.x, followed request by request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tunnels {
    /// `upgrade`: protocol names, lower case (default `['websocket']`; never `h2c`).
    pub upgrade: Arc<[String]>,
    /// `connect`: forward `CONNECT` (default false: Rampart answers it `405` and closes).
    pub connect: bool,
}

impl Default for Tunnels {
    fn default() -> Tunnels {
        Tunnels {
            upgrade: Arc::from(["websocket".to_string()]),
            connect: false,
        }
    }
}

impl Tunnels {
    /// Whether `protocol`, one element of an `Upgrade` field (`name[/version]`, RFC 9110 §7.8),
    /// names a protocol in `upgrade` (its name compared in any case, the version ignored).
    pub fn allows_upgrade(&self, protocol: &[u8]) -> bool {
        let name = protocol.split(|&b| b == b'/').next().unwrap_or(protocol);
        let name = name.trim_ascii();
        self.upgrade
            .iter()
            .any(|u| name.eq_ignore_ascii_case(u.as_bytes()))
    }
}

/// How a route spreads new connections over its upstreams (`routes[].balance`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Balance {
    /// Each new connection starts at the next upstream in turn.
    RoundRobin,
    /// Each new connection starts at the upstream with the fewest open connections from this
    /// route (ties in turn): the default when every upstream is a Unix socket, as in Symphony.
    LeastConnections,
}

/// An SNI pattern, normalised to lower case without a trailing dot.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum SniPattern {
    /// `a.example.com`
    Exact(String),
    /// `*.example.com`, stored as `example.com`: matches one more label.
    Wildcard(String),
    /// `''`: every other name and hellos without SNI.
    Default,
}

impl SniPattern {
    /// The pattern as written, normalised (`api.example.com`, `*.example.com`, `''`): a route's
    /// name in `routeMetrics`.
    pub fn name(&self) -> String {
        match self {
            SniPattern::Exact(h) => h.clone(),
            SniPattern::Wildcard(s) => format!("*.{s}"),
            SniPattern::Default => String::new(),
        }
    }
}

/// One route.
#[derive(Debug, Clone)]
pub struct RouteConfig {
    /// Matching rule.
    pub sni: SniPattern,
    /// Upstreams, tried round-robin, falling over to the next on connect failure.
    pub upstreams: Vec<Upstream>,
    /// `upstreams[].protocol`, one per upstream in the same order (`None`: serves any protocol).
    pub upstream_protocols: Vec<Option<AppProtocol>>,
    /// Terminate TLS here (true) or pass the raw bytes through (false).
    pub terminate_tls: bool,
    /// Route certificate (else the listener's `defaultCert`).
    pub cert: Option<Arc<CertifiedKey>>,
    /// Offer `h2` in ALPN (`http2: true`, or an upstream with `protocol: 'h2'`).
    pub http2: bool,
    /// `protocol`: what the route carries (`http2: true` implies HTTP).
    pub protocol: RouteProtocol,
    /// `tunnels`: what may turn a terminated HTTP/1.x connection into a tunnel.
    pub tunnels: Tunnels,
    /// Header sent to the upstream first.
    pub source_address_header: SourceAddressHeader,
    /// Fingerprints forwarded (PROXY v2 TLVs with `ProxyV2`, else request headers).
    pub forward_fingerprint: ForwardFingerprint,
    /// Upstream connect timeout, ms.
    pub connect_timeout_ms: u64,
    /// Route-wide new-connection limit (all clients together): `(connections/s, burst)`.
    pub rate_limit: Option<(f64, u64)>,
    /// Client certificates for this route (`mtls`; optional by default), replacing the
    /// listener's.
    pub mtls: Option<Mtls>,
    /// `metricsGroup`: the `group` of this route's metrics (default: the route's name).
    pub metrics_group: Option<String>,
    /// `balance` (default: least connections for an all-UDS set, else round robin).
    pub balance: Balance,
    /// `ipAffinity` + `ipAffinityTtlMs`: a client IP goes back to the upstream it last used
    /// while it reconnects within this many ms (`None`: off).
    pub ip_affinity_ttl_ms: Option<u64>,
    /// `suspended: true` + `suspendTimeoutMs`: a connection matching this route is held after
    /// the ClientHello and offered to JS (`'suspended'` event) for this many ms, until
    /// `resolveConnection` gives it a route (`None`: not suspended; README: Suspended routes).
    /// A suspended route's `upstreams` may be empty.
    pub suspend_timeout_ms: Option<u64>,
}

impl RouteConfig {
    /// Whether the route carries HTTP (`protocol: 'http'`, `http2: true`, or an upstream with a
    /// `protocol`).
    pub fn carries_http(&self) -> bool {
        self.protocol == RouteProtocol::Http
            || self.http2
            || self.upstream_protocols.iter().any(Option::is_some)
    }

    /// Whether upstream `i` serves clients speaking `p` (an upstream without `protocol` serves
    /// any).
    pub fn serves(&self, i: usize, p: AppProtocol) -> bool {
        self.upstream_protocols
            .get(i)
            .copied()
            .flatten()
            .is_none_or(|q| q == p)
    }

    /// Whether some upstream serves `p`.
    pub fn any_serves(&self, p: AppProtocol) -> bool {
        (0..self.upstreams.len()).any(|i| self.serves(i, p))
    }

    /// The ALPN protocols a terminating route offers, in preference order: `h2` when `http2`,
    /// then `http/1.1` when some upstream serves it (a set of `'h2'` upstreams offers `h2` only).
    /// A route that writes request headers offers `http/1.1` only (README: Forwarded request
    /// headers): every request of every client gets them.
    pub fn alpn_offered(&self) -> Vec<Vec<u8>> {
        let mut v = Vec::with_capacity(2);
        if self.http2 && self.forward_headers().is_none() {
            v.push(AppProtocol::H2.alpn_id().to_vec());
        }
        if self.any_serves(AppProtocol::Http1) {
            v.push(AppProtocol::Http1.alpn_id().to_vec());
        }
        v
    }

    /// The protocol a passthrough client is balanced by, from the ALPN list of its ClientHello
    /// (`offered`): `h2` when it offers `h2` and an upstream serves it, as termination would
    /// negotiate; else HTTP/1.1 (no ALPN, or only other protocols such as `acme-tls/1`, included).
    pub fn passthrough_protocol(&self, offered: &[Vec<u8>]) -> AppProtocol {
        let h2 = AppProtocol::H2;
        if offered.iter().any(|a| a == h2.alpn_id()) && self.any_serves(h2) {
            h2
        } else {
            AppProtocol::Http1
        }
    }

    /// The request headers Rampart writes into this route's HTTP/1.1 requests, `None` when it
    /// forwards the bytes as they are: `sourceAddressHeader: 'xForwardedFor'`, and
    /// `forwardFingerprint` without `'proxyProtocolV2'` (with it the fingerprints ride TLVs).
    pub fn forward_headers(&self) -> Option<ForwardHeaders> {
        let h = ForwardHeaders {
            forwarded_for: self.source_address_header == SourceAddressHeader::XForwardedFor,
            fingerprint: match self.source_address_header {
                SourceAddressHeader::ProxyV2 => ForwardFingerprint::NONE,
                _ => self.forward_fingerprint,
            },
        };
        (h.forwarded_for || h.fingerprint.any()).then_some(h)
    }
}

fn parse_cert(v: &Value, path: &str, issues: &mut Issues) -> Option<Arc<CertifiedKey>> {
    let obj = v::object(v, path, issues)?;
    v::reject_unknown(obj, &["certChain", "privateKey"], path, issues);
    let chain = match field(obj, "certChain") {
        Some(c) => v::pem_bytes(c, &join(path, "certChain"), issues),
        None => {
            issues.push(join(path, "certChain"), "is required");
            None
        }
    };
    let key = match field(obj, "privateKey") {
        Some(k) => v::pem_bytes(k, &join(path, "privateKey"), issues),
        None => {
            issues.push(join(path, "privateKey"), "is required");
            None
        }
    };
    let (chain, key) = (chain?, key?);
    match load_certified_key(&chain, &key) {
        Ok(ck) => Some(ck),
        Err(e) => {
            issues.push(path, e);
            None
        }
    }
}

/// Parses a host-name SNI pattern (`''`, `a.b`, `*.a.b`), normalising case and one trailing dot.
pub fn parse_sni(s: &str) -> Result<SniPattern, String> {
    if s.is_empty() {
        return Ok(SniPattern::Default);
    }
    let lower = s.to_ascii_lowercase();
    let name = lower.strip_suffix('.').unwrap_or(&lower);
    let (wild, host) = match name.strip_prefix("*.") {
        Some(rest) => (true, rest),
        None => (false, name),
    };
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    if host.is_empty() || host.len() > 253 || !host.split('.').all(label_ok) {
        return Err(format!(
            "must be '', a host name or '*.' followed by a host name, got {s:?}"
        ));
    }
    Ok(if wild {
        SniPattern::Wildcard(host.to_string())
    } else {
        SniPattern::Exact(host.to_string())
    })
}

/// Parses one `upstreams[]` entry: where it is, and the `protocol` it speaks (`None`: any).
fn parse_upstream(
    val: &Value,
    path: &str,
    issues: &mut Issues,
) -> Option<(Upstream, Option<AppProtocol>)> {
    let obj = v::object(val, path, issues)?;
    let before = issues.len();
    let protocol = field(obj, "protocol").and_then(|p| {
        match v::one_of(p, &join(path, "protocol"), &["h2", "http/1.1"], issues)? {
            "h2" => Some(AppProtocol::H2),
            _ => Some(AppProtocol::Http1),
        }
    });
    let up = parse_upstream_address(obj, path, issues)?;
    (issues.len() == before).then_some((up, protocol))
}

/// The address part of an `upstreams[]` entry (`kind` and `host`/`port` or `path`).
fn parse_upstream_address(
    obj: &serde_json::Map<String, Value>,
    path: &str,
    issues: &mut Issues,
) -> Option<Upstream> {
    let kind = match field(obj, "kind") {
        Some(k) => v::one_of(k, &join(path, "kind"), &["tcp", "uds"], issues)?,
        None => {
            issues.push(join(path, "kind"), "is required ('tcp' or 'uds')");
            return None;
        }
    };
    if kind == "tcp" {
        v::reject_unknown(obj, &["kind", "host", "port", "protocol"], path, issues);
        let host = match field(obj, "host") {
            Some(h) => v::string(h, &join(path, "host"), issues).map(str::to_string),
            None => {
                issues.push(join(path, "host"), "is required for kind 'tcp'");
                None
            }
        };
        if let Some(h) = &host {
            if h.is_empty() || h.contains(char::is_whitespace) {
                issues.push(
                    join(path, "host"),
                    format!("must be a host name or IP, got {h:?}"),
                );
                return None;
            }
        }
        let port = match field(obj, "port") {
            Some(p) => v::number_in(p, &join(path, "port"), 1.0, 65535.0, true, issues),
            None => {
                issues.push(join(path, "port"), "is required for kind 'tcp'");
                None
            }
        };
        Some(Upstream::Tcp {
            host: host?,
            port: port? as u16,
        })
    } else {
        v::reject_unknown(obj, &["kind", "path", "protocol"], path, issues);
        match field(obj, "path") {
            Some(p) => {
                let s = v::string(p, &join(path, "path"), issues)?;
                if s.is_empty() || s.len() > 107 {
                    issues.push(
                        join(path, "path"),
                        format!("must be a socket path of 1..=107 bytes, got {s:?}"),
                    );
                    return None;
                }
                Some(Upstream::Uds { path: s.into() })
            }
            None => {
                issues.push(join(path, "path"), "is required for kind 'uds'");
                None
            }
        }
    }
}

/// Parses and validates `routes` against the listeners' default certificates.
pub fn parse_routes(
    val: &Value,
    path: &str,
    listeners: &[ListenerConfig],
    issues: &mut Issues,
) -> Option<Vec<RouteConfig>> {
    let arr = v::array(val, path, issues)?;
    let before = issues.len();
    let mut out = Vec::with_capacity(arr.len());
    let mut seen = std::collections::HashMap::new();
    for (i, r) in arr.iter().enumerate() {
        let p = v::index(path, i);
        if let Some(route) = parse_route(r, &p, listeners, RouteKind::Table, issues) {
            if let Some(prev) = seen.insert(route.sni.clone(), i) {
                issues.push(
                    join(&p, "sni"),
                    format!("duplicates the sni of {}", v::index(path, prev)),
                );
            }
            out.push(route);
        }
    }
    (issues.len() == before).then_some(out)
}

/// Which route is parsed: a `routes[]` entry, or the route `resolveConnection` gives a suspended
/// connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RouteKind {
    /// A `routes[]` entry of the route table.
    Table,
    /// `resolveConnection(id, route)`: no `sni` needed, `upstream` (one, Symphony's shape) or
    /// `upstreams`; the route-table fields are refused.
    Resolve,
}

/// Route-table fields a resolved route cannot carry, each with the reason.
const TABLE_ONLY_FIELDS: [(&str, &str); 7] = [
    (
        "suspended",
        "a resolved connection cannot be suspended again",
    ),
    (
        "suspendTimeoutMs",
        "a resolved connection cannot be suspended again",
    ),
    (
        "maxConnectionsPerSecond",
        "the suspended route's limit applied before it was suspended",
    ),
    (
        "burst",
        "the suspended route's limit applied before it was suspended",
    ),
    (
        "metricsGroup",
        "the connection counts in the suspended route's routeMetrics",
    ),
    (
        "ipAffinity",
        "has no use on a route that serves one connection",
    ),
    (
        "ipAffinityTtlMs",
        "has no use on a route that serves one connection",
    ),
];

/// Parses `resolveConnection`'s `route` (README: Suspended routes): a `routes[]`-shaped object
/// without the route-table fields, with `upstream` (one) or `upstreams`; `sni` is optional and
/// not used (the connection's SNI is the client's). `listener` is the suspended connection's
/// (its `defaultCert` serves a terminating route without `cert`; `None` when the id is unknown,
/// then only the shape is checked). Errors name fields under `route`.
pub fn parse_resolve_route(
    val: &Value,
    listener: Option<&ListenerConfig>,
) -> Result<RouteConfig, ConfigError> {
    let mut issues = Issues::default();
    let listeners: Vec<ListenerConfig> = listener.into_iter().cloned().collect();
    match parse_route(val, "route", &listeners, RouteKind::Resolve, &mut issues) {
        Some(r) if issues.is_empty() => Ok(r),
        _ => Err(ConfigError::new(issues.0)),
    }
}

fn parse_route(
    val: &Value,
    path: &str,
    listeners: &[ListenerConfig],
    kind: RouteKind,
    issues: &mut Issues,
) -> Option<RouteConfig> {
    let obj = v::object(val, path, issues)?;
    let before = issues.len();
    let mut known = vec![
        "sni",
        "upstreams",
        "terminateTls",
        "cert",
        "http2",
        "sourceAddressHeader",
        "forwardFingerprint",
        "connectTimeoutMs",
        "maxConnectionsPerSecond",
        "burst",
        "protocol",
        "mtls",
        "metricsGroup",
        "suspended",
        "suspendTimeoutMs",
        "balance",
        "ipAffinity",
        "ipAffinityTtlMs",
        "tunnels",
    ];
    if kind == RouteKind::Resolve {
        known.push("upstream");
        for (key, why) in TABLE_ONLY_FIELDS {
            if field(obj, key).is_some() {
                issues.push(join(path, key), format!("is a route-table field: {why}"));
            }
        }
    }
    v::reject_unknown(obj, &known, path, issues);
    let suspended = kind == RouteKind::Table
        && field(obj, "suspended")
            .and_then(|b| v::boolean(b, &join(path, "suspended"), issues))
            .unwrap_or(false);
    let suspend_timeout_ms = match kind {
        RouteKind::Table => field(obj, "suspendTimeoutMs")
            .and_then(|n| v::duration_ms(n, &join(path, "suspendTimeoutMs"), 1, issues))
            .unwrap_or(DEFAULT_SUSPEND_TIMEOUT_MS),
        RouteKind::Resolve => DEFAULT_SUSPEND_TIMEOUT_MS,
    };
    let protocol = match field(obj, "protocol") {
        Some(p) => match v::one_of(p, &join(path, "protocol"), &["http", "opaque"], issues) {
            Some("http") => RouteProtocol::Http,
            _ => RouteProtocol::Opaque,
        },
        None => RouteProtocol::Opaque,
    };
    let table = kind == RouteKind::Table;
    let rate = field(obj, "maxConnectionsPerSecond")
        .filter(|_| table)
        .and_then(|n| {
            let p = join(path, "maxConnectionsPerSecond");
            let r = v::number_in(n, &p, 0.0, 1e9, false, issues)?;
            if r <= 0.0 {
                issues.push(p, "must be > 0 (leave it out for no route limit), got 0");
                return None;
            }
            Some(r)
        });
    let burst = field(obj, "burst")
        .filter(|_| table)
        .and_then(|n| v::count(n, &join(path, "burst"), 1, issues));
    if burst.is_some() && field(obj, "maxConnectionsPerSecond").is_none() {
        issues.push(join(path, "burst"), "needs maxConnectionsPerSecond");
    }
    let rate_limit = rate.map(|r| (r, burst.unwrap_or_else(|| r.ceil().max(1.0) as u64)));
    let sni = match obj.get("sni") {
        Some(Value::String(s)) => match parse_sni(s) {
            Ok(p) => Some(p),
            Err(e) => {
                issues.push(join(path, "sni"), e);
                None
            }
        },
        Some(other) => {
            issues.push(
                join(path, "sni"),
                format!("must be a string, got {}", v::describe(other)),
            );
            None
        }
        None if kind == RouteKind::Resolve => Some(SniPattern::Default),
        None => {
            issues.push(join(path, "sni"), "is required ('' for the default route)");
            None
        }
    };
    let upstreams = match (field(obj, "upstreams"), field(obj, "upstream")) {
        (Some(_), Some(_)) if kind == RouteKind::Resolve => {
            issues.push(
                join(path, "upstream"),
                "give either upstream (one) or upstreams, not both",
            );
            None
        }
        (None, Some(u)) if kind == RouteKind::Resolve => {
            parse_upstream(u, &join(path, "upstream"), issues).map(|(u, p)| (vec![u], vec![p]))
        }
        (Some(u), _) => {
            let up = join(path, "upstreams");
            v::array(u, &up, issues).and_then(|a| {
                if a.is_empty() && suspended {
                    return Some((Vec::new(), Vec::new()));
                }
                if a.is_empty() {
                    issues.push(&up, "must hold at least one upstream");
                    return None;
                }
                let list: Vec<_> = a
                    .iter()
                    .enumerate()
                    .filter_map(|(i, x)| parse_upstream(x, &v::index(&up, i), issues))
                    .collect();
                (list.len() == a.len()).then(|| list.into_iter().unzip::<_, _, Vec<_>, Vec<_>>())
            })
        }
        (None, _) if suspended => Some((Vec::new(), Vec::new())),
        (None, _) => {
            let msg = match kind {
                RouteKind::Table => "is required (it may be left out on a suspended route)",
                RouteKind::Resolve => "is required: upstream (one) or upstreams",
            };
            issues.push(join(path, "upstreams"), msg);
            None
        }
    };
    let terminate_tls_field = match field(obj, "terminateTls") {
        Some(b) => v::boolean(b, &join(path, "terminateTls"), issues),
        None => Some(true),
    };
    let terminate_tls = terminate_tls_field.unwrap_or(true);
    let cert = field(obj, "cert").and_then(|c| parse_cert(c, &join(path, "cert"), issues));
    let http2_field = field(obj, "http2").and_then(|b| v::boolean(b, &join(path, "http2"), issues));
    let protocols = upstreams.as_ref().map_or(&[][..], |(_, p)| p.as_slice());
    let http2 = check_http2(http2_field, protocols, path, issues);
    let sah = field(obj, "sourceAddressHeader")
        .and_then(|s| {
            v::one_of(
                s,
                &join(path, "sourceAddressHeader"),
                &["none", "proxyProtocol", "proxyProtocolV2", "xForwardedFor"],
                issues,
            )
        })
        .map(|s| match s {
            "proxyProtocol" => SourceAddressHeader::ProxyV1,
            "proxyProtocolV2" => SourceAddressHeader::ProxyV2,
            "xForwardedFor" => SourceAddressHeader::XForwardedFor,
            _ => SourceAddressHeader::None,
        })
        .unwrap_or(SourceAddressHeader::None);
    let ff = field(obj, "forwardFingerprint")
        .and_then(|f| parse_forward_fingerprint(f, &join(path, "forwardFingerprint"), issues))
        .unwrap_or(ForwardFingerprint::NONE);
    // Request headers (X-Forwarded-For, X-JA3/X-JA4 without a PROXY v2 header) are written into
    // the HTTP/1.1 stream: the route carries HTTP (the default protocol then) and terminates TLS.
    let headers = if sah == SourceAddressHeader::XForwardedFor {
        Some("sourceAddressHeader")
    } else if ff.any() && sah != SourceAddressHeader::ProxyV2 {
        Some("forwardFingerprint")
    } else {
        None
    };
    let protocol = match (headers, field(obj, "protocol")) {
        (Some(_), None) => RouteProtocol::Http,
        _ => protocol,
    };
    if let Some(key) = headers {
        let why = if key == "forwardFingerprint" {
            " (or sourceAddressHeader: 'proxyProtocolV2', where the fingerprint rides a PROXY v2 TLV)"
        } else {
            ""
        };
        if terminate_tls_field == Some(false) {
            issues.push(
                join(path, key),
                format!("sets HTTP request headers: needs terminateTls: true{why}"),
            );
        }
        if protocol == RouteProtocol::Opaque && !http2 {
            issues.push(
                join(path, key),
                format!("sets HTTP request headers: needs protocol: 'http'{why}"),
            );
        }
        if let Some(i) = protocols.iter().position(|p| *p == Some(AppProtocol::H2)) {
            issues.push(
                join(path, key),
                format!(
                    "sets HTTP/1.1 request headers, so the route offers http/1.1 only: upstreams[{i}] has protocol 'h2' and would never be used{why}"
                ),
            );
        }
    }
    let tunnels = field(obj, "tunnels").and_then(|t| {
        let p = join(path, "tunnels");
        let tunnels = parse_tunnels(t, &p, issues);
        if terminate_tls_field == Some(false) {
            issues.push(
                &p,
                "needs terminateTls: true (the bytes of a passthrough route are encrypted)",
            );
        } else if protocol == RouteProtocol::Opaque
            && !http2
            && protocols.iter().all(Option::is_none)
        {
            issues.push(
                &p,
                "needs protocol: 'http' (only an HTTP route's requests are followed)",
            );
        }
        tunnels
    });
    let mtls = field(obj, "mtls").and_then(|m| parse_mtls(m, &join(path, "mtls"), false, issues));
    if field(obj, "mtls").is_some() && terminate_tls_field == Some(false) {
        issues.push(
            join(path, "mtls"),
            "needs terminateTls: true (client certificates are verified where TLS is terminated)",
        );
    }
    let metrics_group = field(obj, "metricsGroup").filter(|_| table).and_then(|g| {
        let p = join(path, "metricsGroup");
        let g = v::string(g, &p, issues)?;
        if g.is_empty() || g.len() > 128 || g.chars().any(char::is_control) {
            issues.push(
                p,
                format!("must be 1..=128 characters without control characters, got {g:?}"),
            );
            return None;
        }
        Some(g.to_string())
    });
    let balance = field(obj, "balance").and_then(|b| {
        match v::one_of(
            b,
            &join(path, "balance"),
            &["leastConnections", "roundRobin"],
            issues,
        )? {
            "leastConnections" => Some(Balance::LeastConnections),
            _ => Some(Balance::RoundRobin),
        }
    });
    let affinity = field(obj, "ipAffinity")
        .filter(|_| table)
        .and_then(|b| v::boolean(b, &join(path, "ipAffinity"), issues))
        .unwrap_or(false);
    let affinity_ttl = field(obj, "ipAffinityTtlMs")
        .filter(|_| table)
        .and_then(|n| v::duration_ms(n, &join(path, "ipAffinityTtlMs"), 1, issues));
    if affinity_ttl.is_some() && !affinity {
        issues.push(join(path, "ipAffinityTtlMs"), "needs ipAffinity: true");
    }
    let ip_affinity_ttl_ms = affinity.then(|| affinity_ttl.unwrap_or(DEFAULT_IP_AFFINITY_TTL_MS));
    let connect_timeout_ms = field(obj, "connectTimeoutMs")
        .and_then(|n| v::duration_ms(n, &join(path, "connectTimeoutMs"), 1, issues))
        .unwrap_or(DEFAULT_CONNECT_TIMEOUT_MS);
    // A suspended route's connections are served by the route `resolveConnection` gives.
    if !suspended
        && terminate_tls_field == Some(true)
        && cert.is_none()
        && field(obj, "cert").is_none()
    {
        let missing: Vec<String> = listeners
            .iter()
            .filter(|l| l.mode == ListenerMode::Tls && l.default_cert.is_none())
            .map(|l| l.label())
            .collect();
        if !missing.is_empty() {
            issues.push(
                join(path, "cert"),
                format!(
                    "is required when terminateTls is true and a listener has no defaultCert ({})",
                    missing.join(", ")
                ),
            );
        }
    }
    if issues.len() != before {
        return None;
    }
    let (upstreams, upstream_protocols) = upstreams?;
    Some(RouteConfig {
        sni: sni?,
        terminate_tls,
        cert,
        http2,
        protocol,
        tunnels: tunnels.unwrap_or_default(),
        source_address_header: sah,
        forward_fingerprint: ff,
        connect_timeout_ms,
        rate_limit,
        mtls,
        metrics_group,
        ip_affinity_ttl_ms,
        suspend_timeout_ms: suspended.then_some(suspend_timeout_ms),
        balance: balance.unwrap_or_else(|| default_balance(&upstreams)),
        upstreams,
        upstream_protocols,
    })
}

/// `tunnels`: `{ upgrade = ['websocket'], connect = false }`; `upgrade` holds HTTP tokens
/// (RFC 9110 §5.6.2), kept in lower case, without repeats (in any case) and never `h2c`.
fn parse_tunnels(val: &Value, path: &str, issues: &mut Issues) -> Option<Tunnels> {
    let obj = v::object(val, path, issues)?;
    let before = issues.len();
    v::reject_unknown(obj, &["upgrade", "connect"], path, issues);
    let mut tunnels = Tunnels::default();
    if let Some(u) = field(obj, "upgrade") {
        let p = join(path, "upgrade");
        let mut names: Vec<String> = Vec::new();
        for (i, x) in v::array(u, &p, issues).into_iter().flatten().enumerate() {
            let pi = v::index(&p, i);
            let Some(s) = v::string(x, &pi, issues) else {
                continue;
            };
            let name = s.to_ascii_lowercase();
            if name.is_empty() || !name.bytes().all(is_tchar) {
                issues.push(
                    pi,
                    format!("must be an HTTP token (RFC 9110 §5.6.2), got {s:?}"),
                );
            } else if name == "h2c" {
                issues.push(
                    pi,
                    "h2c is never a tunnel: HTTP/2 reaches an upstream only over ALPN h2, through the HTTP/2 guard",
                );
            } else if names.contains(&name) {
                issues.push(pi, "repeats an earlier entry");
            } else {
                names.push(name);
            }
        }
        tunnels.upgrade = names.into();
    }
    if let Some(c) = field(obj, "connect") {
        tunnels.connect = v::boolean(c, &join(path, "connect"), issues).unwrap_or(false);
    }
    (issues.len() == before).then_some(tunnels)
}

/// Whether `b` is a `tchar` of an HTTP token (RFC 9110 §5.6.2).
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// `forwardFingerprint`: `'none'`, `'ja3'`, `'ja4'`, or a non-empty list of `'ja3'` / `'ja4'`
/// without repeats.
fn parse_forward_fingerprint(
    val: &Value,
    path: &str,
    issues: &mut Issues,
) -> Option<ForwardFingerprint> {
    let mut ff = ForwardFingerprint::NONE;
    let Value::Array(list) = val else {
        return match v::one_of(val, path, &["none", "ja3", "ja4"], issues)? {
            "ja3" => Some(ForwardFingerprint {
                ja3: true,
                ja4: false,
            }),
            "ja4" => Some(ForwardFingerprint {
                ja3: false,
                ja4: true,
            }),
            _ => Some(ff),
        };
    };
    if list.is_empty() {
        issues.push(
            path,
            "must name 'ja3' and/or 'ja4' ('none' for none), got []",
        );
        return None;
    }
    let before = issues.len();
    for (i, x) in list.iter().enumerate() {
        let p = v::index(path, i);
        let slot = match v::one_of(x, &p, &["ja3", "ja4"], issues) {
            Some("ja3") => &mut ff.ja3,
            Some(_) => &mut ff.ja4,
            None => continue,
        };
        if *slot {
            issues.push(p, "repeats an earlier entry");
        }
        *slot = true;
    }
    (issues.len() == before).then_some(ff)
}

/// The route's effective `http2` from the field (`http2_field`) and its upstreams' `protocol`s:
/// an `'h2'` upstream offers `h2` (so `http2` may be left out), `http2: false` beside one is an
/// error (that upstream would never be used), and so is `http2: true` when every upstream is
/// `'http/1.1'` (no upstream would serve an h2 client).
fn check_http2(
    http2_field: Option<bool>,
    protocols: &[Option<AppProtocol>],
    path: &str,
    issues: &mut Issues,
) -> bool {
    let h2_at = protocols.iter().position(|p| *p == Some(AppProtocol::H2));
    let all_http1 =
        !protocols.is_empty() && protocols.iter().all(|p| *p == Some(AppProtocol::Http1));
    match (http2_field, h2_at) {
        (Some(false), Some(i)) => issues.push(
            join(path, "http2"),
            format!(
                "is false but upstreams[{i}] has protocol 'h2' (leave http2 out: an 'h2' upstream offers h2 in ALPN)"
            ),
        ),
        (Some(true), _) if all_http1 => issues.push(
            join(path, "http2"),
            "offers h2 but no upstream serves it (every upstream has protocol 'http/1.1')",
        ),
        _ => {}
    }
    http2_field.unwrap_or(h2_at.is_some())
}

/// Symphony's default: least connections for a set of Unix-socket upstreams (local workers),
/// round robin otherwise.
fn default_balance(ups: &[Upstream]) -> Balance {
    if !ups.is_empty() && ups.iter().all(|u| matches!(u, Upstream::Uds { .. })) {
        Balance::LeastConnections
    } else {
        Balance::RoundRobin
    }
}

/// `host` as a bind address (`localhost` is 127.0.0.1; brackets allowed).
fn parse_host(s: &str) -> Option<IpAddr> {
    if s == "localhost" {
        return Some(IpAddr::from([127, 0, 0, 1]));
    }
    s.trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
        .ok()
}

/// A listener's `host:port` when both are valid (default host `0.0.0.0`); no issue recorded.
fn bind_address(x: &Value) -> Option<SocketAddr> {
    let o = x.as_object()?;
    let host = match field(o, "host") {
        None => IpAddr::from([0, 0, 0, 0]),
        Some(h) => parse_host(h.as_str()?)?,
    };
    let port = field(o, "port")?
        .as_u64()
        .filter(|p| (1..=65535).contains(p))?;
    Some(SocketAddr::new(host, port as u16))
}

fn parse_listener(val: &Value, path: &str, issues: &mut Issues) -> Option<ListenerConfig> {
    let obj = v::object(val, path, issues)?;
    let before = issues.len();
    v::reject_unknown(
        obj,
        &[
            "host",
            "port",
            "mode",
            "defaultCert",
            "maxConnections",
            "idleTimeoutMs",
            "protection",
            "mtls",
            "acceptProxyProtocol",
            "maxPendingSuspended",
        ],
        path,
        issues,
    );
    let host = match field(obj, "host") {
        None => Some(IpAddr::from([0, 0, 0, 0])),
        Some(h) => v::string(h, &join(path, "host"), issues).and_then(|s| match parse_host(s) {
            Some(ip) => Some(ip),
            None => {
                issues.push(
                    join(path, "host"),
                    format!(
                        "must be an IP address to bind ('0.0.0.0', '::', '127.0.0.1'), got {s:?}"
                    ),
                );
                None
            }
        }),
    };
    let port = match field(obj, "port") {
        Some(p) => v::number_in(p, &join(path, "port"), 1.0, 65535.0, true, issues),
        None => {
            issues.push(join(path, "port"), "is required");
            None
        }
    };
    let mode = match field(obj, "mode") {
        Some(m) => match v::one_of(m, &join(path, "mode"), &["tls", "http"], issues) {
            Some("http") => ListenerMode::Http,
            _ => ListenerMode::Tls,
        },
        None => ListenerMode::Tls,
    };
    let default_cert =
        field(obj, "defaultCert").and_then(|c| parse_cert(c, &join(path, "defaultCert"), issues));
    if mode == ListenerMode::Http && field(obj, "defaultCert").is_some() {
        issues.push(
            join(path, "defaultCert"),
            "has no use on a mode 'http' listener (no TLS there); leave it out",
        );
    }
    let accept_proxy_protocol = field(obj, "acceptProxyProtocol")
        .and_then(|a| parse_accept_proxy_protocol(a, &join(path, "acceptProxyProtocol"), issues));
    let max_connections = field(obj, "maxConnections")
        .and_then(|n| v::count(n, &join(path, "maxConnections"), 0, issues))
        .unwrap_or(0);
    let idle_timeout_ms = field(obj, "idleTimeoutMs")
        .and_then(|n| v::duration_ms(n, &join(path, "idleTimeoutMs"), 1, issues))
        .unwrap_or(DEFAULT_IDLE_TIMEOUT_MS);
    let protection = field(obj, "protection")
        .and_then(|p| parse_protection(p, &join(path, "protection"), issues))
        .map(Arc::new);
    let mtls = field(obj, "mtls").and_then(|m| parse_mtls(m, &join(path, "mtls"), true, issues));
    let max_pending_suspended = field(obj, "maxPendingSuspended")
        .and_then(|n| v::count(n, &join(path, "maxPendingSuspended"), 1, issues))
        .unwrap_or(DEFAULT_MAX_PENDING_SUSPENDED);
    if issues.len() != before {
        return None;
    }
    Some(ListenerConfig {
        host: host?,
        port: port? as u16,
        default_cert,
        max_connections,
        idle_timeout_ms,
        protection,
        mtls,
        mode,
        accept_proxy_protocol,
        max_pending_suspended,
    })
}

/// Which addresses a listener's socket takes connections for, as far as a port conflict goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Covers {
    /// `0.0.0.0`: every IPv4 address.
    AnyV4,
    /// `::`: every IPv6 address and, since IPV6_V6ONLY is cleared, every IPv4 address too.
    AnyDual,
    /// One address (IPv4-mapped IPv6 counts as its IPv4 address).
    One(IpAddr),
}

impl Covers {
    fn of(host: IpAddr) -> Covers {
        match host.to_canonical() {
            IpAddr::V4(v4) if v4.is_unspecified() => Covers::AnyV4,
            IpAddr::V6(v6) if v6.is_unspecified() => Covers::AnyDual,
            ip => Covers::One(ip),
        }
    }

    /// Whether a wildcard `self` also takes connections for `other` (a different host).
    fn shadows(self, other: Covers) -> bool {
        match (self, other) {
            (Covers::AnyDual, _) => true,
            (Covers::AnyV4, Covers::One(ip)) => ip.is_ipv4(),
            _ => false,
        }
    }
}

/// Several listeners on one port (README: Config): the same host and port twice, and a specific
/// address beside a wildcard that already takes it, are errors naming both listeners. `::` is
/// dual-stack here (IPV6_V6ONLY is cleared), so it takes every IPv4 address too: beside `::` a
/// port can have no other listener. `binds` holds `(index, host:port)` of each listener whose
/// host and port are valid.
fn check_port_conflicts(binds: &[(usize, SocketAddr)], issues: &mut Issues) {
    for (j, &(ij, b)) in binds.iter().enumerate() {
        for &(ii, a) in &binds[..j] {
            if a.port() != b.port() {
                continue;
            }
            let (ca, cb) = (Covers::of(a.ip()), Covers::of(b.ip()));
            if ca == cb {
                issues.push(
                    format!("listeners[{ij}].port"),
                    format!(
                        "{b} is already bound by listeners[{ii}] (the same host and port twice)"
                    ),
                );
                break;
            }
            let (wild, wild_i, specific, specific_i) = if ca.shadows(cb) {
                (a, ii, b, ij)
            } else if cb.shadows(ca) {
                (b, ij, a, ii)
            } else {
                continue;
            };
            let family = if Covers::of(wild.ip()) == Covers::AnyDual {
                "every IPv6 and, dual-stack, every IPv4 address"
            } else {
                "every IPv4 address"
            };
            issues.push(
                format!("listeners[{ij}].host"),
                format!(
                    "listeners[{specific_i}] ({specific}) and listeners[{wild_i}] ({wild}) conflict on port {}: the wildcard already takes {family}; bind specific addresses only, or the wildcard alone",
                    b.port()
                ),
            );
            break;
        }
    }
}

/// The listeners of a port share one protection policy: it may be given on one of them (the
/// others share it) or identically on several; different policies on one port are an error.
/// `arr` is the raw `listeners` array (`parsed` holds `(index in arr, config)`).
fn share_port_policies(parsed: &mut [(usize, ListenerConfig)], arr: &[Value], issues: &mut Issues) {
    let raw = |i: usize| arr.get(i).and_then(|x| field(x.as_object()?, "protection"));
    for j in 0..parsed.len() {
        let port = parsed[j].1.port;
        let Some(first) = parsed
            .iter()
            .position(|(i, l)| l.port == port && raw(*i).is_some())
        else {
            continue;
        };
        let (fi, shared) = (parsed[first].0, parsed[first].1.protection.clone());
        let ij = parsed[j].0;
        if j != first && raw(ij).is_some() && raw(ij) != raw(fi) {
            issues.push(
                format!("listeners[{ij}].protection"),
                format!(
                    "differs from listeners[{fi}].protection: the listeners on port {port} share one policy (give it on one of them, or the same on each)"
                ),
            );
        }
        parsed[j].1.protection = shared;
    }
}

/// The message of a `clusterRateLimit` given to a proxy without `cluster` (constructor and
/// `updateConfig`).
pub const NEEDS_CLUSTER: &str = "needs the proxy's `cluster` config (a Redis shared by the nodes)";

/// `protection.clusterRateLimit` needs `cluster`: names each listener that sets it without one.
fn require_cluster(listeners: &[ListenerConfig], issues: &mut Issues) {
    for (i, l) in listeners.iter().enumerate() {
        if l.protection
            .as_ref()
            .is_some_and(|p| p.cluster_rate_limit().is_some())
        {
            issues.push(
                format!("listeners[{i}].protection.clusterRateLimit"),
                NEEDS_CLUSTER,
            );
        }
    }
}

/// Parses the whole `ProxyConfig`; `cpus` is the default for `workerThreads`.
pub fn parse_proxy_config(val: &Value, cpus: usize) -> Result<ProxyConfig, ConfigError> {
    let mut issues = Issues::default();
    let Some(obj) = v::object(val, "config", &mut issues) else {
        return Err(ConfigError::new(issues.0));
    };
    let mut known = vec![
        "listeners",
        "routes",
        "workerThreads",
        "blockedEvents",
        "cluster",
    ];
    known.extend(SOCKET_FIELDS);
    v::reject_unknown(obj, &known, "", &mut issues);
    let socket = parse_socket_options(obj, &mut issues);
    let mut listeners = Vec::new();
    match field(obj, "listeners") {
        Some(l) => {
            if let Some(arr) = v::array(l, "listeners", &mut issues) {
                if arr.is_empty() {
                    issues.push("listeners", "must hold at least one listener");
                }
                let mut parsed: Vec<(usize, ListenerConfig)> = Vec::new();
                let mut binds: Vec<(usize, SocketAddr)> = Vec::new();
                for (i, x) in arr.iter().enumerate() {
                    let lc = parse_listener(x, &v::index("listeners", i), &mut issues);
                    // Conflicts are checked on every listener whose host and port are valid,
                    // whatever else is wrong with it.
                    if let Some(addr) = bind_address(x) {
                        binds.push((i, addr));
                    }
                    if let Some(lc) = lc {
                        parsed.push((i, lc));
                    }
                }
                check_port_conflicts(&binds, &mut issues);
                share_port_policies(&mut parsed, arr, &mut issues);
                listeners = parsed.into_iter().map(|(_, lc)| lc).collect();
            }
        }
        None => issues.push("listeners", "is required"),
    }
    let routes = match field(obj, "routes") {
        Some(r) => parse_routes(r, "routes", &listeners, &mut issues),
        None => {
            issues.push("routes", "is required");
            None
        }
    };
    let worker_threads = field(obj, "workerThreads")
        .and_then(|n| v::number_in(n, "workerThreads", 1.0, 256.0, true, &mut issues))
        .map(|n| n as usize)
        .unwrap_or(cpus.max(1));
    let mut blocked_events_per_second = DEFAULT_BLOCKED_EVENTS_PER_SECOND;
    if let Some(be) = field(obj, "blockedEvents") {
        if let Some(o) = v::object(be, "blockedEvents", &mut issues) {
            v::reject_unknown(o, &["maxPerSecond"], "blockedEvents", &mut issues);
            if let Some(n) = field(o, "maxPerSecond") {
                if let Some(n) = v::count(n, "blockedEvents.maxPerSecond", 1, &mut issues) {
                    blocked_events_per_second = n;
                }
            }
        }
    }
    let cluster = field(obj, "cluster")
        .and_then(|c| super::cluster::parse_cluster(c, "cluster", &mut issues));
    if field(obj, "cluster").is_none() {
        require_cluster(&listeners, &mut issues);
    }
    let routes = routes.unwrap_or_default();
    issues.finish(ProxyConfig {
        listeners,
        routes,
        worker_threads,
        blocked_events_per_second,
        socket,
        cluster,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn issues_of(listeners: Value) -> Vec<(String, String)> {
        let cfg = json!({
            "listeners": listeners,
            "routes": [{"sni": "", "terminateTls": false,
                        "upstreams": [{"kind": "tcp", "host": "127.0.0.1", "port": 1}]}],
        });
        match parse_proxy_config(&cfg, 1) {
            Ok(_) => vec![],
            Err(e) => e.issues.into_iter().map(|i| (i.path, i.message)).collect(),
        }
    }

    #[test]
    fn specific_addresses_share_a_port() {
        assert!(issues_of(json!([
            {"host": "198.51.100.1", "port": 443},
            {"host": "2001:db8::1", "port": 443},
            {"host": "198.51.100.2", "port": 443},
            {"host": "0.0.0.0", "port": 8443},
            {"host": "2001:db8::1", "port": 8443},
        ]))
        .is_empty());
    }

    #[test]
    fn duplicates_and_wildcard_conflicts_name_both_listeners() {
        let got = issues_of(json!([
            {"host": "198.51.100.1", "port": 443},
            {"host": "198.51.100.1", "port": 443},
            {"host": "0.0.0.0", "port": 443},
            {"host": "::", "port": 8443},
            {"host": "192.0.2.1", "port": 8443},
            {"host": "::ffff:192.0.2.9", "port": 9443},
            {"host": "192.0.2.9", "port": 9443},
        ]));
        assert_eq!(
            got,
            vec![
                (
                    "listeners[1].port".into(),
                    "198.51.100.1:443 is already bound by listeners[0] (the same host and port twice)".into()
                ),
                (
                    "listeners[2].host".into(),
                    "listeners[0] (198.51.100.1:443) and listeners[2] (0.0.0.0:443) conflict on port 443: the wildcard already takes every IPv4 address; bind specific addresses only, or the wildcard alone".into()
                ),
                (
                    "listeners[4].host".into(),
                    "listeners[4] (192.0.2.1:8443) and listeners[3] ([::]:8443) conflict on port 8443: the wildcard already takes every IPv6 and, dual-stack, every IPv4 address; bind specific addresses only, or the wildcard alone".into()
                ),
                (
                    "listeners[6].port".into(),
                    "192.0.2.9:9443 is already bound by listeners[5] (the same host and port twice)".into()
                ),
            ]
        );
    }

    #[test]
    fn listeners_of_a_port_share_one_policy() {
        let cfg = json!({
            "listeners": [
                {"host": "198.51.100.1", "port": 443},
                {"host": "198.51.100.2", "port": 443, "protection": {"maxConcurrentPerIp": 3}},
                {"host": "198.51.100.3", "port": 443, "protection": {"maxConcurrentPerIp": 3}},
                {"host": "198.51.100.4", "port": 8443},
            ],
            "routes": [{"sni": "", "terminateTls": false,
                        "upstreams": [{"kind": "tcp", "host": "127.0.0.1", "port": 1}]}],
        });
        let c = parse_proxy_config(&cfg, 1).unwrap();
        let p: Vec<_> = c.listeners.iter().map(|l| l.protection.clone()).collect();
        assert!(Arc::ptr_eq(p[0].as_ref().unwrap(), p[1].as_ref().unwrap()));
        assert!(Arc::ptr_eq(p[0].as_ref().unwrap(), p[2].as_ref().unwrap()));
        assert_eq!(p[0].as_ref().unwrap().max_concurrent_per_ip(), 3);
        assert!(p[3].is_none());
        assert_eq!(
            issues_of(json!([
                {"host": "198.51.100.1", "port": 443, "protection": {"maxConcurrentPerIp": 3}},
                {"host": "198.51.100.2", "port": 443, "protection": {"maxConcurrentPerIp": 4}},
            ])),
            vec![(
                "listeners[1].protection".into(),
                "differs from listeners[0].protection: the listeners on port 443 share one policy (give it on one of them, or the same on each)".into()
            )]
        );
    }

    fn route_of(route: Value) -> Result<RouteConfig, Vec<(String, String)>> {
        let cfg = json!({ "listeners": [{ "port": 9443 }], "routes": [route] });
        match parse_proxy_config(&cfg, 1) {
            Ok(mut c) => Ok(c.routes.remove(0)),
            Err(e) => Err(e.issues.into_iter().map(|i| (i.path, i.message)).collect()),
        }
    }

    #[test]
    fn upstream_protocols_pick_the_alpn_offered() {
        let up = |p: Value| json!({ "kind": "tcp", "host": "127.0.0.1", "port": 1, "protocol": p });
        let any = json!({ "kind": "uds", "path": "/tmp/x.sock" });
        let r = route_of(json!({ "sni": "", "terminateTls": false,
                                 "upstreams": [up(json!("h2")), up(json!("http/1.1")), any] }))
        .unwrap();
        use AppProtocol::{Http1, H2};
        assert_eq!(r.upstream_protocols, [Some(H2), Some(Http1), None]);
        assert!(r.http2 && r.carries_http());
        assert_eq!(r.alpn_offered(), [b"h2".to_vec(), b"http/1.1".to_vec()]);
        assert_eq!(
            (r.serves(0, Http1), r.serves(1, H2), r.serves(2, H2)),
            (false, false, true)
        );
        let offer = |l: &[&[u8]]| l.iter().map(|a| a.to_vec()).collect::<Vec<_>>();
        assert_eq!(r.passthrough_protocol(&offer(&[b"http/1.1", b"h2"])), H2);
        assert_eq!(r.passthrough_protocol(&offer(&[b"http/1.1"])), Http1);
        assert_eq!(r.passthrough_protocol(&offer(&[b"acme-tls/1"])), Http1);
        assert_eq!(r.passthrough_protocol(&[]), Http1);
        // A set of h2 upstreams offers h2 only; one of http/1.1 upstreams http/1.1 only.
        let r =
            route_of(json!({ "sni": "", "terminateTls": false, "upstreams": [up(json!("h2"))] }))
                .unwrap();
        assert_eq!(r.alpn_offered(), [b"h2".to_vec()]);
        assert_eq!(r.passthrough_protocol(&offer(&[b"http/1.1"])), Http1);
        let r = route_of(
            json!({ "sni": "", "terminateTls": false, "upstreams": [up(json!("http/1.1"))] }),
        )
        .unwrap();
        assert!(!r.http2);
        assert_eq!(r.alpn_offered(), [b"http/1.1".to_vec()]);
        // Without protocols nothing changes: http2 decides.
        let r = route_of(
            json!({ "sni": "", "terminateTls": false, "http2": true, "upstreams": [any] }),
        )
        .unwrap();
        assert_eq!(r.alpn_offered(), [b"h2".to_vec(), b"http/1.1".to_vec()]);
        assert!(
            !route_of(json!({ "sni": "", "terminateTls": false, "upstreams": [any] }))
                .unwrap()
                .carries_http()
        );
    }

    #[test]
    fn upstream_protocols_are_validated() {
        let up = |p: Value| json!({ "kind": "tcp", "host": "127.0.0.1", "port": 1, "protocol": p });
        let got = route_of(json!({ "sni": "", "terminateTls": false, "upstreams": [
            up(json!("h2c")), up(json!("HTTP/1.1")), up(json!(2)), up(Value::Null),
            { "kind": "uds", "path": "", "protocol": "h3" },
        ] }))
        .unwrap_err();
        assert_eq!(
            got,
            vec![
                (
                    "routes[0].upstreams[0].protocol".into(),
                    "must be one of 'h2', 'http/1.1', got \"h2c\"".into()
                ),
                (
                    "routes[0].upstreams[1].protocol".into(),
                    "must be one of 'h2', 'http/1.1', got \"HTTP/1.1\"".into()
                ),
                (
                    "routes[0].upstreams[2].protocol".into(),
                    "must be one of 'h2', 'http/1.1', got 2".into()
                ),
                (
                    "routes[0].upstreams[4].protocol".into(),
                    "must be one of 'h2', 'http/1.1', got \"h3\"".into()
                ),
                (
                    "routes[0].upstreams[4].path".into(),
                    "must be a socket path of 1..=107 bytes, got \"\"".into()
                ),
            ]
        );
        let got = route_of(json!({ "sni": "", "terminateTls": false, "http2": false,
                                   "upstreams": [up(json!("http/1.1")), up(json!("h2"))] }))
        .unwrap_err();
        assert_eq!(got, vec![(
            "routes[0].http2".into(),
            "is false but upstreams[1] has protocol 'h2' (leave http2 out: an 'h2' upstream offers h2 in ALPN)".into()
        )]);
        let got = route_of(json!({ "sni": "", "terminateTls": false, "http2": true,
                                   "upstreams": [up(json!("http/1.1"))] }))
        .unwrap_err();
        assert_eq!(
            got,
            vec![(
                "routes[0].http2".into(),
                "offers h2 but no upstream serves it (every upstream has protocol 'http/1.1')"
                    .into()
            )]
        );
    }

    #[test]
    fn suspended_routes_and_resolved_routes() {
        let cfg = json!({
            "listeners": [{ "port": 9443 }],
            "routes": [
                { "sni": "*.apps.test", "suspended": true },
                { "sni": "b.test", "suspended": true, "suspendTimeoutMs": 250, "upstreams": [] },
            ],
        });
        let c = parse_proxy_config(&cfg, 1).unwrap();
        let t: Vec<_> = c.routes.iter().map(|r| r.suspend_timeout_ms).collect();
        assert_eq!(t, [Some(DEFAULT_SUSPEND_TIMEOUT_MS), Some(250)]);
        assert!(c.routes.iter().all(|r| r.upstreams.is_empty()));
        assert_eq!(
            c.listeners[0].max_pending_suspended,
            DEFAULT_MAX_PENDING_SUSPENDED
        );

        let l = &c.listeners[0];
        let up = json!({ "kind": "tcp", "host": "127.0.0.1", "port": 8080 });
        let r = parse_resolve_route(&json!({ "upstream": up, "terminateTls": false }), Some(l));
        let r = r.unwrap();
        assert_eq!(r.upstreams.len(), 1);
        assert_eq!(
            (r.sni.clone(), r.suspend_timeout_ms),
            (SniPattern::Default, None)
        );
        let paths = |v: Value, l: Option<&ListenerConfig>| -> Vec<String> {
            match parse_resolve_route(&v, l) {
                Ok(_) => vec![],
                Err(e) => e.issues.into_iter().map(|i| i.path).collect(),
            }
        };
        // A terminating route needs a cert when the connection's listener has no defaultCert;
        // with an unknown id (no listener) only the shape is checked.
        assert_eq!(paths(json!({ "upstreams": [up] }), Some(l)), ["route.cert"]);
        assert!(paths(json!({ "upstreams": [up] }), None).is_empty());
        assert_eq!(
            paths(
                json!({ "upstream": up, "upstreams": [up], "burst": 2, "ipAffinity": true }),
                None
            ),
            ["route.burst", "route.ipAffinity", "route.upstream"]
        );
        assert_eq!(
            paths(json!({ "terminateTls": false }), None),
            ["route.upstreams"]
        );
        assert_eq!(paths(json!(5), None), ["route"]);
    }

    #[test]
    fn cluster_rate_limit_needs_cluster() {
        let cfg = json!({
            "listeners": [{ "port": 9443, "protection": { "clusterRateLimit": { "connectionsPerSecond": 5 } } }],
            "routes": [{ "sni": "", "terminateTls": false, "upstreams": [{ "kind": "tcp", "host": "127.0.0.1", "port": 1 }] }],
        });
        let e = parse_proxy_config(&cfg, 1).unwrap_err();
        let got: Vec<_> = e.issues.iter().map(|i| i.path.as_str()).collect();
        assert_eq!(got, ["listeners[0].protection.clusterRateLimit"]);
    }

    #[test]
    fn tunnels_default_to_websocket_without_connect() {
        let tunnels_of = |tunnels: Value| {
            let mut route = json!({ "sni": "", "protocol": "http",
                                    "upstreams": [{ "kind": "tcp", "host": "127.0.0.1", "port": 1 }] });
            if !tunnels.is_null() {
                route["tunnels"] = tunnels;
            }
            let cfg = json!({ "listeners": [{ "port": 80, "mode": "http" }], "routes": [route] });
            let mut c = parse_proxy_config(&cfg, 1).unwrap();
            c.routes.remove(0).tunnels
        };
        let d = tunnels_of(Value::Null);
        assert_eq!(d, Tunnels::default());
        assert!(d.allows_upgrade(b"WebSocket/13"));
        assert!(!d.allows_upgrade(b"h2c") && !d.connect);
        let t = tunnels_of(json!({ "upgrade": ["TLS", "websocket"], "connect": true }));
        assert_eq!(&t.upgrade[..], ["tls", "websocket"]);
        assert!(t.connect && t.allows_upgrade(b" tls/1.2 "));
        let none = tunnels_of(json!({ "upgrade": [] }));
        assert!(none.upgrade.is_empty() && !none.allows_upgrade(b"websocket"));
    }
}
