//! The runtime operations' arguments: `updateConfig(update)`, `blockIp(cidr, opts)` and
//! `unblockIp(cidr, opts)`, validated in full into typed requests before anything changes.
//!
//! Each parser collects every problem (with its path: `routes[1].sni`,
//! `protection[0].protection.rateLimit.burst`, `opts.ttlMs`, `cidr`) and returns one
//! [`ConfigError`]; a returned request is complete, so applying it cannot fail on input.

use super::error::{ConfigError, ConfigIssue, Issues};
use super::protection::parse_protection;
use super::proxy::{
    parse_routes, ListenerConfig, ParsedRoutes, RouteDefaults, RoutesOf, NEEDS_CLUSTER,
};
use super::value::{self as v, field};
use crate::protection::cidr::parse_cidr;
use crate::protection::ProtectionPolicy;
use ipnet::IpNet;
use serde_json::Value;
use std::sync::Arc;

/// Longest `blockIp` reason kept, in characters (longer ones are cut).
pub const MAX_REASON_CHARS: usize = 200;

/// A validated `updateConfig` argument.
#[derive(Debug, Clone, Default)]
pub struct ConfigUpdate {
    /// The new route table, if `routes` was given (replaces the whole table), with the given
    /// routes that failed to build (`isolateRoutes`): left out of the new table and reported.
    pub routes: Option<ParsedRoutes>,
    /// New protection per port, in the order given; each port appears once. `None` removes
    /// protection from that port's listeners.
    pub protection: Vec<PortProtection>,
}

/// One `protection[i]` item of an update.
#[derive(Debug, Clone)]
pub struct PortProtection {
    /// A listener port of this proxy (it names every listener on that port).
    pub port: u16,
    /// The compiled policy, or `None` (`protection: null`) to remove it.
    pub policy: Option<Arc<ProtectionPolicy>>,
}

pub use crate::protection::dynamic::BlockRequest;

/// A validated `unblockIp(cidr, { port })`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnblockRequest {
    /// The network whose block is removed (canonical).
    pub net: IpNet,
    /// Only the entry for this port; `None` = every entry of that CIDR.
    pub port: Option<u16>,
}

