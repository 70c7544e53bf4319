//! Every Prometheus family of `rampart::metrics::families::FAMILIES` is rendered by
//! `prometheus()` from a field `metrics()` holds, that field is in index.d.ts, the family is on
//! the Grafana dashboard (examples/grafana) and in the series table of docs/operating.md; and the
//! dashboard and the alert rules ask for no proxy series that is not declared. (The series
//! `rampart serve` adds itself, `rampart_config_*` and `rampart_server_*`, are checked against
//! a running server's `GET /metrics` by `__tests__/server.examples.test.js`.)

use rampart::cluster::{ClusterSnapshot, DelayStats};
use rampart::metrics::families::FAMILIES;
use rampart::metrics::family::{Family, Kind, Read, Scope};
use rampart::metrics::route::RouteRegistry;
use rampart::metrics::upstream::CapacitySnapshot;
use rampart::metrics::{EngineGauges, ListenerMetrics, ListenerSnapshot, MetricsSnapshot};
use rampart::server::ProxyMetrics;
use rampart::xdp::{XdpMapSizes, XdpStatus};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::PathBuf;

fn read(path: &str) -> String {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// A `metrics()` value with every part present: a listener, a route with a concurrency limit,
/// the XDP filter attached, the cluster tier configured.
fn populated() -> ProxyMetrics {
    let l = ListenerSnapshot::read(
        "127.0.0.1:8443".into(),
        8443,
        &ListenerMetrics::default(),
        EngineGauges::default(),
    );
    let mut proxy = MetricsSnapshot::from_listeners(vec![l], 3);
    let capacity = CapacitySnapshot {
        mode: "fixed",
        in_flight: 2,
        in_flight_priority: 1,
        limit: Some(8),
        other_limit: Some(6),
        latency_ms: 12.5,
        proxy_delay_ms: 0.5,
        baseline_ms: 4.0,
        overloaded: true,
        refused: 5,
        refused_priority: 0,
        queued: 1,
        waited: 7,
        queue_timeouts: 2,
        answered: 40,
        connect_failures: 1,
        connect_ms: 0.75,
    };
    let route = RouteRegistry::default().get("a.example", "web");
    proxy.route_metrics = vec![route.snapshot(capacity)];
    proxy.routes = 1;
    let mut xdp = XdpStatus::not_attached();
    xdp.attached = true;
    xdp.maps = XdpMapSizes::DEFAULT;
    let cluster = ClusterSnapshot {
        node_id: "n1".into(),
        connected: true,
        breaker_open: false,
        bans_published: 1,
        bans_received: 2,
        lease_refills: 3,
        errors: 0,
        queue_overflow: 0,
        rejected_messages: 0,
        ticket_key_updates: 1,
        lease_clients: 4,
        propagation_delay_ms: DelayStats {
            count: 9,
            p50: 1.5,
            p99: 7.0,
            max: 8.0,
        },
    };
    ProxyMetrics {
        proxy,
        xdp: Some(xdp),
        cluster: Some(cluster),
    }
}

/// The object(s) of `scope` in the `metrics()` JSON.
fn objects(root: &Value, scope: Scope) -> Vec<&Value> {
    match scope.field() {
        None => vec![root],
        Some(f) => match &root[f] {
            Value::Array(items) => items.iter().collect(),
            o => vec![o],
        },
    }
}

/// The JSON field names a family reads (its scope's and each path segment).
fn json_names(f: &Family) -> Vec<&'static str> {
    let paths = f.samples.iter().flat_map(|s| s.path.split('.'));
    f.scope.field().into_iter().chain(paths).collect()
}

/// The series names a family exposes (`_count` of a summary included).
fn series(f: &Family) -> BTreeSet<String> {
    let own = f
        .samples
        .iter()
        .map(|s| format!("rampart_{}{}", f.name, s.suffix));
    own.chain([format!("rampart_{}", f.name)]).collect()
}

fn names_in(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, _) in text.match_indices("rampart_") {
        let rest = &text[i..];
        let end =
            (rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))).unwrap_or(rest.len());
        out.insert(rest[..end].to_string());
    }
    out
}

/// Every query of the dashboard's panels and template variables.
fn dashboard_exprs() -> String {
    let d: Value = serde_json::from_str(&read("examples/grafana/rampart-dashboard.json"))
        .expect("dashboard JSON");
    let mut exprs = Vec::new();
    for p in d["panels"].as_array().expect("panels") {
        for t in p["targets"].as_array().into_iter().flatten() {
            exprs.push(t["expr"].as_str().unwrap_or_default().to_string());
        }
    }
    for v in d["templating"]["list"].as_array().into_iter().flatten() {
        exprs.push(v["definition"].as_str().unwrap_or_default().to_string());
    }
    exprs.join("\n")
}

