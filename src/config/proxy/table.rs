//! The route table's config (`routes`, docs/proxy.md: Route isolation): every route parsed, and the
//! routes that fail to build set apart, so that one tenant's broken certificate or conflicting
//! setting drops that tenant's route only; and `resolveConnection`'s route.
//!
//! A field's own value (its type, range, enumeration, an unknown field name) is checked for the
//! whole config: any such problem fails it whole, as before. What fails when a route is built —
//! its certificate or key does not load or they do not match, its `mtls` CA does not load, its
//! fields conflict with each other or with the listeners, its `sni` repeats an earlier route's —
//! drops that route alone ([`FailingRoute`]) while `isolateRoutes` is on (the default); a
//! `routes` list in which every route fails still fails as a whole.

use super::listener::ListenerConfig;
use super::route::{is_build_rule, parse_route, RouteConfig, RouteKind};
use super::source_header::RouteDefaults;
use crate::config::error::{ConfigError, ConfigIssue, Issues};
use crate::config::value::{self as v, join};
use serde_json::Value;
use std::collections::HashMap;

/// A route that failed to build: left out of the route table and reported (`'error'` with code
/// `route_failed`, `metrics().failingRoutes`) — or, when only its certificate failed and the live
/// table serves the same `sni` with a certificate of its own, served with that last good
/// certificate ([`ParsedRoutes::carry_last_good`], `updateConfig` only).
#[derive(Debug, Clone)]
pub struct FailingRoute {
    /// Its index in `routes`.
    pub index: usize,
    /// Its name: the `sni` as written (`''` for the default route; `null` in JS when `sni` was not
    /// a string).
    pub route: Option<String>,
    /// Why, one entry per problem, with paths under `routes[index]`.
    pub issues: Vec<ConfigIssue>,
    /// The route as configured but for its certificate, when that alone failed.
    pub without_cert: Option<Box<RouteConfig>>,
    /// Served with the live route's last good certificate.
    pub last_good_cert: bool,
}

impl FailingRoute {
    /// One line for an `'error'` event: the route, and every problem with its path.
    pub fn message(&self) -> String {
        let name = match &self.route {
            Some(n) => format!("route {n:?}"),
            None => "a route".into(),
        };
        let why: Vec<String> = (self.issues.iter())
            .map(|i| format!("{}: {}", i.path, i.message))
            .collect();
        let outcome = if self.last_good_cert {
            "serves its last good certificate"
        } else {
            "is not served; the other routes are"
        };
        format!(
            "{name} (routes[{}]) failed to build and {outcome}: {}",
            self.index,
            why.join("; ")
        )
    }
}

/// `routes`, parsed: the routes to serve, in config order, and those set apart.
#[derive(Debug, Clone, Default)]
pub struct ParsedRoutes {
    /// Routes that built.
    pub routes: Vec<RouteConfig>,
    /// Each route's index in `routes` as given.
    pub indices: Vec<usize>,
    /// Routes that failed to build (empty when `isolateRoutes` is off: then any failure fails the
    /// whole config).
    pub failing: Vec<FailingRoute>,
}

impl ParsedRoutes {
    /// When routes were given and none will serve: the error listing every route's problems (the
    /// update then changes nothing).
    pub fn all_failed(&self) -> Option<ConfigError> {
        if !self.routes.is_empty() || self.failing.is_empty() {
            return None;
        }
        let issues = self.failing.iter().flat_map(|f| f.issues.iter().cloned());
        Some(ConfigError::new(issues.collect()))
    }

