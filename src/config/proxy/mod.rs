//! `ProxyConfig`, `ListenerConfig` and `RouteConfig` (docs/config.md: Proxy: listeners and routes):
//! parsing and validation.
//!
//! Everything is checked and compiled here (PEM parsed into rustls keys, SNI patterns normalised,
//! protection policies compiled) so that applying a config is a pointer swap that cannot fail.

mod capacity;
mod cert;
mod listener;
mod route;
mod source_header;
mod table;
mod tunnels;
mod upstream;

pub use capacity::*;
pub use listener::*;
pub use route::*;
pub use source_header::*;
pub use table::*;
pub use tunnels::Tunnels;
pub use upstream::*;

use listener::{bind_address, check_port_conflicts, parse_listener, share_port_policies};

use crate::config::error::{ConfigError, Issues};
use crate::config::socket::{parse_socket_options, SocketOptions, SOCKET_FIELDS};
use crate::config::value::{self as v, field};
use serde_json::Value;
use std::net::SocketAddr;

/// The whole validated proxy config.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// Listeners, in the order given.
    pub listeners: Vec<ListenerConfig>,
    /// Routes, compiled (those that failed to build are in `failing_routes`).
    pub routes: Vec<RouteConfig>,
    /// Routes left out because they failed to build (`isolateRoutes`, docs/proxy.md: Route
    /// isolation).
    pub failing_routes: Vec<FailingRoute>,
    /// `isolateRoutes` (default true): a route that fails to build is dropped and reported
    /// instead of failing the whole config (the constructor's and every `updateConfig`'s).
    pub isolate_routes: bool,
    /// Connection worker threads (each a current-thread tokio runtime), also the number of
    /// SO_REUSEPORT sockets per listener: worker `i` owns socket `i` of every listener.
    pub worker_threads: usize,
    /// `'blocked'` events per second before they are only counted.
    pub blocked_events_per_second: u64,
    /// `tcpKeepalive`, `halfCloseTimeoutMs` and the copy buffer sizes.
    pub socket: SocketOptions,
    /// The cluster tier on Redis (`cluster`), if configured.
    pub cluster: Option<super::cluster::ClusterConfig>,
    /// `overload`: signals of the embedding process that count as upstream overload.
    pub overload: OverloadConfig,
    /// What a route that leaves a field out gets (`udsSourceAddressHeader`) and whether
    /// Symphony's route rules apply (`symphonyRouteRules`), for the routes of `updateConfig` and
    /// `resolveConnection` too.
    pub route_defaults: RouteDefaults,
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
        "overload",
        "isolateRoutes",
        "udsSourceAddressHeader",
        "symphonyRouteRules",
    ];
    known.extend(SOCKET_FIELDS);
    v::reject_unknown(obj, &known, "", &mut issues);
    let socket = parse_socket_options(obj, &mut issues);
    let route_defaults = parse_route_defaults(obj, &mut issues);
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
    let isolate_routes = field(obj, "isolateRoutes")
        .and_then(|b| v::boolean(b, "isolateRoutes", &mut issues))
        .unwrap_or(true);
    let routes = match field(obj, "routes") {
        Some(r) => {
            let d = route_defaults;
            parse_routes(
                r,
                "routes",
                &listeners,
                d,
                isolate_routes,
                RoutesOf::Constructor,
                &mut issues,
            )
        }
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
    let overload = field(obj, "overload")
        .and_then(|o| parse_overload(o, "overload", &mut issues))
        .unwrap_or_default();
    let ParsedRoutes {
        routes, failing, ..
    } = routes.unwrap_or_default();
    issues.finish(ProxyConfig {
        overload,
        listeners,
        routes,
        failing_routes: failing,
        isolate_routes,
        worker_threads,
        blocked_events_per_second,
        socket,
        cluster,
        route_defaults,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

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
    fn redirect_unknown_hosts_is_for_http_listeners() {
        assert!(
            issues_of(json!([{"port": 80, "mode": "http", "redirectUnknownHosts": true}]))
                .is_empty()
        );
        assert_eq!(
            issues_of(json!([
                {"port": 80, "mode": "http", "redirectUnknownHosts": "yes"},
                {"port": 443, "redirectUnknownHosts": true},
            ])),
            [
                (
                    "listeners[0].redirectUnknownHosts".to_string(),
                    "must be a boolean, got \"yes\"".to_string()
                ),
                (
                    "listeners[1].redirectUnknownHosts".to_string(),
                    "has no use on a mode 'tls' listener (it redirects plain HTTP); leave it out"
                        .to_string()
                ),
            ]
        );
        let cfg = json!({"listeners": [{"port": 80, "mode": "http"}], "routes": []});
        let parsed = parse_proxy_config(&cfg, 1).unwrap();
        assert!(!parsed.listeners[0].redirect_unknown_hosts);
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
        let unmarked = json!({ "kind": "uds", "path": "/tmp/x.sock" });
        let any = json!({ "kind": "uds", "path": "/tmp/x.sock", "protocol": "any" });
        use AppProtocol::{Http1, H2};
        // Symphony's split: beside marked upstreams, one without `protocol` is the HTTP/1 worker.
        let r = route_of(json!({ "sni": "", "terminateTls": false,
                                 "upstreams": [unmarked, up(json!("h2"))] }))
        .unwrap();
        assert_eq!(r.upstream_protocols, [Some(Http1), Some(H2)]);
        assert_eq!(r.alpn_offered(), [b"h2".to_vec(), b"http/1.1".to_vec()]);
        assert_eq!((r.serves(0, H2), r.serves(0, Http1)), (false, true));
        // `'any'` serves both in any set.
        let r = route_of(json!({ "sni": "", "terminateTls": false,
                                 "upstreams": [up(json!("h2")), up(json!("http/1.1")), any] }))
        .unwrap();
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
        // Without protocols http2 decides: http/1.1 alone by default, h2 too with http2: true.
        let r = route_of(
            json!({ "sni": "", "terminateTls": false, "http2": true, "upstreams": [unmarked] }),
        )
        .unwrap();
        assert_eq!(r.alpn_offered(), [b"h2".to_vec(), b"http/1.1".to_vec()]);
        let r =
            route_of(json!({ "sni": "", "terminateTls": false, "upstreams": [unmarked] })).unwrap();
        assert_eq!(r.alpn_offered(), [b"http/1.1".to_vec()]);
        assert!(!r.carries_http());
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
                    "must be one of 'h2', 'http/1.1', 'any', got \"h2c\"".into()
                ),
                (
                    "routes[0].upstreams[1].protocol".into(),
                    "must be one of 'h2', 'http/1.1', 'any', got \"HTTP/1.1\"".into()
                ),
                (
                    "routes[0].upstreams[2].protocol".into(),
                    "must be one of 'h2', 'http/1.1', 'any', got 2".into()
                ),
                (
                    "routes[0].upstreams[4].protocol".into(),
                    "must be one of 'h2', 'http/1.1', 'any', got \"h3\"".into()
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
        let d = RouteDefaults::default();
        let r = parse_resolve_route(
            &json!({ "upstream": up, "terminateTls": false }),
            Some(l),
            d,
        );
        let r = r.unwrap();
        assert_eq!(r.upstreams.len(), 1);
        assert_eq!(
            (r.sni.clone(), r.suspend_timeout_ms),
            (SniPattern::Default, None)
        );
        let paths = |v: Value, l: Option<&ListenerConfig>| -> Vec<String> {
            match parse_resolve_route(&v, l, d) {
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
