//! Every Prometheus metric family Rampart exports, declared once ([`FAMILIES`]): name, type, help,
//! the `metrics()` objects it reads (its labels) and the JSON fields it reads from them.
//! `prometheus()` is [`family::render`](super::family::render) of this table over the
//! `metrics()` JSON, in this order.
//!
//! A table of `const` values rather than a registry filled at start-up (prometheus-client,
//! linkerd's registries) or a macro: the counters already live in their modules as relaxed
//! atomics and `metrics()` already reads them into a snapshot, so what is left to declare is
//! plain data — and plain data is what the test below walks to check that every family is in
//! the JSON, index.d.ts, the Grafana dashboard and docs/operating.md.
//!
//! Adding a series whose value `metrics()` already shows: one entry here, one line in the table
//! of docs/operating.md (Prometheus series) and one panel query in
//! examples/grafana/rampart-dashboard.json.

use super::family::{each, field, ms_as_seconds, Family, Scope};

/// Every family, in exposition order.
pub const FAMILIES: &[Family] = &[
    // Per listener.
    Family::gauge(
        "active_connections",
        "Open client connections.",
        Scope::Listener,
        &[field("activeConnections")],
    ),
    Family::gauge(
        "half_closed_connections",
        "Connections half-closed now: the upstream ended its side, the client has not.",
        Scope::Listener,
        &[field("halfClosedConnections")],
    ),
    Family::counter(
        "accepted_connections_total",
        "Admitted connections.",
        Scope::Listener,
        &[field("accepted")],
    ),
    Family::counter(
        "bytes_received_total",
        "Bytes read from clients.",
        Scope::Listener,
        &[field("bytesReceived")],
    ),
    Family::counter(
        "bytes_sent_total",
        "Bytes written to clients.",
        Scope::Listener,
        &[field("bytesSent")],
    ),
    Family::gauge(
        "tracked_ips",
        "Per-IP entries tracked by the protection engine.",
        Scope::Listener,
        &[field("trackedIps")],
    ),
    Family::counter(
        "untracked_admissions_total",
        "Connections admitted without a per-IP entry (table at maxTrackedIps).",
        Scope::Listener,
        &[field("untrackedAdmissions")],
    ),
    Family::gauge(
        "tracked_prefixes",
        "Prefix entries tracked by the prefix tier (prefixLimit).",
        Scope::Listener,
        &[field("trackedPrefixes")],
    ),
    Family::gauge(
        "known_good_clients",
        "Clients holding a known-good mark.",
        Scope::Listener,
        &[field("knownGoodClients")],
    ),
    Family::gauge(
        "defense_active",
        "Defense mode on (1) or off (0).",
        Scope::Listener,
        &[field("defenseActive")],
    ),
    Family::gauge(
        "pending_suspended",
        "Connections of suspended routes held for resolveConnection.",
        Scope::Listener,
        &[field("pendingSuspended")],
    ),
    Family::counter(
        "blocked_connections_total",
        "Refused connections by reason.",
        Scope::Listener,
        &[each("blockedByReason", "reason")],
    ),
    Family::counter(
        "shadow_refusals_total",
        "Connections protection.shadow would have refused (admitted: never enforced), by reason.",
        Scope::Listener,
        &[each("shadowByReason", "reason")],
    ),
    Family::counter(
        "h2_flood_total",
        "HTTP/2 connections closed by the guard, by the limit exceeded.",
        Scope::Listener,
        &[each("h2FloodByDetail", "detail")],
    ),
    Family::counter(
        "errors_total",
        "Runtime errors by reason.",
        Scope::Listener,
        &[each("errorsByReason", "reason")],
    ),
    // Per route.
    Family::gauge(
        "route_active_connections",
        "Open connections per route.",
        Scope::Route,
        &[field("activeConnections")],
    ),
    Family::counter(
        "route_connections_total",
        "Connections let through per route.",
        Scope::Route,
        &[field("connections")],
    ),
    Family::counter(
        "route_bytes_received_total",
        "Bytes read from clients per route.",
        Scope::Route,
        &[field("bytesReceived")],
    ),
    Family::counter(
        "route_bytes_sent_total",
        "Bytes written to clients per route.",
        Scope::Route,
        &[field("bytesSent")],
    ),
    Family::counter(
        "route_errors_total",
        "Errors per route by reason.",
        Scope::Route,
        &[each("errorsByReason", "reason")],
    ),
    // Per route: its upstream capacity.
    Family::gauge(
        "route_upstream_in_flight",
        "Requests (opaque routes: connections) in flight to the route's upstreams.",
        Scope::Route,
        &[field("upstream.inFlight")],
    ),
    Family::gauge(
        "route_upstream_in_flight_priority",
        "Of which of known-good (priority) clients.",
        Scope::Route,
        &[field("upstream.inFlightPriority")],
    ),
    Family::gauge(
        "route_upstream_limit",
        "The route's concurrency limit (no sample with mode off).",
        Scope::Route,
        &[field("upstream.limit")],
    ),
    Family::gauge(
        "route_upstream_latency_seconds",
        "Mean response-head latency of the last 100 ms window.",
        Scope::Route,
        &[ms_as_seconds("upstream.latencyMs")],
    ),
    Family::gauge(
        "route_upstream_proxy_delay_seconds",
        "The proxy's own run-queue delay in that window (part of latency_seconds).",
        Scope::Route,
        &[ms_as_seconds("upstream.proxyDelayMs")],
    ),
    Family::gauge(
        "route_upstream_baseline_seconds",
        "No-load response-head latency baseline.",
        Scope::Route,
        &[ms_as_seconds("upstream.baselineMs")],
    ),
    Family::gauge(
        "route_upstream_overloaded",
        "1 while the route is overloaded (a refusal within the last 2 s).",
        Scope::Route,
        &[field("upstream.overloaded")],
    ),
    Family::counter(
        "route_upstream_refused_total",
        "Requests refused for lack of upstream capacity.",
        Scope::Route,
        &[field("upstream.refused")],
    ),
    Family::counter(
        "route_upstream_refused_priority_total",
        "Requests of known-good clients refused for lack of upstream capacity.",
        Scope::Route,
        &[field("upstream.refusedPriority")],
    ),
    Family::gauge(
        "route_upstream_queued",
        "Requests waiting for room under the route's limit.",
        Scope::Route,
        &[field("upstream.queued")],
    ),
    Family::counter(
        "route_upstream_waited_total",
        "Requests that waited for room under the route's limit.",
        Scope::Route,
        &[field("upstream.waited")],
    ),
    Family::counter(
        "route_upstream_queue_timeouts_total",
        "Requests answered 503 when their wait for room timed out (also in refused_total).",
        Scope::Route,
        &[field("upstream.queueTimeouts")],
    ),
    Family::counter(
        "route_upstream_answered_total",
        "Responses whose head was seen (latency samples).",
        Scope::Route,
        &[field("upstream.answered")],
    ),
    Family::counter(
        "route_upstream_connect_failures_total",
        "Upstream connect failures.",
        Scope::Route,
        &[field("upstream.connectFailures")],
    ),
    // The proxy.
    Family::gauge(
        "routes",
        "Routes in the live route table.",
        Scope::Proxy,
        &[field("routes")],
    ),
    Family::gauge(
        "failing_routes",
        "Configured routes left out because they failed to build.",
        Scope::Proxy,
        &[field("failingRoutes")],
    ),
    Family::counter(
        "route_failures_total",
        "Routes that failed to build, once per constructor or updateConfig that gave them.",
        Scope::Proxy,
        &[field("routeFailuresTotal")],
    ),
    Family::counter(
        "events_dropped_total",
        "'blocked' events over blockedEvents.maxPerSecond.",
        Scope::Proxy,
        &[field("eventsDropped")],
    ),
    // The cluster tier, when configured.
    Family::gauge(
        "cluster_connected",
        "1 when Redis answers and the ban channel is subscribed.",
        Scope::Cluster,
        &[field("connected")],
    ),
    Family::gauge(
        "cluster_breaker_open",
        "1 while the breaker keeps Redis unasked (local limits alone).",
        Scope::Cluster,
        &[field("breakerOpen")],
    ),
    Family::gauge(
        "cluster_lease_clients",
        "Clients holding a clusterRateLimit lease entry.",
        Scope::Cluster,
        &[field("leaseClients")],
    ),
    Family::counter(
        "cluster_bans_published_total",
        "Local bans written to Redis and published.",
        Scope::Cluster,
        &[field("bansPublished")],
    ),
    Family::counter(
        "cluster_bans_received_total",
        "Bans received from other nodes.",
        Scope::Cluster,
        &[field("bansReceived")],
    ),
    Family::counter(
        "cluster_lease_refills_total",
        "clusterRateLimit lease refills answered by Redis.",
        Scope::Cluster,
        &[field("leaseRefills")],
    ),
    Family::counter(
        "cluster_errors_total",
        "Failed or timed-out Redis commands.",
        Scope::Cluster,
        &[field("errors")],
    ),
    Family::counter(
        "cluster_queue_overflow_total",
        "Bans or refill requests dropped because a queue was full.",
        Scope::Cluster,
        &[field("queueOverflow")],
    ),
    Family::counter(
        "cluster_rejected_messages_total",
        "Ban messages and ban keys read from Redis that failed validation and were dropped.",
        Scope::Cluster,
        &[field("rejectedMessages")],
    ),
    Family::counter(
        "cluster_ticket_key_updates_total",
        "Shared TLS ticket-key sets read from Redis that changed this node's keys.",
        Scope::Cluster,
        &[field("ticketKeyUpdates")],
    ),
    Family::summary(
        "cluster_ban_propagation_ms",
        "Delay from a ban's origin to this node, ms (newest samples).",
        Scope::Cluster,
        &[
            field("propagationDelayMs.p50").labelled("quantile=\"0.5\""),
            field("propagationDelayMs.p99").labelled("quantile=\"0.99\""),
            field("propagationDelayMs.count").suffixed("_count"),
        ],
    ),
    // The XDP filter, while attached.
    Family::counter(
        "xdp_packets_total",
        "Packets seen by the XDP filter by action.",
        Scope::Xdp,
        &[
            field("counters.passed").labelled("action=\"pass\""),
            each("counters.dropped", "reason").labelled("action=\"drop\""),
        ],
    ),
    Family::counter(
        "xdp_banned_total",
        "Sources the kernel banned for SYN excess.",
        Scope::Xdp,
        &[field("counters.banned")],
    ),
    Family::counter(
        "xdp_ban_extended_total",
        "Kernel ban deadlines extended by continued SYN excess.",
        Scope::Xdp,
        &[field("counters.banExtended")],
    ),
    Family::counter(
        "xdp_errors_total",
        "Failed kernel-map writes (each also an 'error' event).",
        Scope::Xdp,
        &[field("errors")],
    ),
    Family::counter(
        "xdp_ban_queue_overflow_total",
        "Penalty boxes not mirrored as kernel bans (queue full).",
        Scope::Xdp,
        &[field("banQueueOverflow")],
    ),
    Family::counter(
        "xdp_known_good_queue_overflow_total",
        "Known-good marks not mirrored to the kernel (queue full).",
        Scope::Xdp,
        &[field("knownGoodQueueOverflow")],
    ),
    Family::counter(
        "xdp_known_good_mirrored_total",
        "Known-good marks (and their refreshes) written to the kernel (synBudgetPerSecond exempts them).",
        Scope::Xdp,
        &[field("knownGoodMirrored")],
    ),
    Family::gauge(
        "xdp_map_entries",
        "Entries the attached program's sized maps were created with.",
        Scope::Xdp,
        &[each("maps", "map")],
    ),
];
