//! The fields of one `routes[]` entry that take more than a line to parse, for
//! [`super::parse_route`]: each puts a problem of the field's own value in `issues` and a
//! conflict with another field (or with the listeners) in `build`.

use super::{
    parse_sni, ForwardFingerprint, RouteKind, RouteProtocol, SniPattern, DEFAULT_SUSPEND_TIMEOUT_MS,
};
use crate::config::error::Issues;
use crate::config::mtls::{parse_mtls_split, Mtls};
use crate::config::proxy::listener::{ListenerConfig, ListenerMode};
use crate::config::proxy::source_header::{RouteDefaults, SourceAddressHeader};
use crate::config::proxy::tunnels::{parse_tunnels, Tunnels};
use crate::config::proxy::upstream::{
    parse_upstream, AppProtocol, Balance, FoldedUpstreams, Upstream, UpstreamExtras,
    DEFAULT_IP_AFFINITY_TTL_MS,
};
use crate::config::tls::parse_tls;
use crate::config::value::{self as v, field, join};
use crate::tls::options::TlsOptions;
use serde_json::{Map, Value};

/// A route object.
type Obj = Map<String, Value>;

/// The upstreams of a route, their per-upstream extras and their paths.
pub(super) type ParsedUpstreams = (Vec<Upstream>, Vec<UpstreamExtras>, Vec<String>);

/// The largest `maxConnectionsPerSecond`.
const MAX_ROUTE_RATE: f64 = 1e9;

/// `suspended` and `suspendTimeoutMs` (route-table routes only).
pub(super) fn suspension(
    obj: &Obj,
    path: &str,
    kind: RouteKind,
    issues: &mut Issues,
) -> (bool, u64) {
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
    (suspended, suspend_timeout_ms)
}

/// `protocol`: `'opaque'` when left out.
pub(super) fn protocol(obj: &Obj, path: &str, issues: &mut Issues) -> RouteProtocol {
    match field(obj, "protocol") {
        Some(p) => match v::one_of(p, &join(path, "protocol"), &["http", "opaque"], issues) {
            Some("http") => RouteProtocol::Http,
            _ => RouteProtocol::Opaque,
        },
        None => RouteProtocol::Opaque,
    }
}

/// `mtls` and `tls`, which need a terminated route.
pub(super) fn terminated_tls(
    obj: &Obj,
    path: &str,
    terminate_tls_field: Option<bool>,
    issues: &mut Issues,
    build: &mut Issues,
) -> (Option<Mtls>, Option<TlsOptions>) {
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
    (mtls, tls)
}

/// `maxConnectionsPerSecond` and `burst` (route-table routes only): the rate and its burst
/// (default: the rate, rounded up).
pub(super) fn rate_limit(
    obj: &Obj,
    path: &str,
    table: bool,
    issues: &mut Issues,
    build: &mut Issues,
) -> Option<(f64, u64)> {
    let rate = field(obj, "maxConnectionsPerSecond")
        .filter(|_| table)
        .and_then(|n| {
            let p = join(path, "maxConnectionsPerSecond");
            let r = v::number_in(n, &p, 0.0, MAX_ROUTE_RATE, false, issues)?;
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
    rate.map(|r| (r, burst.unwrap_or_else(|| r.ceil().max(1.0) as u64)))
}

/// `sni`: required on a route-table route; a `resolveConnection` route without one is the
/// default route.
pub(super) fn sni(
    obj: &Obj,
    path: &str,
    kind: RouteKind,
    issues: &mut Issues,
) -> Option<SniPattern> {
    match obj.get("sni") {
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
    }
}

/// `upstreams` (or, on a `resolveConnection` route, `upstream`: one); none on a suspended route.
pub(super) fn upstreams(
    obj: &Obj,
    path: &str,
    kind: RouteKind,
    suspended: bool,
    issues: &mut Issues,
    build: &mut Issues,
) -> Option<ParsedUpstreams> {
    match (field(obj, "upstreams"), field(obj, "upstream")) {
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
    }
}

/// `sourceAddressHeader`; when left out, the proxy-wide default of a route with a Unix-socket
/// upstream, else none.
pub(super) fn source_address_header(
    obj: &Obj,
    path: &str,
    upstreams: Option<&ParsedUpstreams>,
    defaults: RouteDefaults,
    issues: &mut Issues,
) -> SourceAddressHeader {
    field(obj, "sourceAddressHeader")
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
                .is_some_and(|(u, _, _)| u.iter().any(|u| matches!(u, Upstream::Uds { .. })));
            if uds {
                defaults.uds_source_address_header
            } else {
                SourceAddressHeader::None
            }
        })
}