    /// For `updateConfig`: a route whose certificate alone failed to build (a renewal caught
    /// between its chain and its key) keeps serving, with its new settings and the certificate
    /// `live_cert` gives for its `sni` (the live route's own, if it has one), in its place in
    /// config order; it stays listed as failing (`last_good_cert`). Not when another route
    /// already serves that `sni`.
    pub fn carry_last_good(
        &mut self,
        live_cert: impl Fn(
            &super::route::SniPattern,
        ) -> Option<std::sync::Arc<crate::tls::certs::CertifiedKey>>,
    ) {
        for f in &mut self.failing {
            let Some(route) = f.without_cert.take() else {
                continue;
            };
            if self.routes.iter().any(|r| r.sni == route.sni) {
                continue;
            }
            let Some(cert) = live_cert(&route.sni) else {
                continue;
            };
            let mut route = *route;
            route.cert = Some(cert);
            let at = self.indices.partition_point(|&i| i < f.index);
            self.routes.insert(at, route);
            self.indices.insert(at, f.index);
            f.last_good_cert = true;
        }
    }
}

/// Which call gives a `routes` list: what it means when no route of it serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoutesOf {
    /// The constructor: nothing is live yet. A list in which every route fails fails whole,
    /// except with `symphonyRouteRules` when each failing route fails one of Symphony's
    /// route-build rules: the proxy then serves no route (Symphony's constructor).
    Constructor,
    /// `updateConfig`: a route whose certificate alone failed does not count as failed yet,
    /// since it may keep its last good certificate ([`ParsedRoutes::carry_last_good`], after
    /// which the caller checks [`ParsedRoutes::all_failed`]).
    Update,
}

/// Parses `routes` (at `path`) against the listeners' default certificates. With `isolate`, a
/// route that fails to build is set apart in [`ParsedRoutes::failing`] unless every route fails
/// (see [`RoutesOf`] for `of`); otherwise (and for every problem of a field's own value) the
/// problems go to `issues` and the result is `None`. Issues are listed route by route, in
/// document order. `defaults` are the proxy's for the fields a route leaves out and the rules it
/// is held to.
pub fn parse_routes(
    val: &Value,
    path: &str,
    listeners: &[ListenerConfig],
    defaults: RouteDefaults,
    isolate: bool,
    of: RoutesOf,
    issues: &mut Issues,
) -> Option<ParsedRoutes> {
    let arr = v::array(val, path, issues)?;
    let mut out = ParsedRoutes::default();
    let mut per_route: Vec<(Issues, Issues)> = Vec::with_capacity(arr.len());
    let mut seen = HashMap::new();
    // Whether every route set apart so far fails one of Symphony's route-build rules.
    let mut failing_by_rule = true;
    for (i, r) in arr.iter().enumerate() {
        let p = v::index(path, i);
        let (mut shape, mut build) = (Issues::default(), Issues::default());
        let kind = RouteKind::Table;
        let route = parse_route(r, &p, listeners, defaults, kind, &mut shape, &mut build);
        let without_cert = match route {
            // Only its certificate failed (`build` holds why).
            Some(route) if !build.is_empty() => Some(Box::new(route)),
            Some(route) => {
                match seen.get(&route.sni) {
                    Some(prev) => build.push(
                        join(&p, "sni"),
                        format!("duplicates the sni of {}", v::index(path, *prev)),
                    ),
                    None => {
                        seen.insert(route.sni.clone(), i);
                        out.routes.push(route);
                        out.indices.push(i);
                    }
                }
                None
            }
            None => None,
        };
        if !build.is_empty() && shape.is_empty() {
            failing_by_rule &= build.0.iter().any(is_build_rule);
            out.failing.push(FailingRoute {
                index: i,
                route: r.get("sni").and_then(Value::as_str).map(str::to_string),
                issues: build.0.clone(),
                without_cert,
                last_good_cert: false,
            });
        }
        per_route.push((shape, build));
    }
    let shape_problems = per_route.iter().any(|(s, _)| !s.is_empty());
    let carriable = of == RoutesOf::Update && out.failing.iter().any(|f| f.without_cert.is_some());
    let none_by_rule = of == RoutesOf::Constructor && failing_by_rule;
    let all_failed = out.routes.is_empty() && !carriable && !none_by_rule;
    let whole = shape_problems || (!out.failing.is_empty() && (!isolate || all_failed));
    if whole {
        for (shape, build) in per_route {
            issues.0.extend(shape.0);
            issues.0.extend(build.0);
        }
        return None;
    }
    Some(out)
}

