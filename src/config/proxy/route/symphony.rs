//! Symphony's route rules, applied with `symphonyRouteRules: true` (docs/config.md: Proxy:
//! listeners and routes): three route-build rules — `sourceAddressHeader: 'xForwardedFor'` with
//! `http2: true`, a route whose upstreams are all `protocol: 'h2'`, an `'h2'` upstream on a
//! passthrough route — and the header carriers' `protocol: 'http'` declaration. Rampart serves
//! the first three shapes and takes the header itself as the declaration; Symphony refuses them.
//!
//! The rules read the route's fields as written (a left-out field is not a default value), as
//! Symphony does. A build-rule failure sets the route apart under route isolation
//! (docs/proxy.md: Route isolation); a missing declaration fails the whole config, except on a route
//! that also fails a build rule, where it is part of that route's failure (Symphony builds, and
//! fails, such a route before it reads `protocol`).

use crate::config::error::{ConfigIssue, Issues};
use crate::config::value::{field, join};
use serde_json::{Map, Value};

/// The message of `sourceAddressHeader: 'xForwardedFor'` with `http2: true` (path
/// `<route>.http2`; a route-build failure).
pub const XFF_HTTP2: &str = "http2 cannot be combined with sourceAddressHeader: 'xForwardedFor' (header injection would corrupt h2 frames; use 'proxyProtocol')";

/// The message of a route (not suspended) whose upstreams are all `protocol: 'h2'` (path
/// `<route>.upstreams`; a route-build failure).
pub const ALL_H2: &str = "every upstream is protocol: 'h2': the route needs an upstream without protocol (HTTP/1.x) beside them";

/// The message of an `'h2'` upstream on a `terminateTls: false` route (not suspended; path
/// `<route>.terminateTls`; a route-build failure).
pub const H2_PASSTHROUGH: &str = "protocol: 'h2' upstreams need terminateTls: true (the ALPN the proxy negotiates picks the upstream)";

/// Whether `obj` sets `key` to `true` / `false` (a boolean as written).
fn is(obj: &Map<String, Value>, key: &str, b: bool) -> bool {
    field(obj, key) == Some(&Value::Bool(b))
}

/// `obj[key]` when it is a string.
fn text<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    field(obj, key).and_then(Value::as_str)
}

/// Whether the route writes `X-Forwarded-For` (`sourceAddressHeader: 'xForwardedFor'`) and sets
/// `http2: true`.
fn xff_http2(obj: &Map<String, Value>) -> bool {
    text(obj, "sourceAddressHeader") == Some("xForwardedFor") && is(obj, "http2", true)
}

/// The `'h2'` upstream rules of a route-table route (`table`; a `resolveConnection` route is
/// served as given): the field and message of the first that fails, `None` for a suspended route
/// or one without upstreams.
fn h2_rule(obj: &Map<String, Value>, table: bool) -> Option<(&'static str, &'static str)> {
    if !table || is(obj, "suspended", true) {
        return None;
    }
    let ups = field(obj, "upstreams").and_then(Value::as_array)?;
    if ups.is_empty() {
        return None;
    }
    let h2 = |u: &Value| u.get("protocol").and_then(Value::as_str) == Some("h2");
    if is(obj, "terminateTls", false) && ups.iter().any(h2) {
        Some(("terminateTls", H2_PASSTHROUGH))
    } else if ups.iter().all(h2) {
        Some(("upstreams", ALL_H2))
    } else {
        None
    }
}

/// The header carriers' rule: a route that writes request headers (`sourceAddressHeader:
/// 'xForwardedFor'`, or `forwardFingerprint` other than `'none'` on a route that is not
/// passthrough and sends no PROXY v2 header) declares `protocol: 'http'`. The message when it
/// does not.
fn carrier_rule(obj: &Map<String, Value>) -> Option<String> {
    let sah = text(obj, "sourceAddressHeader");
    let header_fingerprint = field(obj, "forwardFingerprint")
        .is_some_and(|f| f.as_str() != Some("none"))
        && !is(obj, "terminateTls", false)
        && sah != Some("proxyProtocolV2");
    let xff = sah == Some("xForwardedFor");
    if !(xff || header_fingerprint) || text(obj, "protocol") == Some("http") {
        return None;
    }
    let carrier = if xff {
        "sourceAddressHeader: 'xForwardedFor'"
    } else {
        "forwardFingerprint"
    };
    Some(format!(
        "{carrier} rewrites HTTP request headers: declare protocol: 'http' on the route"
    ))
}

