//! `listeners[]` (docs/config.md: Proxy: listeners and routes): addresses, modes, certificates,
//! PROXY protocol input, socket options, each listener's protection, and the checks across
//! listeners (ports two listeners cannot share, the one policy of a shared port).

use super::cert::parse_cert;
use crate::config::error::Issues;
use crate::config::mtls::{parse_mtls, Mtls};
use crate::config::protection::{cidrs, parse_protection};
use crate::config::tls::parse_tls;
use crate::config::value::{self as v, field, join};
use crate::protection::cidr::CidrSet;
use crate::protection::ProtectionPolicy;
use crate::tls::certs::CertifiedKey;
use crate::tls::options::TlsOptions;
use serde_json::Value;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

/// Default idle timeout of a proxied connection, in ms (no bytes in either direction).
pub const DEFAULT_IDLE_TIMEOUT_MS: u64 = 60_000;

/// Default cap on `'blocked'` events per second.
pub const DEFAULT_BLOCKED_EVENTS_PER_SECOND: u64 = 1_000;

/// Default time a trusted peer has to send its whole PROXY header, in ms
/// (`acceptProxyProtocol.timeoutMs`).
pub const DEFAULT_PROXY_HEADER_TIMEOUT_MS: u64 = 3_000;

/// Default `listeners[].maxPendingSuspended`: suspended connections one listener holds at once;
/// beyond it a connection for a suspended route is closed at once (`suspend_queue_full`).
pub const DEFAULT_MAX_PENDING_SUSPENDED: u64 = 1_024;

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
    /// Close a proxied connection after this many ms without a byte in either direction; 0: no
    /// idle timeout (`idleTimeoutMs: 0`, as in Symphony). Read it through [`Self::idle_timeout`].
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
    /// (docs/proxy.md: Suspended routes).
    pub max_pending_suspended: u64,
    /// `tls`: versions, suites, groups and resumption of its terminated routes (a route's own
    /// `tls` replaces it).
    pub tls: TlsOptions,
    /// `redirectUnknownHosts` (mode 'http' only, default false): a request that is not an ACME
    /// challenge is redirected to https whatever its `Host` (Symphony's HTTP listener); false
    /// answers `404` for a `Host` no route serves.
    pub redirect_unknown_hosts: bool,
}

/// A listener's position in the config's `listeners[]`, which is also its index among the
/// running proxy's listeners (their engines, counters and suspended connections).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ListenerId(pub usize);

/// What a listener speaks (`listeners[].mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ListenerMode {
    /// TLS: SNI routing, termination or passthrough (the default).
    #[default]
    Tls,
    /// HTTP/1.1 without TLS: `GET /.well-known/acme-challenge/<token>` is proxied to the route
    /// whose `sni` matches `Host`, everything else is redirected to https (docs/proxy.md: HTTP
    /// listener).
    Http,
}

/// `listeners[].acceptProxyProtocol` (docs/proxy.md: Client addresses from a load balancer).
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

    /// `idleTimeoutMs` as a duration; `None` for 0 (no idle timeout).
    pub fn idle_timeout(&self) -> Option<std::time::Duration> {
        (self.idle_timeout_ms > 0).then(|| std::time::Duration::from_millis(self.idle_timeout_ms))
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
pub(super) fn bind_address(x: &Value) -> Option<SocketAddr> {
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

pub(super) fn parse_listener(
    val: &Value,
    path: &str,
    issues: &mut Issues,
) -> Option<ListenerConfig> {
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
            "tls",
            "redirectUnknownHosts",
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
    let default_cert = field(obj, "defaultCert").and_then(|c| {
        let mut build = Issues::default();
        let k = parse_cert(c, &join(path, "defaultCert"), issues, &mut build);
        issues.0.extend(build.0);
        k
    });
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
        .and_then(|n| v::duration_ms(n, &join(path, "idleTimeoutMs"), 0, issues))
        .unwrap_or(DEFAULT_IDLE_TIMEOUT_MS);
    let protection = field(obj, "protection")
        .and_then(|p| parse_protection(p, &join(path, "protection"), issues))
        .map(Arc::new);
    let mtls = field(obj, "mtls").and_then(|m| parse_mtls(m, &join(path, "mtls"), true, issues));
    let max_pending_suspended = field(obj, "maxPendingSuspended")
        .and_then(|n| v::count(n, &join(path, "maxPendingSuspended"), 1, issues))
        .unwrap_or(DEFAULT_MAX_PENDING_SUSPENDED);
    let tls = field(obj, "tls").and_then(|t| parse_tls(t, &join(path, "tls"), issues));
    if mode == ListenerMode::Http && field(obj, "tls").is_some() {
        issues.push(
            join(path, "tls"),
            "has no use on a mode 'http' listener (no TLS there); leave it out",
        );
    }
    let redirect_unknown_hosts = field(obj, "redirectUnknownHosts")
        .and_then(|b| v::boolean(b, &join(path, "redirectUnknownHosts"), issues))
        .unwrap_or(false);
    if mode != ListenerMode::Http && field(obj, "redirectUnknownHosts").is_some() {
        issues.push(
            join(path, "redirectUnknownHosts"),
            "has no use on a mode 'tls' listener (it redirects plain HTTP); leave it out",
        );
    }
    if issues.len() != before {
        return None;
    }
    Some(ListenerConfig {
        redirect_unknown_hosts,
        tls: tls.unwrap_or_default(),
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

/// Several listeners on one port (docs/config.md: Proxy: listeners and routes): the same host and
/// port twice, and a specific address beside a wildcard that already takes it, are errors naming
/// both listeners. `::` is dual-stack here (IPV6_V6ONLY is cleared), so it takes every IPv4 address
/// too: beside `::` a port can have no other listener. `binds` holds `(index, host:port)` of each
/// listener whose host and port are valid.
pub(super) fn check_port_conflicts(binds: &[(usize, SocketAddr)], issues: &mut Issues) {
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
pub(super) fn share_port_policies(
    parsed: &mut [(usize, ListenerConfig)],
    arr: &[Value],
    issues: &mut Issues,
) {
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
