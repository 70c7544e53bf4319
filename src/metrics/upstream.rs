//! `metrics().routeMetrics[i].upstream` and the `rampart_route_upstream_*` Prometheus families
//! (README: Upstream capacity): what a route's upstream capacity measured (`crate::capacity`
//! fills it; this module only shapes it).

use serde::Serialize;

/// One route's upstream capacity at the time of the call.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CapacitySnapshot {
    /// `concurrency.mode`: `'adaptive'`, `'fixed'` or `'off'`.
    pub mode: &'static str,
    /// Requests (opaque routes: connections) in flight to the upstreams.
    pub in_flight: u32,
    /// Of which taken by `Priority` clients (known-good since before the overload).
    pub in_flight_priority: u32,
    /// The enforced limit (`null` with `mode: 'off'`).
    pub limit: Option<u32>,
    /// The part of the limit other clients may use (`null` with `mode: 'off'`).
    pub other_limit: Option<u32>,
    /// Mean response-head latency of the last measured 100 ms window, ms (0 before any).
    pub latency_ms: f64,
    /// The no-load latency baseline, ms (0 before any sample).
    pub baseline_ms: f64,
    /// Whether the route is overloaded (a refusal within the last 2 s).
    pub overloaded: bool,
    /// Requests (or connections) refused for lack of capacity, since start.
    pub refused: u64,
    /// Of which of `Priority` clients.
    pub refused_priority: u64,
    /// Requests waiting for room now (`queueTimeoutMs`, `maxQueue`).
    pub queued: u32,
    /// Requests that waited for room, since start.
    pub waited: u64,
    /// Of which answered `503` when `queueTimeoutMs` passed (also in `refused`).
    pub queue_timeouts: u64,
    /// Requests answered (latency samples), since start.
    pub answered: u64,
    /// Upstream connect failures, since start.
    pub connect_failures: u64,
    /// Mean upstream connect time, ms (0 before any).
    pub connect_ms: f64,
}

type Get = fn(&CapacitySnapshot) -> Option<f64>;

/// The `rampart_route_upstream_*` families: suffix, type, help and value (`None`: no sample).
const FAMILIES: [(&str, &str, &str, Get); 13] = [
    (
        "in_flight",
        "gauge",
        "Requests (opaque routes: connections) in flight to the route's upstreams.",
        |u| Some(f64::from(u.in_flight)),
    ),
    (
        "in_flight_priority",
        "gauge",
        "Of which of known-good (priority) clients.",
        |u| Some(f64::from(u.in_flight_priority)),
    ),
    (
        "limit",
        "gauge",
        "The route's concurrency limit (no sample with mode off).",
        |u| u.limit.map(f64::from),
    ),
    (
        "latency_seconds",
        "gauge",
        "Mean response-head latency of the last 100 ms window.",
        |u| Some(u.latency_ms / crate::clock::MS_PER_SEC as f64),
    ),
    (
        "baseline_seconds",
        "gauge",
        "No-load response-head latency baseline.",
        |u| Some(u.baseline_ms / crate::clock::MS_PER_SEC as f64),
    ),
    (
        "overloaded",
        "gauge",
        "1 while the route is overloaded (a refusal within the last 2 s).",
        |u| Some(if u.overloaded { 1.0 } else { 0.0 }),
    ),
    (
        "refused_total",
        "counter",
        "Requests refused for lack of upstream capacity.",
        |u| Some(u.refused as f64),
    ),
    (
        "refused_priority_total",
        "counter",
        "Requests of known-good clients refused for lack of upstream capacity.",
        |u| Some(u.refused_priority as f64),
    ),
    (
        "queued",
        "gauge",
        "Requests waiting for room under the route's limit.",
        |u| Some(f64::from(u.queued)),
    ),
    (
        "waited_total",
        "counter",
        "Requests that waited for room under the route's limit.",
        |u| Some(u.waited as f64),
    ),
    (
        "queue_timeouts_total",
        "counter",
        "Requests answered 503 when their wait for room timed out (also in refused_total).",
        |u| Some(u.queue_timeouts as f64),
    ),
    (
        "answered_total",
        "counter",
        "Responses whose head was seen (latency samples).",
        |u| Some(u.answered as f64),
    ),
    (
        "connect_failures_total",
        "counter",
        "Upstream connect failures.",
        |u| Some(u.connect_failures as f64),
    ),
];

/// Writes the `rampart_route_upstream_*` families; `routes` gives each route's
/// `route="…",group="…"` label set and snapshot.
pub fn write_prometheus(routes: &[(String, &CapacitySnapshot)], out: &mut String) {
    use std::fmt::Write;
    for (name, kind, help, get) in FAMILIES {
        let _ = writeln!(
            out,
            "# HELP rampart_route_upstream_{name} {help}\n# TYPE rampart_route_upstream_{name} {kind}"
        );
        for (labels, u) in routes {
            if let Some(v) = get(u) {
                let _ = writeln!(out, "rampart_route_upstream_{name}{{{labels}}} {v}");
            }
        }
    }
}