/// Whether `issue` is one of Symphony's route-build failures ([`check`] put it in `build`).
pub(in crate::config::proxy) fn is_build_rule(issue: &ConfigIssue) -> bool {
    [XFF_HTTP2, ALL_H2, H2_PASSTHROUGH].contains(&issue.message.as_str())
}

/// Applies Symphony's rules to the route `obj` at `path`, in Symphony's order (`xForwardedFor`
/// with `http2`, the carrier's declaration, the `'h2'` upstream rules): a build-rule failure
/// goes to `build`, and with it a missing declaration; a missing declaration alone goes to
/// `issues`. `table`: a route-table route (else a `resolveConnection` route).
pub(super) fn check(
    obj: &Map<String, Value>,
    path: &str,
    table: bool,
    issues: &mut Issues,
    build: &mut Issues,
) {
    let xff_http2 = xff_http2(obj);
    let h2 = h2_rule(obj, table);
    if xff_http2 {
        build.push(join(path, "http2"), XFF_HTTP2);
    }
    if let Some(message) = carrier_rule(obj) {
        let to = if xff_http2 || h2.is_some() {
            &mut *build
        } else {
            &mut *issues
        };
        to.push(join(path, "protocol"), message);
    }
    if let Some((key, message)) = h2 {
        build.push(join(path, key), message);
    }
}

#[cfg(test)]
mod tests {
    use super::{ALL_H2, H2_PASSTHROUGH, XFF_HTTP2};
    use crate::config::proxy::{parse_proxy_config, parse_resolve_route, RouteDefaults};
    use serde_json::{json, Value};

    type Problems = Vec<(String, String)>;

    const NO_XFF_PROTOCOL: &str = "sourceAddressHeader: 'xForwardedFor' rewrites HTTP request headers: declare protocol: 'http' on the route";
    const NO_FP_PROTOCOL: &str =
        "forwardFingerprint rewrites HTTP request headers: declare protocol: 'http' on the route";

    fn tcp() -> Value {
        json!({ "kind": "tcp", "host": "127.0.0.1", "port": 1 })
    }

    fn h2() -> Value {
        json!({ "kind": "tcp", "host": "127.0.0.1", "port": 2, "protocol": "h2" })
    }

    fn plain(sni: &str) -> Value {
        json!({ "sni": sni, "terminateTls": false, "upstreams": [tcp()] })
    }

    fn xff_h2(sni: &str) -> Value {
        json!({ "sni": sni, "protocol": "http", "http2": true,
                "sourceAddressHeader": "xForwardedFor", "upstreams": [tcp()] })
    }

    fn all_h2(sni: &str) -> Value {
        json!({ "sni": sni, "upstreams": [h2(), h2()] })
    }

    fn pass_h2(sni: &str) -> Value {
        json!({ "sni": sni, "terminateTls": false, "upstreams": [tcp(), h2()] })
    }

    fn pairs(e: crate::config::ConfigError) -> Problems {
        e.issues.into_iter().map(|i| (i.path, i.message)).collect()
    }

    fn p(path: &str, message: &str) -> (String, String) {
        (path.to_string(), message.to_string())
    }

    /// The config with `routes` (on a listener with a `defaultCert`) and `extra` top-level fields.
    fn config(routes: Value, extra: Value) -> Value {
        let (c, k) = crate::tls::certs::self_signed(&["a.test".to_string()]).unwrap();
        let mut cfg = json!({
            "listeners": [{ "port": 9443, "defaultCert": { "certChain": c, "privateKey": k } }],
            "routes": routes,
        });
        if let (Some(o), Some(e)) = (cfg.as_object_mut(), extra.as_object()) {
            o.extend(e.clone());
        }
        cfg
    }