/// The checks of a route whose `sourceAddressHeader` or `forwardFingerprint` writes request
/// headers, and the route's protocol (`'http'` when such a route leaves it out).
pub(super) fn request_headers(
    obj: &Obj,
    path: &str,
    (sah, ff): (SourceAddressHeader, ForwardFingerprint),
    terminate_tls_field: Option<bool>,
    (protocol, http2, protocols): (RouteProtocol, bool, &[Option<AppProtocol>]),
    build: &mut Issues,
) -> RouteProtocol {
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
    protocol
}

/// `tunnels`, which needs a terminated route that carries HTTP.
pub(super) fn tunnels(
    obj: &Obj,
    path: &str,
    terminate_tls_field: Option<bool>,
    (protocol, http2, protocols): (RouteProtocol, bool, &[Option<AppProtocol>]),
    issues: &mut Issues,
    build: &mut Issues,
) -> Option<Tunnels> {
    field(obj, "tunnels").and_then(|t| {
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
    })
}

/// `metricsGroup` (route-table routes only).
pub(super) fn metrics_group(
    obj: &Obj,
    path: &str,
    table: bool,
    issues: &mut Issues,
) -> Option<String> {
    field(obj, "metricsGroup").filter(|_| table).and_then(|g| {
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
    })
}

/// `balance`.
pub(super) fn balance(obj: &Obj, path: &str, issues: &mut Issues) -> Option<Balance> {
    field(obj, "balance").and_then(|b| {
        match v::one_of(
            b,
            &join(path, "balance"),
            &["leastConnections", "roundRobin"],
            issues,
        )? {
            "leastConnections" => Some(Balance::LeastConnections),
            _ => Some(Balance::RoundRobin),
        }
    })
}

/// `balance: 'roundRobin'` beside an upstream weighted by CPU time (`pid`).
pub(super) fn check_balance(
    path: &str,
    balance: Option<Balance>,
    folded: &FoldedUpstreams,
    build: &mut Issues,
) {
    if balance == Some(Balance::RoundRobin) && folded.cpu.iter().any(Option::is_some) {
        build.push(
            join(path, "balance"),
            "is 'roundRobin' but an upstream gives pid: CPU time weights least-connections balancing (leave balance out)",
        );
    }
}

/// `ipAffinity` and `ipAffinityTtlMs`, on the route or (not both) on its upstreams: the
/// affinity's TTL, `None` without affinity.
pub(super) fn ip_affinity_ttl_ms(
    obj: &Obj,
    path: &str,
    table: bool,
    folded: &FoldedUpstreams,
    issues: &mut Issues,
    build: &mut Issues,
) -> Option<u64> {
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
    match folded.affinity {
        Some(upstream_level) if table => upstream_level,
        _ => affinity.then(|| affinity_ttl.unwrap_or(DEFAULT_IP_AFFINITY_TTL_MS)),
    }
}

/// A terminated route needs a `cert` when a TLS listener has no `defaultCert` (a suspended
/// route's connections are served by the route `resolveConnection` gives).
pub(super) fn check_cert_required(
    obj: &Obj,
    path: &str,
    listeners: &[ListenerConfig],
    suspended: bool,
    terminate_tls_field: Option<bool>,
    cert_parsed: bool,
    build: &mut Issues,
) {
    if !suspended
        && terminate_tls_field == Some(true)
        && !cert_parsed
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
}
