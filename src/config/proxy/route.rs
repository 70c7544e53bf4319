//! `routes[]` (docs/config.md: Proxy: listeners and routes): SNI patterns, upstreams and their
//! protocols, balancing, forwarded request headers, tunnels ([`super::tunnels`]), mTLS, suspended
//! routes, and the route table's checks.

use super::capacity::{route_concurrency, CapacityConfig};
use super::cert::parse_cert;
use super::listener::ListenerConfig;
use super::source_header::{RouteDefaults, SourceAddressHeader};
use super::tunnels::Tunnels;
use super::upstream::{
    default_balance, fold_upstreams, AppProtocol, Balance, CpuSource, FoldedUpstreams, Upstream,
    DEFAULT_CONNECT_TIMEOUT_MS,
};
use crate::config::error::Issues;
use crate::config::mtls::Mtls;
use crate::config::value::{self as v, field, join};
use crate::tls::certs::CertifiedKey;
use crate::tls::options::TlsOptions;
use serde_json::{Map, Value};
use std::sync::Arc;

mod fields;
mod symphony;

pub(super) use symphony::is_build_rule;
pub use symphony::{ALL_H2, H2_PASSTHROUGH, XFF_HTTP2};

/// Default `routes[].suspendTimeoutMs`: a suspended connection waits this many ms for
/// `resolveConnection` before it is closed (`suspend_timeout`); Symphony's default.
pub const DEFAULT_SUSPEND_TIMEOUT_MS: u64 = 30_000;

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
    /// What each upstream serves, in the same order (`None`: any protocol): its `protocol`, or
    /// without one `'http/1.1'` beside marked upstreams ([`super::upstream`]'s fold).
    pub upstream_protocols: Vec<Option<AppProtocol>>,
    /// `upstreams[].pid` / `tid`, one per upstream: the worker whose CPU time weights
    /// least-connections balancing (`None`: not sampled).
    pub upstream_cpu: Vec<Option<CpuSource>>,
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
    /// `tls` of this route (versions, suites, groups, resumption), replacing the listener's.
    pub tls: Option<TlsOptions>,
    /// `metricsGroup`: the `group` of this route's metrics (default: the route's name).
    pub metrics_group: Option<String>,
    /// `balance` (default: least connections for an all-UDS set, else round robin).
    pub balance: Balance,
    /// `ipAffinity` + `ipAffinityTtlMs`: a client IP goes back to the upstream it last used
    /// while it reconnects within this many ms (`None`: off).
    pub ip_affinity_ttl_ms: Option<u64>,
    /// `suspended: true` + `suspendTimeoutMs`: a connection matching this route is held after
    /// the ClientHello and offered to JS (`'suspended'` event) for this many ms, until
    /// `resolveConnection` gives it a route (`None`: not suspended; docs/proxy.md: Suspended
    /// routes). A suspended route's `upstreams` may be empty.
    pub suspend_timeout_ms: Option<u64>,
    /// `concurrency`: the upstream capacity limit (docs/protection.md: Upstream capacity).
    pub concurrency: CapacityConfig,
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
    /// A route that writes request headers offers `http/1.1` only (docs/proxy.md: Forwarded request
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

/// Which route is parsed: a `routes[]` entry, or the route `resolveConnection` gives a suspended
/// connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RouteKind {
    /// A `routes[]` entry of the route table.
    Table,
    /// `resolveConnection(id, route)`: no `sni` needed, `upstream` (one, Symphony's shape) or
    /// `upstreams`; the route-table fields are refused.
    Resolve,
}

/// Route-table fields a resolved route cannot carry, each with the reason.
const TABLE_ONLY_FIELDS: [(&str, &str); 8] = [
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
    (
        "concurrency",
        "the suspended route's upstream capacity applies",
    ),
];

/// The fields of a `routes[]` entry (a `resolveConnection` route also takes `upstream`).
const ROUTE_FIELDS: [&str; 21] = [
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
    "tls",
    "concurrency",
];

/// Refuses the fields a route does not have, and on a `resolveConnection` route the route-table
/// fields.
fn reject_unknown_fields(
    obj: &Map<String, Value>,
    path: &str,
    kind: RouteKind,
    issues: &mut Issues,
) {
    let mut known = ROUTE_FIELDS.to_vec();
    if kind == RouteKind::Resolve {
        known.push("upstream");
        for (key, why) in TABLE_ONLY_FIELDS {
            if field(obj, key).is_some() {
                issues.push(join(path, key), format!("is a route-table field: {why}"));
            }
        }
    }
    v::reject_unknown(obj, &known, path, issues);
}