/// Parses `resolveConnection`'s `route` (docs/proxy.md: Suspended routes): a `routes[]`-shaped
/// object without the route-table fields, with `upstream` (one) or `upstreams`; `sni` is optional
/// and not used (the connection's SNI is the client's). `listener` is the suspended connection's
/// (its `defaultCert` serves a terminating route without `cert`; `None`: every check but that
/// one, `checkResolveRoute`); `defaults` the proxy's. Errors name fields under `route`; a
/// resolved route is one connection's, so a problem of either kind is an error.
pub fn parse_resolve_route(
    val: &Value,
    listener: Option<&ListenerConfig>,
    defaults: RouteDefaults,
) -> Result<RouteConfig, ConfigError> {
    let (mut issues, mut build) = (Issues::default(), Issues::default());
    let listeners: Vec<ListenerConfig> = listener.into_iter().cloned().collect();
    let r = parse_route(
        val,
        "route",
        &listeners,
        defaults,
        RouteKind::Resolve,
        &mut issues,
        &mut build,
    );
    issues.0.extend(build.0);
    match r {
        Some(r) if issues.is_empty() => Ok(r),
        _ => Err(ConfigError::new(issues.0)),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{parse_proxy_config, ProxyConfig};
    use serde_json::{json, Value};

    fn parse(routes: Value, extra: Value) -> Result<ProxyConfig, Vec<(String, String)>> {
        let mut cfg = json!({ "listeners": [{ "port": 9443 }], "routes": routes });
        if let (Some(o), Some(e)) = (cfg.as_object_mut(), extra.as_object()) {
            o.extend(e.clone());
        }
        parse_proxy_config(&cfg, 1)
            .map_err(|e| e.issues.into_iter().map(|i| (i.path, i.message)).collect())
    }

    fn cert(hosts: &[&str]) -> (String, String) {
        let hosts: Vec<String> = hosts.iter().map(|h| h.to_string()).collect();
        crate::tls::certs::self_signed(&hosts).unwrap()
    }

    fn up() -> Value {
        json!([{ "kind": "tcp", "host": "127.0.0.1", "port": 1 }])
    }

    #[test]
    fn a_route_that_fails_to_build_is_set_apart() {
        let (good_c, good_k) = cert(&["good.test"]);
        let (bad_c, _) = cert(&["bad.test"]);
        let routes = json!([
            { "sni": "bad.test", "upstreams": up(), "cert": { "certChain": bad_c, "privateKey": good_k } },
            { "sni": "good.test", "upstreams": up(), "cert": { "certChain": good_c, "privateKey": good_k } },
            { "sni": "good.test", "upstreams": up(), "terminateTls": false },
            { "sni": "c.test", "upstreams": up(), "terminateTls": false, "mtls": { "clientCaCert": "x" } },
            { "sni": "d.test", "upstreams": up() },
        ]);
        let c = parse(routes.clone(), json!({})).unwrap();
        let names: Vec<String> = c.routes.iter().map(|r| r.sni.name()).collect();
        assert_eq!(names, ["good.test"]);
        let failing: Vec<(usize, Option<&str>, Vec<&str>)> = (c.failing_routes.iter())
            .map(|f| {
                let paths = f.issues.iter().map(|i| i.path.as_str()).collect();
                (f.index, f.route.as_deref(), paths)
            })
            .collect();
        assert_eq!(
            failing,
            [
                (0, Some("bad.test"), vec!["routes[0].cert"]),
                (2, Some("good.test"), vec!["routes[2].sni"]),
                (
                    3,
                    Some("c.test"),
                    vec!["routes[3].mtls.clientCaCert", "routes[3].mtls"]
                ),
                (4, Some("d.test"), vec!["routes[4].cert"]),
            ]
        );
        assert!(c.failing_routes[0].issues[0]
            .message
            .starts_with("privateKey does not match the first certificate of certChain"));
        assert_eq!(
            c.failing_routes[1].issues[0].message,
            "duplicates the sni of routes[1]"
        );
        assert!(c.failing_routes[0].message().starts_with(
            "route \"bad.test\" (routes[0]) failed to build and is not served; the other routes are: routes[0].cert: privateKey does not match"
        ));
        // Without isolation every failure fails the config, in document order.
        let e = parse(routes, json!({ "isolateRoutes": false })).unwrap_err();
        let paths: Vec<&str> = e.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(
            paths,
            [
                "routes[0].cert",
                "routes[2].sni",
                "routes[3].mtls.clientCaCert",
                "routes[3].mtls",
                "routes[4].cert"
            ]
        );
    }

    #[test]
    fn a_route_whose_certificate_alone_failed_may_keep_the_last_good_one() {
        let (a_c, a_k) = cert(&["a.test"]);
        let (b_c, b_k) = cert(&["b.test"]);
        let (_, x_k) = cert(&["x.test"]);
        let routes = json!([
            { "sni": "b.test", "upstreams": up(), "cert": { "certChain": b_c, "privateKey": x_k } },
            { "sni": "a.test", "upstreams": up(), "cert": { "certChain": a_c, "privateKey": a_k } },
            { "sni": "c.test", "upstreams": up(), "http2": false, "cert": { "certChain": b_c, "privateKey": x_k },
              "tunnels": {}, "terminateTls": false },
        ]);
        let c = parse(routes.clone(), json!({})).unwrap();
        // At construction nothing is live: dropped (and `without_cert` kept for nothing).
        assert_eq!(c.routes.len(), 1);
        assert!(c.failing_routes[0].without_cert.is_some());
        assert!(
            c.failing_routes[1].without_cert.is_none(),
            "another problem beside the certificate"
        );
        let mut parsed = super::parse_routes(
            &routes,
            "routes",
            &c.listeners,
            super::RouteDefaults::default(),
            true,
            super::RoutesOf::Update,
            &mut crate::config::error::Issues::default(),
        )
        .unwrap();
        let last_good =
            crate::tls::certs::load_certified_key(b_c.as_bytes(), b_k.as_bytes()).unwrap();
        parsed.carry_last_good(|sni| (sni.name() == "b.test").then(|| last_good.clone()));
        let names: Vec<String> = parsed.routes.iter().map(|r| r.sni.name()).collect();
        assert_eq!(names, ["b.test", "a.test"], "in config order");
        assert_eq!(parsed.indices, [0, 1]);
        assert!(std::sync::Arc::ptr_eq(
            parsed.routes[0].cert.as_ref().unwrap(),
            &last_good
        ));
        let carried: Vec<bool> = parsed.failing.iter().map(|f| f.last_good_cert).collect();
        assert_eq!(carried, [true, false]);
        assert!(parsed.failing[0]
            .message()
            .starts_with("route \"b.test\" (routes[0]) failed to build and serves its last good certificate: routes[0].cert: privateKey does not match"));
    }

    #[test]
    fn all_broken_or_a_field_problem_fails_the_whole_config() {
        let (c, _) = cert(&["a.test"]);
        let (_, k) = cert(&["b.test"]);
        let bad = json!({ "sni": "a.test", "upstreams": up(), "cert": { "certChain": c, "privateKey": k } });
        let e = parse(
            json!([bad, { "sni": "b.test", "upstreams": up() }]),
            json!({}),
        )
        .unwrap_err();
        let paths: Vec<&str> = e.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(paths, ["routes[0].cert", "routes[1].cert"]);
        // A field's own problem anywhere fails the config, and every route's problems are listed.
        let ok = json!({ "sni": "ok.test", "upstreams": up(), "terminateTls": false });
        let e = parse(
            json!([bad, ok, { "sni": "x.test", "upstreams": up(), "terminateTls": "no" }]),
            json!({}),
        )
        .unwrap_err();
        let paths: Vec<&str> = e.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(paths, ["routes[0].cert", "routes[2].terminateTls"]);
        assert_eq!(
            parse(json!([ok]), json!({ "isolateRoutes": 1 })).unwrap_err(),
            [(
                "isolateRoutes".to_string(),
                "must be a boolean, got 1".to_string()
            )]
        );
    }

    #[test]
    fn upstream_level_affinity_and_cpu_sources() {
        use crate::config::proxy::{Balance, CpuSource};
        let uds = |extra: Value| {
            let mut u = json!({ "kind": "uds", "path": "/tmp/a.sock" });
            if let (Some(o), Some(e)) = (u.as_object_mut(), extra.as_object()) {
                o.extend(e.clone());
            }
            u
        };
        let route = |ups: Value| json!([{ "sni": "", "terminateTls": false, "upstreams": ups }]);
        let c = parse(
            route(json!([
                uds(json!({ "ipAffinity": true, "pid": 10, "tid": 11 })),
                uds(json!({ "ipAffinity": true, "pid": 10 })),
                uds(json!({})),
            ])),
            json!({}),
        )
        .unwrap();
        let r = &c.routes[0];
        assert_eq!(r.ip_affinity_ttl_ms, Some(300_000));
        assert_eq!(r.balance, Balance::LeastConnections);
        assert_eq!(
            r.upstream_cpu,
            [
                Some(CpuSource {
                    pid: 10,
                    tid: Some(11)
                }),
                Some(CpuSource { pid: 10, tid: None }),
                None
            ]
        );
        let c = parse(
            route(json!([uds(
                json!({ "ipAffinity": true, "ipAffinityTtlMs": 5000 })
            )])),
            json!({}),
        )
        .unwrap();
        assert_eq!(c.routes[0].ip_affinity_ttl_ms, Some(5000));
        // Conflicts drop the route (here the only one: the config fails).
        let e = parse(
            route(json!([
                uds(json!({ "ipAffinity": true })),
                uds(json!({ "ipAffinity": true, "ipAffinityTtlMs": 1000, "tid": 3 })),
                uds(json!({ "ipAffinityTtlMs": 1000 })),
            ])),
            json!({}),
        )
        .unwrap_err();
        assert_eq!(
            e,
            [
                ("routes[0].upstreams[1].tid".to_string(), "needs pid (the process the thread belongs to)".to_string()),
                ("routes[0].upstreams[2].ipAffinityTtlMs".to_string(), "needs ipAffinity: true".to_string()),
                ("routes[0].upstreams[1].ipAffinity".to_string(), "differs from routes[0].upstreams[0] (ipAffinity and ipAffinityTtlMs apply to the whole upstream set: give the same on each, or give them once on the route)".to_string()),
            ]
        );
        let mut both = route(json!([uds(json!({ "ipAffinity": true, "pid": 4 }))]));
        both[0]["ipAffinity"] = json!(true);
        both[0]["balance"] = json!("roundRobin");
        let e = parse(both, json!({})).unwrap_err();
        let paths: Vec<&str> = e.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(paths, ["routes[0].ipAffinity", "routes[0].balance"]);
        let e = parse(
            route(json!([uds(json!({ "pid": 0, "tid": "1" }))])),
            json!({}),
        )
        .unwrap_err();
        assert_eq!(
            e,
            [
                (
                    "routes[0].upstreams[0].pid".to_string(),
                    "must be an integer in [1, 2147483647], got 0".to_string()
                ),
                (
                    "routes[0].upstreams[0].tid".to_string(),
                    "must be an integer in [1, 2147483647], got \"1\"".to_string()
                ),
            ]
        );
    }
}
