//! `metrics()` of a proxy: the server reads every part — listeners, routes, the XDP filter, the
//! cluster tier — and puts them together ([`ProxyMetrics`]), so `crate::metrics` never depends on
//! the cluster tier or the XDP filter.

use crate::clock;
use crate::cluster::ClusterSnapshot;
use crate::config::proxy::ListenerId;
use crate::metrics::{EngineGauges, ListenerSnapshot, MetricsSnapshot};
use crate::shared::Shared;
use crate::xdp::XdpStatus;
use serde::Serialize;
use std::sync::atomic::Ordering;

/// `metrics()`: the proxy's counters with the XDP filter's and the cluster tier's beside them
/// (one flat JSON object, `xdp` and `cluster` absent when not attached / not configured).
#[derive(Debug, Serialize)]
pub struct ProxyMetrics {
    /// Listeners, routes, and their sums.
    #[serde(flatten)]
    pub proxy: MetricsSnapshot,
    /// XDP status when attached.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub xdp: Option<XdpStatus>,
    /// The cluster tier, when configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterSnapshot>,
}

/// `metrics()` of the proxy whose state is `shared`, with the XDP filter's status when attached.
pub(super) fn read(shared: &Shared, xdp: Option<XdpStatus>) -> ProxyMetrics {
    let now = clock::now_ns();
    let ls = shared
        .listeners
        .iter()
        .enumerate()
        .map(|(li, l)| {
            let e = &l.engine;
            ListenerSnapshot::read(
                l.label.clone(),
                l.config.port,
                &l.metrics,
                EngineGauges {
                    tracked_ips: e.tracked_ips() as u64,
                    untracked_admissions: e.untracked_admissions(),
                    tracked_prefixes: e.tracked_prefixes() as u64,
                    known_good_clients: e.known_good_clients(),
                    defense_active: e.defense_active(),
                    pending_suspended: shared.suspensions.pending(ListenerId(li)) as u64,
                },
            )
        })
        .collect();
    let mut m = MetricsSnapshot::from_listeners(ls, shared.events.dropped());
    let table = shared.routes.load();
    m.route_metrics = (table.routes().iter())
        .map(|r| {
            let mut s = r.metrics.snapshot(r.capacity.snapshot(now));
            s.upstreams = r.upstream_snapshots();
            s
        })
        .collect();
    m.routes = table.routes().len() as u64;
    m.failing_routes = table.failing().len() as u64;
    m.route_failures = (table.failing().iter())
        .map(crate::metrics::route::RouteFailure::of)
        .collect();
    m.route_failures_total = shared.route_failures.load(Ordering::Relaxed);
    ProxyMetrics {
        proxy: m,
        xdp,
        cluster: shared.cluster.as_ref().map(|c| c.snapshot()),
    }
}