fn known_ports(listeners: &[ListenerConfig]) -> String {
    let mut ports: Vec<u16> = listeners.iter().map(|l| l.port).collect();
    ports.sort_unstable();
    ports.dedup();
    ports
        .iter()
        .map(u16::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// A listener port: an integer 1..=65535 that one of `listeners` has.
fn listener_port(
    v: &Value,
    path: &str,
    listeners: &[ListenerConfig],
    issues: &mut Issues,
) -> Option<u16> {
    let port = v::number_in(v, path, 1.0, 65535.0, true, issues)? as u16;
    if listeners.iter().any(|l| l.port == port) {
        Some(port)
    } else {
        issues.push(
            path,
            format!(
                "no listener on port {port}; listeners: {}",
                known_ports(listeners)
            ),
        );
        None
    }
}

/// Validates an `updateConfig` argument against the running `listeners`, its routes with the
/// proxy's `defaults`; `isolate` is the proxy's `isolateRoutes` (a route that fails to build is
/// set apart, unless all do).
pub fn parse_update(
    u: &Value,
    listeners: &[ListenerConfig],
    defaults: RouteDefaults,
    has_cluster: bool,
    isolate: bool,
) -> Result<ConfigUpdate, ConfigError> {
    let mut issues = Issues::default();
    let Some(obj) = v::object(u, "update", &mut issues) else {
        return Err(ConfigError::new(issues.0));
    };
    v::reject_unknown(obj, &["routes", "protection"], "", &mut issues);
    let routes = field(obj, "routes").and_then(|r| {
        parse_routes(
            r,
            "routes",
            listeners,
            defaults,
            isolate,
            RoutesOf::Update,
            &mut issues,
        )
    });
    let mut protection: Vec<PortProtection> = Vec::new();
    if let Some(arr) = field(obj, "protection").and_then(|p| v::array(p, "protection", &mut issues))
    {
        for (i, item) in arr.iter().enumerate() {
            let path = v::index("protection", i);
            let Some(o) = v::object(item, &path, &mut issues) else {
                continue;
            };
            v::reject_unknown(o, &["port", "protection"], &path, &mut issues);
            let port_path = v::join(&path, "port");
            let port = match field(o, "port") {
                Some(pv) => listener_port(pv, &port_path, listeners, &mut issues),
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
                Some(pv) => {
                    // Named beside the policy's other problems (the constructor's rule).
                    let wants_cluster = pv
                        .as_object()
                        .is_some_and(|o| field(o, "clusterRateLimit").is_some());
                    if wants_cluster && !has_cluster {
                        issues.push(v::join(&pol_path, "clusterRateLimit"), NEEDS_CLUSTER);
                    }
                    match parse_protection(pv, &pol_path, &mut issues) {
                        Some(p) => Some(Arc::new(p)),
                        None => continue,
                    }
                }
            };
            if let Some(port) = port {
                if protection.iter().any(|p| p.port == port) {
                    issues.push(&port_path, "the same port appears twice in this update");
                }
                protection.push(PortProtection { port, policy });
            }
        }
    }
    issues.finish(ConfigUpdate { routes, protection })
}

/// The `cidr` argument, parsed once with the CIDR rules.
fn cidr_arg(cidr: &str, issues: &mut Issues) -> Option<IpNet> {
    match parse_cidr(cidr) {
        Ok(net) => Some(net),
        Err(message) => {
            issues.0.push(ConfigIssue {
                path: "cidr".into(),
                message,
            });
            None
        }
    }
}

/// The `opts` object of `blockIp` / `unblockIp` (`null` = none): `(ttlMs, reason, port)`.
fn block_opts(
    opts: &Value,
    known: &[&str],
    listeners: &[ListenerConfig],
    issues: &mut Issues,
) -> (Option<u64>, Option<String>, Option<u16>) {
    if opts.is_null() {
        return (None, None, None);
    }
    let Some(o) = v::object(opts, "opts", issues) else {
        return (None, None, None);
    };
    v::reject_unknown(o, known, "opts", issues);
    let ttl = field(o, "ttlMs").and_then(|t| v::duration_ms(t, "opts.ttlMs", 1, issues));
    let reason = field(o, "reason")
        .and_then(|r| v::string(r, "opts.reason", issues))
        .map(|s| s.chars().take(MAX_REASON_CHARS).collect());
    let port = field(o, "port").and_then(|p| listener_port(p, "opts.port", listeners, issues));
    (ttl, reason, port)
}

/// Validates `blockIp(cidr, opts)`.
pub fn parse_block(
    cidr: &str,
    opts: &Value,
    listeners: &[ListenerConfig],
) -> Result<BlockRequest, ConfigError> {
    let mut issues = Issues::default();
    let net = cidr_arg(cidr, &mut issues);
    let (ttl_ms, reason, port) =
        block_opts(opts, &["ttlMs", "reason", "port"], listeners, &mut issues);
    match net {
        Some(net) if issues.is_empty() => Ok(BlockRequest {
            net,
            ttl_ms,
            reason,
            port,
        }),
        _ => Err(ConfigError::new(issues.0)),
    }
}

/// Validates `explain(ip)`'s argument: one IPv4 or IPv6 address, no prefix length (an
/// IPv4-mapped IPv6 address is taken as its IPv4 address). A ConfigError at `ip` otherwise.
pub fn parse_explain_ip(ip: &str) -> Result<std::net::IpAddr, ConfigError> {
    ip.trim()
        .parse::<std::net::IpAddr>()
        .map(|a| a.to_canonical())
        .map_err(|_| {
            ConfigError::new(vec![ConfigIssue {
                path: "ip".into(),
                message: format!(
                    "must be an IPv4 or IPv6 address (no /length, no zone), got {:?}{}",
                    ip.chars().take(64).collect::<String>(),
                    if ip.chars().nth(64).is_some() {
                        "…"
                    } else {
                        ""
                    }
                ),
            }])
        })
}

/// Validates `unblockIp(cidr, opts)`.
pub fn parse_unblock(
    cidr: &str,
    opts: &Value,
    listeners: &[ListenerConfig],
) -> Result<UnblockRequest, ConfigError> {
    let mut issues = Issues::default();
    let net = cidr_arg(cidr, &mut issues);
    let (_, _, port) = block_opts(opts, &["port"], listeners, &mut issues);
    match net {
        Some(net) if issues.is_empty() => Ok(UnblockRequest { net, port }),
        _ => Err(ConfigError::new(issues.0)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::proxy::parse_proxy_config;
    use serde_json::json;

    fn listeners() -> Vec<ListenerConfig> {
        let cfg = json!({
            "listeners": [{ "port": 9443 }],
            "routes": [{ "sni": "", "terminateTls": false,
                         "upstreams": [{ "kind": "tcp", "host": "127.0.0.1", "port": 1 }] }],
        });
        parse_proxy_config(&cfg, 1).unwrap().listeners
    }

    #[test]
    fn cluster_rate_limit_needs_cluster_in_an_update_too() {
        let u = json!({ "protection": [
            { "port": 9443, "protection": { "clusterRateLimit": { "connectionsPerSecond": 5 },
                                            "rateLimit": { "connectionsPerSecond": -1 } } },
        ] });
        let got: Vec<String> =
            parse_update(&u, &listeners(), RouteDefaults::default(), false, true)
                .unwrap_err()
                .issues
                .iter()
                .map(|i| i.path.clone())
                .collect();
        assert_eq!(
            got,
            [
                "protection[0].protection.clusterRateLimit",
                "protection[0].protection.rateLimit.connectionsPerSecond",
            ],
            "every offending field at once"
        );
        let u = json!({ "protection": [
            { "port": 9443, "protection": { "clusterRateLimit": { "connectionsPerSecond": 5 } } },
        ] });
        let e = parse_update(&u, &listeners(), RouteDefaults::default(), false, true).unwrap_err();
        let got: Vec<(&str, &str)> = e
            .issues
            .iter()
            .map(|i| (i.path.as_str(), i.message.as_str()))
            .collect();
        assert_eq!(
            got,
            [("protection[0].protection.clusterRateLimit", NEEDS_CLUSTER)]
        );
        let ok = parse_update(&u, &listeners(), RouteDefaults::default(), true, true).unwrap();
        assert!(ok.protection[0]
            .policy
            .as_ref()
            .unwrap()
            .cluster_rate_limit()
            .is_some());
    }
}