    /// With the rules on: the routes served, and each set-apart route's index and problems.
    #[allow(clippy::type_complexity)]
    fn on(routes: Value, extra: Value) -> Result<(Vec<String>, Vec<(usize, Problems)>), Problems> {
        let mut extra = extra;
        extra["symphonyRouteRules"] = json!(true);
        let c = parse_proxy_config(&config(routes, extra), 1).map_err(pairs)?;
        let served = c.routes.iter().map(|r| r.sni.name()).collect();
        let failing = (c.failing_routes.into_iter())
            .map(|f| {
                let issues = f.issues.into_iter().map(|i| (i.path, i.message)).collect();
                (f.index, issues)
            })
            .collect();
        Ok((served, failing))
    }

    #[test]
    fn off_by_default_and_validated() {
        for r in [xff_h2("a.test"), all_h2("a.test"), pass_h2("a.test")] {
            let c = parse_proxy_config(&config(json!([r]), json!({})), 1).unwrap();
            assert_eq!((c.routes.len(), c.failing_routes.len()), (1, 0));
            assert!(!c.route_defaults.symphony_route_rules);
        }
        let mut undeclared = xff_h2("a.test");
        undeclared.as_object_mut().unwrap().remove("protocol");
        undeclared["http2"] = json!(false);
        assert!(parse_proxy_config(&config(json!([undeclared]), json!({})), 1).is_ok());
        let e = parse_proxy_config(
            &config(
                json!([plain("a.test")]),
                json!({ "symphonyRouteRules": "yes" }),
            ),
            1,
        )
        .unwrap_err();
        assert_eq!(
            pairs(e),
            [p("symphonyRouteRules", "must be a boolean, got \"yes\"")]
        );
        let c = parse_proxy_config(
            &config(
                json!([plain("a.test")]),
                json!({ "symphonyRouteRules": false }),
            ),
            1,
        )
        .unwrap();
        assert!(!c.route_defaults.symphony_route_rules);
    }

    #[test]
    fn each_build_rule_sets_its_route_apart() {
        let routes = json!([
            plain("a.test"),
            xff_h2("b.test"),
            all_h2("c.test"),
            pass_h2("d.test"),
        ]);
        let (served, failing) = on(routes, json!({})).unwrap();
        assert_eq!(served, ["a.test"]);
        assert_eq!(
            failing,
            [
                (1, vec![p("routes[1].http2", XFF_HTTP2)]),
                (2, vec![p("routes[2].upstreams", ALL_H2)]),
                (3, vec![p("routes[3].terminateTls", H2_PASSTHROUGH)]),
            ]
        );
        // Not on a suspended route, nor on one with an upstream without protocol beside 'h2'.
        let mut held = all_h2("c.test");
        held["suspended"] = json!(true);
        let mixed = json!({ "sni": "e.test", "upstreams": [tcp(), h2()] });
        let (served, failing) = on(json!([held, mixed]), json!({})).unwrap();
        assert_eq!(
            (served, failing),
            (vec!["c.test".into(), "e.test".into()], vec![])
        );
        // Without isolation each fails the config, in document order.
        let e = on(
            json!([plain("a.test"), xff_h2("b.test"), all_h2("c.test")]),
            json!({ "isolateRoutes": false }),
        )
        .unwrap_err();
        assert_eq!(
            e,
            [
                p("routes[1].http2", XFF_HTTP2),
                p("routes[2].upstreams", ALL_H2)
            ]
        );
    }