/// Parses one route. Problems of a field's own value (type, range, enumeration, unknown names)
/// go to `issues`; what fails when the route is built — its certificate, key or CA does not load
/// or match, its fields conflict with each other or with the listeners — goes to `build` (the
/// route alone is dropped when route isolation is on). `None` when either got a problem, except
/// when the route's `cert` alone failed to build: then the route without it (`cert: None`),
/// which must not be served as it is (the caller checks `build`). With
/// `defaults.symphony_route_rules` Symphony's rules are checked first ([`symphony`]).
pub(super) fn parse_route(
    val: &Value,
    path: &str,
    listeners: &[ListenerConfig],
    defaults: RouteDefaults,
    kind: RouteKind,
    issues: &mut Issues,
    build: &mut Issues,
) -> Option<RouteConfig> {
    let obj = v::object(val, path, issues)?;
    let before = issues.len();
    let build_before = build.len();
    reject_unknown_fields(obj, path, kind, issues);
    let table = kind == RouteKind::Table;
    if defaults.symphony_route_rules {
        symphony::check(obj, path, table, issues, build);
    }
    let (suspended, suspend_timeout_ms) = fields::suspension(obj, path, kind, issues);
    let protocol = fields::protocol(obj, path, issues);
    let rate_limit = fields::rate_limit(obj, path, table, issues, build);
    let sni = fields::sni(obj, path, kind, issues);
    let upstreams = fields::upstreams(obj, path, kind, suspended, issues, build);
    let terminate_tls_field = match field(obj, "terminateTls") {
        Some(b) => v::boolean(b, &join(path, "terminateTls"), issues),
        None => Some(true),
    };
    let terminate_tls = terminate_tls_field.unwrap_or(true);
    let cert_before = build.len();
    let cert = field(obj, "cert").and_then(|c| parse_cert(c, &join(path, "cert"), issues, build));
    let cert_failures = build.len() - cert_before;
    let http2_field = field(obj, "http2").and_then(|b| v::boolean(b, &join(path, "http2"), issues));
    let folded: FoldedUpstreams = upstreams
        .as_ref()
        .map(|(_, x, p)| fold_upstreams(x, p, build))
        .unwrap_or_default();
    let protocols = folded.protocols.as_slice();
    let marked = upstreams
        .as_ref()
        .is_some_and(|(_, x, _)| x.iter().all(|e| e.protocol.is_some_and(|p| p.is_some())));
    let http2 = check_http2(http2_field, protocols, marked, path, build);
    let sah = fields::source_address_header(obj, path, upstreams.as_ref(), defaults, issues);
    let ff = field(obj, "forwardFingerprint")
        .and_then(|f| parse_forward_fingerprint(f, &join(path, "forwardFingerprint"), issues))
        .unwrap_or(ForwardFingerprint::NONE);
    let protocol = fields::request_headers(
        obj,
        path,
        (sah, ff),
        terminate_tls_field,
        (protocol, http2, protocols),
        build,
    );
    let tunnels = fields::tunnels(
        obj,
        path,
        terminate_tls_field,
        (protocol, http2, protocols),
        issues,
        build,
    );
    let (mtls, tls) = fields::terminated_tls(obj, path, terminate_tls_field, issues, build);
    let metrics_group = fields::metrics_group(obj, path, table, issues);
    let balance = fields::balance(obj, path, issues);
    let ip_affinity_ttl_ms = fields::ip_affinity_ttl_ms(obj, path, table, &folded, issues, build);
    fields::check_balance(path, balance, &folded, build);
    let connect_timeout_ms = field(obj, "connectTimeoutMs")
        .and_then(|n| v::duration_ms(n, &join(path, "connectTimeoutMs"), 1, issues))
        .unwrap_or(DEFAULT_CONNECT_TIMEOUT_MS);
    fields::check_cert_required(
        obj,
        path,
        listeners,
        suspended,
        terminate_tls_field,
        cert.is_some(),
        build,
    );
    let http = protocol == RouteProtocol::Http || http2 || protocols.iter().any(Option::is_some);
    let cc = field(obj, "concurrency").filter(|_| table);
    let concurrency = route_concurrency(cc, path, http, issues);
    // Only the certificate failed: the route as configured but for it, which `updateConfig` may
    // serve with the live route's last good certificate (docs/proxy.md: Route isolation).
    let cert_only = cert_failures > 0 && build.len() - build_before == cert_failures;
    if issues.len() != before || (build.len() != build_before && !cert_only) {
        return None;
    }
    let (upstreams, _, _) = upstreams?;
    let cpu_weighted = folded.cpu.iter().any(Option::is_some);
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
        tls,
        metrics_group,
        ip_affinity_ttl_ms,
        suspend_timeout_ms: suspended.then_some(suspend_timeout_ms),
        concurrency: concurrency?,
        balance: balance.unwrap_or_else(|| {
            if cpu_weighted {
                Balance::LeastConnections
            } else {
                default_balance(&upstreams)
            }
        }),
        upstreams,
        upstream_protocols: folded.protocols,
        upstream_cpu: folded.cpu,
    })
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
    all_marked: bool,
    path: &str,
    issues: &mut Issues,
) -> bool {
    let h2_at = protocols.iter().position(|p| *p == Some(AppProtocol::H2));
    let all_http1 =
        !protocols.is_empty() && protocols.iter().all(|p| *p == Some(AppProtocol::Http1));
    let why = if all_marked {
        "every upstream has protocol 'http/1.1'"
    } else {
        "every upstream speaks 'http/1.1': one without protocol beside marked ones is an HTTP/1 worker; mark an h2c upstream protocol: 'h2' or 'any'"
    };
    match (http2_field, h2_at) {
        (Some(false), Some(i)) => issues.push(
            join(path, "http2"),
            format!(
                "is false but upstreams[{i}] has protocol 'h2' (leave http2 out: an 'h2' upstream offers h2 in ALPN)"
            ),
        ),
        (Some(true), _) if all_http1 => issues.push(
            join(path, "http2"),
            format!("offers h2 but no upstream serves it ({why})"),
        ),
        _ => {}
    }
    http2_field.unwrap_or(h2_at.is_some())
}
