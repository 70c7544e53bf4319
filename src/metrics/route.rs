//! Per-route counters (`metrics().routeMetrics[]`, Prometheus `rampart_route_*` with `route` and
//! `group` labels; docs/proxy.md: Route metrics). A route is named by its `sni` as configured (`''`
//! for the default route); its counters survive `updateConfig` while a route of that name and
//! `metricsGroup` exists, so a reload does not reset them.

use super::upstream::CapacitySnapshot;
use super::ErrorReason;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Counters of one route.
#[derive(Debug)]
pub struct RouteMetrics {
    /// The route's name: its `sni` as configured, normalised (`''` = default route).
    pub route: String,
    /// `metricsGroup` (default: the route's name).
    pub group: String,
    /// Connections open on the route.
    pub active: AtomicI64,
    /// Connections routed here and let through the route's limit.
    pub connections: AtomicU64,
    /// Runtime errors of connections on this route (and `route_rate_limited` refusals), per
    /// [`ErrorReason`] index.
    pub errors_by_reason: [AtomicU64; ErrorReason::ALL.len()],
    /// Bytes read from this route's clients.
    pub bytes_received: AtomicU64,
    /// Bytes sent to this route's clients.
    pub bytes_sent: AtomicU64,
}

impl RouteMetrics {
    fn new(route: String, group: String) -> Self {
        RouteMetrics {
            route,
            group,
            active: AtomicI64::new(0),
            connections: AtomicU64::new(0),
            errors_by_reason: Default::default(),
            bytes_received: AtomicU64::new(0),
            bytes_sent: AtomicU64::new(0),
        }
    }

    /// Counts one error.
    pub fn error(&self, r: ErrorReason) {
        self.errors_by_reason[r.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a connection let through and holds it in `activeConnections` until the guard drops.
    pub fn open(self: &Arc<Self>) -> RouteGuard {
        self.connections.fetch_add(1, Ordering::Relaxed);
        self.active.fetch_add(1, Ordering::Relaxed);
        RouteGuard(self.clone())
    }

    /// `metrics().routeMetrics[i]`, with its `upstream` capacity.
    pub fn snapshot(&self, upstream: CapacitySnapshot) -> RouteSnapshot {
        let errors_by_reason: BTreeMap<_, _> = ErrorReason::ALL
            .iter()
            .map(|r| {
                let n = self.errors_by_reason[r.index()].load(Ordering::Relaxed);
                (r.as_str(), n)
            })
            .collect();
        RouteSnapshot {
            route: self.route.clone(),
            metrics_group: self.group.clone(),
            active_connections: self.active.load(Ordering::Relaxed).max(0),
            connections: self.connections.load(Ordering::Relaxed),
            errors: errors_by_reason.values().sum(),
            bytes_received: self.bytes_received.load(Ordering::Relaxed),
            bytes_sent: self.bytes_sent.load(Ordering::Relaxed),
            errors_by_reason,
            upstream,
            upstreams: Vec::new(),
        }
    }
}

/// One open connection in a route's `activeConnections`.
#[derive(Debug)]
pub struct RouteGuard(Arc<RouteMetrics>);

impl Drop for RouteGuard {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::Relaxed);
    }
}

/// `metrics().routeMetrics[i]`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteSnapshot {
    /// The route's `sni`.
    pub route: String,
    /// Its `metricsGroup`.
    pub metrics_group: String,
    /// Open connections.
    pub active_connections: i64,
    /// Connections let through.
    pub connections: u64,
    /// Sum of `errors_by_reason`.
    pub errors: u64,
    /// Bytes read from clients.
    pub bytes_received: u64,
    /// Bytes sent to clients.
    pub bytes_sent: u64,
    /// Errors per reason (every reason present, zero included).
    pub errors_by_reason: BTreeMap<&'static str, u64>,
    /// Upstream capacity: in flight, limit, latency, refusals (docs/protection.md: Upstream
    /// capacity).
    pub upstream: CapacitySnapshot,
    /// Each upstream of the route, in config order.
    pub upstreams: Vec<UpstreamSnapshot>,
}

/// `routeMetrics[].upstreams[i]`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UpstreamSnapshot {
    /// `host:port` or `unix:/path`.
    pub upstream: String,
    /// This route's open connections on it.
    pub active_connections: u64,
    /// CPU use of its `pid` / `tid` at the last sample, ‰ of one core (`null`: not sampled, or
    /// not measured yet).
    pub cpu_permille: Option<u32>,
}

/// `metrics().routeFailures[i]`: a configured route that failed to build (docs/proxy.md: Route
/// isolation).
#[derive(Debug, Clone, Serialize)]
pub struct RouteFailure {
    /// Its `sni` as written (`null` when not a string).
    pub route: Option<String>,
    /// Its index in `routes`.
    pub index: usize,
    /// Every problem: `{ path, message }`.
    pub errors: Vec<crate::config::ConfigIssue>,
    /// Only its certificate failed and it serves the last good one.
    #[serde(rename = "lastGoodCert")]
    pub last_good_cert: bool,
}

impl RouteFailure {
    /// The snapshot of `f`.
    pub fn of(f: &crate::config::proxy::FailingRoute) -> Self {
        RouteFailure {
            route: f.route.clone(),
            index: f.index,
            last_good_cert: f.last_good_cert,
            errors: f.issues.clone(),
        }
    }
}

/// The counters of every route by `(name, group)`, kept across route-table swaps.
#[derive(Debug, Default)]
pub struct RouteRegistry(Mutex<HashMap<(String, String), Arc<RouteMetrics>>>);

impl RouteRegistry {
    /// The counters of `(route, group)` (created at zero the first time). Called when a route
    /// table is built, never per connection.
    pub fn get(&self, route: &str, group: &str) -> Arc<RouteMetrics> {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        m.entry((route.to_string(), group.to_string()))
            .or_insert_with(|| Arc::new(RouteMetrics::new(route.into(), group.into())))
            .clone()
    }

    /// Forgets every route not in `keep` (a route removed by `updateConfig`).
    pub fn retain(&self, keep: &[Arc<RouteMetrics>]) {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        m.retain(|_, v| keep.iter().any(|k| Arc::ptr_eq(k, v)));
    }
}