#[test]
fn family_names_are_unique_and_well_formed() {
    let mut seen = BTreeSet::new();
    for f in FAMILIES {
        assert!(seen.insert(f.name), "{} declared twice", f.name);
        let ok = f
            .name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        assert!(ok, "{}: not a Prometheus name", f.name);
        assert_eq!(
            f.kind == Kind::Counter,
            f.name.ends_with("_total"),
            "{}",
            f.name
        );
        assert!(
            !f.help.contains('\n') && !f.help.is_empty(),
            "{}: help",
            f.name
        );
        assert!(!f.samples.is_empty(), "{}: no samples", f.name);
    }
}

#[test]
fn every_family_reads_a_metrics_field_and_renders_samples() {
    let m = populated();
    let root = serde_json::to_value(&m).expect("JSON");
    let text = rampart::metrics::prometheus(&m).expect("text");
    for f in FAMILIES {
        let kind = f.kind.as_str();
        assert!(
            text.contains(&format!("# TYPE rampart_{} {kind}\n", f.name)),
            "{}",
            f.name
        );
        for o in objects(&root, f.scope) {
            for s in f.samples {
                let v = s.lookup(o);
                let v = v.unwrap_or_else(|| panic!("{}: no `{}` in metrics()", f.name, s.path));
                match s.read {
                    Read::Each(_) => assert!(v.is_object(), "{}: {} not an object", f.name, s.path),
                    _ => assert!(v.is_number() || v.is_boolean(), "{}: {}", f.name, s.path),
                }
                let line = format!("\nrampart_{}{}", f.name, s.suffix);
                assert!(text.contains(&line), "{}: no sample of {}", f.name, s.path);
            }
        }
    }
    // Nothing rendered that is not declared.
    let declared: BTreeSet<String> = FAMILIES.iter().flat_map(series).collect();
    let rendered = names_in(&text);
    assert_eq!(rendered.difference(&declared).count(), 0, "{rendered:?}");
}

#[test]
fn absent_parts_leave_their_families_out() {
    let mut m = populated();
    m.xdp = None;
    m.cluster = None;
    let text = rampart::metrics::prometheus(&m).expect("text");
    assert!(!text.contains("rampart_xdp_"), "{text}");
    assert!(!text.contains("rampart_cluster_"), "{text}");
    assert!(text.contains("rampart_active_connections{listener=\"127.0.0.1:8443\"} 0\n"));
    assert!(text.contains(
        "rampart_route_upstream_latency_seconds{route=\"a.example\",group=\"web\"} 0.0125\n"
    ));
    assert!(
        text.contains("rampart_route_upstream_overloaded{route=\"a.example\",group=\"web\"} 1\n")
    );
}

#[test]
fn every_json_field_a_family_reads_is_in_index_d_ts() {
    let dts = read("index.d.ts");
    for f in FAMILIES {
        for name in json_names(f) {
            let typed = [format!("{name}:"), format!("{name}?:")];
            let ok = typed.iter().any(|t| {
                dts.match_indices(t.as_str())
                    .any(|(i, _)| i == 0 || !dts.as_bytes()[i - 1].is_ascii_alphanumeric())
            });
            assert!(
                ok,
                "rampart_{}: `{name}` is not a field of index.d.ts",
                f.name
            );
        }
    }
}

#[test]
fn every_family_is_on_the_dashboard_and_the_dashboard_asks_for_declared_series_only() {
    let exprs = dashboard_exprs();
    let used = names_in(&exprs);
    for f in FAMILIES {
        let on = series(f).iter().any(|s| used.contains(s));
        assert!(
            on,
            "rampart_{} is on no panel of the Grafana dashboard",
            f.name
        );
    }
    let declared: BTreeSet<String> = FAMILIES.iter().flat_map(series).collect();
    let mut asked = used;
    asked.extend(names_in(&read("examples/prometheus/rampart.rules.yml")));
    for name in asked {
        let server = name.starts_with("rampart_config_") || name.starts_with("rampart_server_");
        assert!(
            server || declared.contains(&name),
            "{name} is not a declared family"
        );
    }
}

#[test]
fn docs_list_every_series() {
    let doc = read("docs/operating.md");
    for f in FAMILIES {
        let row = format!("\n| `rampart_{}", f.name);
        assert!(
            doc.contains(&row),
            "docs/operating.md: no row for rampart_{}",
            f.name
        );
    }
}
