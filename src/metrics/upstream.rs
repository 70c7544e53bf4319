//! `metrics().routeMetrics[i].upstream` (docs/protection.md: Upstream capacity; Prometheus
//! `rampart_route_upstream_*`, declared in [`super::families`]): what a route's upstream capacity
//! measured (`crate::capacity` fills it; this module only shapes it).

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
    /// The proxy's own run-queue delay in that window, ms: the part of `latency_ms` that is the
    /// proxy's load, not the upstream's (the limiter compares `latency_ms − proxy_delay_ms` with
    /// the baseline). 0 while no route of the proxy is adaptive (the probes sleep then).
    pub proxy_delay_ms: f64,
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
