//! `routes[]` (docs/config.md: Proxy: listeners and routes): SNI patterns, upstreams and their
//! protocols, balancing, forwarded request headers, tunnels ([`super::tunnels`]), mTLS, suspended
//! routes, and the route table's checks.

use super::capacity::{route_concurrency, CapacityConfig};
use super::cert::parse_cert;
use super::listener::{ListenerConfig, ListenerMode};
use super::source_header::{RouteDefaults, SourceAddressHeader};
use super::tunnels::{parse_tunnels, Tunnels};
use super::upstream::{
    default_balance, fold_upstreams, parse_upstream, AppProtocol, Balance, CpuSource,
    FoldedUpstreams, Upstream, DEFAULT_CONNECT_TIMEOUT_MS, DEFAULT_IP_AFFINITY_TTL_MS,
};
use crate::config::error::Issues;
use crate::config::mtls::{parse_mtls_split, Mtls};
use crate::config::tls::parse_tls;
use crate::config::value::{self as v, field, join};
use crate::tls::certs::CertifiedKey;
use crate::tls::options::TlsOptions;
use serde_json::Value;
use std::sync::Arc;

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

/// Parses one route. Problems of a field's own value (type, range, enumeration, unknown names)
/// go to `issues`; what fails when the route is built — its certificate, key or CA does not load
/// or match, its fields conflict with each other or with the listeners — goes to `build` (the
/// route alone is dropped when route isolation is on). `None` when either got a problem, except
/// when the route's `cert` alone failed to build: then the route without it (`cert: None`),
/// which must not be served as it is (the caller checks `build`).
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
        "tls",
        "concurrency",
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
        build.push(join(path, "burst"), "needs maxConnectionsPerSecond");
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
            let p = join(path, "upstream");
            parse_upstream(u, &p, issues, build).map(|(u, x)| (vec![u], vec![x], vec![p]))
        }
        (Some(u), _) => {
            let up = join(path, "upstreams");
            v::array(u, &up, issues).and_then(|a| {
                if a.is_empty() && suspended {
                    return Some(Default::default());
                }
                if a.is_empty() {
                    issues.push(&up, "must hold at least one upstream");
                    return None;
                }
                let paths: Vec<String> = (0..a.len()).map(|i| v::index(&up, i)).collect();
                let list: Vec<_> = a
                    .iter()
                    .zip(&paths)
                    .filter_map(|(x, p)| parse_upstream(x, p, issues, build))
                    .collect();
                (list.len() == a.len()).then(|| {
                    let (ups, extras) = list.into_iter().unzip::<_, _, Vec<_>, Vec<_>>();
                    (ups, extras, paths)
                })
            })
        }
        (None, _) if suspended => Some(Default::default()),
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
        .unwrap_or_else(|| {
            let uds = upstreams
                .as_ref()
                .is_some_and(|(u, _, _)| u.iter().any(|u| matches!(u, Upstream::Uds { .. })));
            if uds {
                defaults.uds_source_address_header
            } else {
                SourceAddressHeader::None
            }
        });
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
            build.push(
                join(path, key),
                format!("sets HTTP request headers: needs terminateTls: true{why}"),
            );
        }
        if protocol == RouteProtocol::Opaque && !http2 {
            build.push(
                join(path, key),
                format!("sets HTTP request headers: needs protocol: 'http'{why}"),
            );
        }
        if let Some(i) = protocols.iter().position(|p| *p == Some(AppProtocol::H2)) {
            build.push(
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
            build.push(
                &p,
                "needs terminateTls: true (the bytes of a passthrough route are encrypted)",
            );
        } else if protocol == RouteProtocol::Opaque
            && !http2
            && protocols.iter().all(Option::is_none)
        {
            build.push(
                &p,
                "needs protocol: 'http' (only an HTTP route's requests are followed)",
            );
        }
        tunnels
    });
    let mtls = field(obj, "mtls")
        .and_then(|m| parse_mtls_split(m, &join(path, "mtls"), false, issues, build));
    if field(obj, "mtls").is_some() && terminate_tls_field == Some(false) {
        build.push(
            join(path, "mtls"),
            "needs terminateTls: true (client certificates are verified where TLS is terminated)",
        );
    }
    let tls = field(obj, "tls").and_then(|t| parse_tls(t, &join(path, "tls"), issues));
    if field(obj, "tls").is_some() && terminate_tls_field == Some(false) {
        build.push(
            join(path, "tls"),
            "needs terminateTls: true (a passthrough route's TLS is the upstream's)",
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
        build.push(join(path, "ipAffinityTtlMs"), "needs ipAffinity: true");
    }
    let route_affinity =
        field(obj, "ipAffinity").is_some() || field(obj, "ipAffinityTtlMs").is_some();
    if let (Some(i), true, true) = (folded.affinity_at, route_affinity, table) {
        build.push(
            join(path, "ipAffinity"),
            format!("and upstreams[{i}].ipAffinity are both given: give the affinity once, on the route or on the upstreams"),
        );
    }
    let ip_affinity_ttl_ms = match folded.affinity {
        Some(upstream_level) if table => upstream_level,
        _ => affinity.then(|| affinity_ttl.unwrap_or(DEFAULT_IP_AFFINITY_TTL_MS)),
    };
    if balance == Some(Balance::RoundRobin) && folded.cpu.iter().any(Option::is_some) {
        build.push(
            join(path, "balance"),
            "is 'roundRobin' but an upstream gives pid: CPU time weights least-connections balancing (leave balance out)",
        );
    }
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
            build.push(
                join(path, "cert"),
                format!(
                    "is required when terminateTls is true and a listener has no defaultCert ({})",
                    missing.join(", ")
                ),
            );
        }
    }
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