    #[test]
    fn a_missing_declaration_fails_the_config_unless_its_route_fails_a_build_rule() {
        // Alone: a whole-config problem, whatever else serves.
        let mut xff = plain("b.test");
        xff["terminateTls"] = json!(true);
        xff["sourceAddressHeader"] = json!("xForwardedFor");
        let mut fp = xff.clone();
        fp["sourceAddressHeader"] = json!("none");
        fp["forwardFingerprint"] = json!("ja3");
        let e = on(json!([plain("a.test"), xff.clone(), fp.clone()]), json!({})).unwrap_err();
        assert_eq!(
            e,
            [
                p("routes[1].protocol", NO_XFF_PROTOCOL),
                p("routes[2].protocol", NO_FP_PROTOCOL)
            ]
        );
        // The fingerprint riding PROXY v2, or a passthrough route (the engine's own carrier
        // rule then), needs no declaration; a declared one none either.
        let mut v2 = fp.clone();
        v2["sourceAddressHeader"] = json!("proxyProtocolV2");
        let mut declared = xff.clone();
        declared["sni"] = json!("c.test");
        declared["protocol"] = json!("http");
        // `forwardFingerprint: null` is left out: nothing to declare.
        let mut unset = fp.clone();
        unset["sni"] = json!("d.test");
        unset["forwardFingerprint"] = Value::Null;
        let (served, failing) = on(json!([v2, declared, unset]), json!({})).unwrap();
        assert_eq!(
            (served, failing),
            (
                vec!["b.test".into(), "c.test".into(), "d.test".into()],
                vec![]
            )
        );
        // With a build rule: part of that route's failure, after xForwardedFor with http2.
        let mut both = xff_h2("c.test");
        both.as_object_mut().unwrap().remove("protocol");
        let (served, failing) = on(json!([plain("a.test"), both.clone()]), json!({})).unwrap();
        assert_eq!(served, ["a.test"]);
        assert_eq!(
            failing,
            [(
                1,
                vec![
                    p("routes[1].http2", XFF_HTTP2),
                    p("routes[1].protocol", NO_XFF_PROTOCOL)
                ]
            )]
        );
        // A field's own problem beside a build rule still fails the whole config.
        let mut bad = xff_h2("c.test");
        bad["connectTimeoutMs"] = json!(-1);
        let e = on(json!([plain("a.test"), bad]), json!({})).unwrap_err();
        assert_eq!(
            e.iter().map(|(p, _)| p.as_str()).collect::<Vec<_>>(),
            ["routes[1].connectTimeoutMs", "routes[1].http2"]
        );
    }

    #[test]
    fn the_constructor_may_serve_none_when_symphonys_rules_set_every_route_apart() {
        let mut both = xff_h2("b.test");
        both.as_object_mut().unwrap().remove("protocol");
        let (served, failing) = on(json!([all_h2("a.test"), both]), json!({})).unwrap();
        assert!(served.is_empty());
        assert_eq!(failing.iter().map(|(i, _)| *i).collect::<Vec<_>>(), [0, 1]);
        // Not when a route fails the engine's own build only (`burst` without a rate here).
        let own = json!([all_h2("a.test"), { "sni": "b.test", "upstreams": [tcp()], "burst": 3 }]);
        assert_eq!(
            on(own, json!({})).unwrap_err(),
            [
                p("routes[0].upstreams", ALL_H2),
                p("routes[1].burst", "needs maxConnectionsPerSecond")
            ]
        );
        // updateConfig with them: a list in which no route serves fails whole.
        let d = RouteDefaults {
            symphony_route_rules: true,
            ..RouteDefaults::default()
        };
        let listeners = parse_proxy_config(&config(json!([]), json!({})), 1)
            .unwrap()
            .listeners;
        let u = json!({ "routes": [all_h2("a.test")] });
        let e = crate::config::update::parse_update(&u, &listeners, d, false, true).unwrap_err();
        assert_eq!(pairs(e), [p("routes[0].upstreams", ALL_H2)]);
    }

    #[test]
    fn resolve_routes_get_the_protocol_rules_not_the_h2_upstream_rules() {
        let on = RouteDefaults {
            symphony_route_rules: true,
            ..RouteDefaults::default()
        };
        let resolve = |v: Value, d| parse_resolve_route(&v, None, d).map_err(pairs);
        let xff = json!({ "upstream": tcp(), "protocol": "http", "http2": true,
                          "sourceAddressHeader": "xForwardedFor" });
        assert_eq!(
            resolve(xff.clone(), on).unwrap_err(),
            [p("route.http2", XFF_HTTP2)]
        );
        assert!(resolve(xff, RouteDefaults::default()).is_ok());
        let fp = json!({ "upstream": tcp(), "forwardFingerprint": "ja4" });
        assert_eq!(
            resolve(fp.clone(), on).unwrap_err(),
            [p("route.protocol", NO_FP_PROTOCOL)]
        );
        assert!(resolve(fp, RouteDefaults::default()).is_ok());
        // 'h2' upstreams alone or on a passthrough route: served as given.
        assert!(resolve(json!({ "upstreams": [h2()] }), on).is_ok());
        assert!(resolve(
            json!({ "terminateTls": false, "upstreams": [tcp(), h2()] }),
            on
        )
        .is_ok());
    }
}
