//! `routes[].concurrency` and the proxy's `overload` (docs/protection.md: Upstream capacity): how
//! many requests (HTTP routes) or connections (opaque routes that opt in) a route lets reach its
//! upstreams at once, learned from response latency (`'adaptive'`, the default on HTTP routes), a
//! fixed cap (`'fixed'`, HAProxy `maxconn`), or unlimited but measured (`'off'`).

use crate::config::error::Issues;
use crate::config::value::{self as v, field, join};
use serde_json::Value;

/// Default `minLimit`: the adaptive limit never goes below this many requests in flight.
pub const DEFAULT_MIN_LIMIT: u32 = 10;
/// Default `maxLimit`: the adaptive limit never goes above this many requests in flight.
pub const DEFAULT_MAX_LIMIT: u32 = 10_000;
/// Default `initialLimit`: the adaptive limit a route starts with (as Netflix
/// `concurrency-limits`). Requests past it wait in the queue, not refused, while the limit grows
/// (up to doubling every 100 ms while the latency holds: 20 → 2,000 in under a second), so the limit
/// approaches the upstream's capacity from below and a flood in the route's first second never
/// puts more than this on the upstream.
pub const DEFAULT_INITIAL_LIMIT: u32 = 20;
/// Default `priorityShare`: the fraction of the limit only `Priority` clients (known-good since
/// before the overload) may use.
pub const DEFAULT_PRIORITY_SHARE: f64 = 0.2;
/// Default `tolerance`: the limit shrinks once the current response latency passes the no-load
/// baseline × this (plus a 0.5 ms noise floor).
pub const DEFAULT_TOLERANCE: f64 = 1.25;
/// Default `latencyFloorMs`: a response latency under this (ms) never shrinks the adaptive limit.
/// An upstream that answers within it, queue included, is not drowning; a fast upstream's
/// latency (tens to hundreds of µs) rises many times over at full speed without harm, and a
/// limit that chased it would cap the throughput instead of protecting the application. 10 ms is
/// also about what a host shared by the proxy, its upstream and their load adds by CPU scheduling
/// alone at full speed, and half of the 20 ms a known-good client's p99 may rise under attack.
pub const DEFAULT_LATENCY_FLOOR_MS: f64 = 10.0;
/// Largest `latencyFloorMs` accepted (10 s).
pub const MAX_LATENCY_FLOOR_MS: f64 = 10_000.0;
/// Default `retryAfterS`: the `Retry-After` (s) of an answer for lack of capacity.
pub const DEFAULT_RETRY_AFTER_S: u32 = 1;
/// Default `queueTimeoutMs`: how long a request past the limit waits for room before it is
/// answered `503` (HAProxy `timeout queue`).
pub const DEFAULT_QUEUE_TIMEOUT_MS: u32 = 1_000;
/// Default `maxQueue`: requests (HTTP/2: connections holding a new stream) that may wait at once
/// on one route (HAProxy `maxqueue`); past it a request is answered at once.
pub const DEFAULT_MAX_QUEUE: u32 = 1_024;
/// Largest `queueTimeoutMs` accepted (60 s).
pub const MAX_QUEUE_TIMEOUT_MS: u32 = 60_000;
/// Largest limit accepted anywhere (`limit`, `minLimit`, `maxLimit`, `initialLimit`).
pub const MAX_CONCURRENCY: u32 = 1_000_000;

/// `concurrency.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ConcurrencyMode {
    /// Limit learned from response-head latency (gradient, within `[minLimit, maxLimit]`).
    #[default]
    Adaptive,
    /// A static limit (`limit`), like HAProxy `server maxconn`.
    Fixed,
    /// No limit; in-flight and latency are still measured and reported.
    Off,
}

impl ConcurrencyMode {
    /// The config spelling (`'adaptive'`, `'fixed'`, `'off'`), also `routeMetrics[].upstream.mode`.
    pub fn as_str(self) -> &'static str {
        match self {
            ConcurrencyMode::Adaptive => "adaptive",
            ConcurrencyMode::Fixed => "fixed",
            ConcurrencyMode::Off => "off",
        }
    }
}

/// A route's validated `concurrency` block (or its default).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CapacityConfig {
    /// `mode`.
    pub mode: ConcurrencyMode,
    /// `limit`: the static limit of `'fixed'` (requests or connections in flight).
    pub limit: u32,
    /// `minLimit` of `'adaptive'`.
    pub min_limit: u32,
    /// `maxLimit` of `'adaptive'`.
    pub max_limit: u32,
    /// `initialLimit` of `'adaptive'` (within `[min_limit, max_limit]`).
    pub initial_limit: u32,
    /// `priorityShare` in `[0, 0.9]`: the share of the limit reserved to `Priority` clients
    /// (at least one slot when > 0; 0 = no reservation).
    pub priority_share: f64,
    /// `tolerance` in `[1, 10]` of `'adaptive'`: latency rise over the baseline tolerated before
    /// the limit shrinks.
    pub tolerance: f64,
    /// `latencyFloorMs` of `'adaptive'`: the latency (ms) under which the limit never shrinks.
    pub latency_floor_ms: f64,
    /// `retryAfterS`: the `Retry-After` of an answer for lack of capacity, seconds.
    pub retry_after_s: u32,
    /// `queueTimeoutMs`: how long a request past the limit waits for room, ms (0 = it is
    /// answered at once: no queue).
    pub queue_timeout_ms: u32,
    /// `maxQueue`: most requests waiting at once (0 = no queue).
    pub max_queue: u32,
}

impl CapacityConfig {
    /// The default of a route: `'adaptive'` when it carries HTTP, else `'off'`.
    pub fn default_for(carries_http: bool) -> CapacityConfig {
        CapacityConfig {
            mode: if carries_http {
                ConcurrencyMode::Adaptive
            } else {
                ConcurrencyMode::Off
            },
            limit: 0,
            min_limit: DEFAULT_MIN_LIMIT,
            max_limit: DEFAULT_MAX_LIMIT,
            initial_limit: DEFAULT_INITIAL_LIMIT,
            priority_share: DEFAULT_PRIORITY_SHARE,
            tolerance: DEFAULT_TOLERANCE,
            latency_floor_ms: DEFAULT_LATENCY_FLOOR_MS,
            retry_after_s: DEFAULT_RETRY_AFTER_S,
            queue_timeout_ms: DEFAULT_QUEUE_TIMEOUT_MS,
            max_queue: DEFAULT_MAX_QUEUE,
        }
    }

    /// Whether a request past the limit may wait (`queueTimeoutMs` and `maxQueue` both > 0, and
    /// a limit to wait for).
    pub fn queues(&self) -> bool {
        self.queue_timeout_ms > 0 && self.max_queue > 0 && self.mode != ConcurrencyMode::Off
    }
}

/// The proxy's `overload` block.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct OverloadConfig {
    /// `eventLoopDelayMs`: an embedding process's event-loop delay (ms) above which every route
    /// counts as overloaded (`None`: the signal is ignored).
    pub event_loop_delay_ms: Option<f64>,
}

/// Parses `overload: { eventLoopDelayMs }` (ms in `[1, 60000]`).
pub fn parse_overload(val: &Value, path: &str, issues: &mut Issues) -> Option<OverloadConfig> {
    let obj = v::object(val, path, issues)?;
    v::reject_unknown(obj, &["eventLoopDelayMs"], path, issues);
    let event_loop_delay_ms = field(obj, "eventLoopDelayMs").and_then(|n| {
        v::number_in(
            n,
            &join(path, "eventLoopDelayMs"),
            1.0,
            60_000.0,
            false,
            issues,
        )
    });
    Some(OverloadConfig {
        event_loop_delay_ms,
    })
}

/// Fields only `'adaptive'` reads.
const ADAPTIVE_FIELDS: [&str; 5] = [
    "minLimit",
    "maxLimit",
    "initialLimit",
    "tolerance",
    "latencyFloorMs",
];

/// A route's `concurrency` (`val`, `None` when left out) under the route at `path`, or its
/// default when left out.
pub fn route_concurrency(
    val: Option<&Value>,
    path: &str,
    carries_http: bool,
    issues: &mut Issues,
) -> Option<CapacityConfig> {
    match val {
        Some(c) => parse_concurrency(c, &join(path, "concurrency"), carries_http, issues),
        None => Some(CapacityConfig::default_for(carries_http)),
    }
}

/// Parses `routes[i].concurrency`; `carries_http` picks the default mode when `mode` is left
/// out. Every bad field is reported at its own path; `None` when any was.
pub fn parse_concurrency(
    val: &Value,
    path: &str,
    carries_http: bool,
    issues: &mut Issues,
) -> Option<CapacityConfig> {
    let obj = v::object(val, path, issues)?;
    let before = issues.len();
    let mut known = vec![
        "mode",
        "limit",
        "priorityShare",
        "retryAfterS",
        "queueTimeoutMs",
        "maxQueue",
    ];
    known.extend(ADAPTIVE_FIELDS);
    v::reject_unknown(obj, &known, path, issues);
    let mut c = CapacityConfig::default_for(carries_http);
    if let Some(m) = field(obj, "mode") {
        c.mode = match v::one_of(
            m,
            &join(path, "mode"),
            &["adaptive", "fixed", "off"],
            issues,
        ) {
            Some("fixed") => ConcurrencyMode::Fixed,
            Some("off") => ConcurrencyMode::Off,
            _ => ConcurrencyMode::Adaptive,
        };
    }
    let limit = |key: &str, issues: &mut Issues| {
        field(obj, key).and_then(|n| {
            let p = join(path, key);
            v::number_in(n, &p, 1.0, f64::from(MAX_CONCURRENCY), true, issues).map(|n| n as u32)
        })
    };
    let fixed = limit("limit", issues);
    let min = limit("minLimit", issues);
    let max = limit("maxLimit", issues);
    let initial = limit("initialLimit", issues);
    match (c.mode, fixed) {
        (ConcurrencyMode::Fixed, Some(l)) => c.limit = l,
        (ConcurrencyMode::Fixed, None) if field(obj, "limit").is_none() => {
            issues.push(join(path, "limit"), "is required with mode: 'fixed'")
        }
        (_, Some(_)) => issues.push(join(path, "limit"), "needs mode: 'fixed'"),
        _ => {}
    }
    if c.mode != ConcurrencyMode::Adaptive {
        for key in ADAPTIVE_FIELDS {
            if field(obj, key).is_some() {
                issues.push(join(path, key), "needs mode: 'adaptive'");
            }
        }
    }
    c.min_limit = min.unwrap_or(DEFAULT_MIN_LIMIT);
    c.max_limit = max.unwrap_or(DEFAULT_MAX_LIMIT.max(c.min_limit));
    if c.max_limit < c.min_limit && max.is_some() {
        issues.push(
            join(path, "maxLimit"),
            format!("must be ≥ minLimit ({}), got {}", c.min_limit, c.max_limit),
        );
    }
    c.initial_limit = initial.unwrap_or(DEFAULT_INITIAL_LIMIT.max(c.min_limit).min(c.max_limit));
    if initial.is_some() && !(c.min_limit..=c.max_limit).contains(&c.initial_limit) {
        issues.push(
            join(path, "initialLimit"),
            format!(
                "must be within [minLimit, maxLimit] = [{}, {}], got {}",
                c.min_limit, c.max_limit, c.initial_limit
            ),
        );
    }
    if let Some(s) = field(obj, "priorityShare") {
        if let Some(s) = v::number_in(s, &join(path, "priorityShare"), 0.0, 0.9, false, issues) {
            c.priority_share = s;
        }
    }
    if let Some(t) = field(obj, "tolerance") {
        if let Some(t) = v::number_in(t, &join(path, "tolerance"), 1.0, 10.0, false, issues) {
            c.tolerance = t;
        }
    }
    if let Some(f) = field(obj, "latencyFloorMs") {
        let p = join(path, "latencyFloorMs");
        if let Some(f) = v::number_in(f, &p, 0.0, MAX_LATENCY_FLOOR_MS, false, issues) {
            c.latency_floor_ms = f;
        }
    }
    if let Some(r) = field(obj, "retryAfterS") {
        let p = join(path, "retryAfterS");
        if let Some(r) = v::number_in(r, &p, 1.0, 3600.0, true, issues) {
            c.retry_after_s = r as u32;
        }
    }
    if let Some(t) = field(obj, "queueTimeoutMs") {
        let p = join(path, "queueTimeoutMs");
        let max = f64::from(MAX_QUEUE_TIMEOUT_MS);
        if let Some(t) = v::number_in(t, &p, 0.0, max, true, issues) {
            c.queue_timeout_ms = t as u32;
        }
    }
    if let Some(q) = field(obj, "maxQueue") {
        let p = join(path, "maxQueue");
        if let Some(q) = v::number_in(q, &p, 0.0, f64::from(MAX_CONCURRENCY), true, issues) {
            c.max_queue = q as u32;
        }
    }
    (issues.len() == before).then_some(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value, http: bool) -> Result<CapacityConfig, Vec<(String, String)>> {
        let mut issues = Issues::default();
        match parse_concurrency(&v, "routes[0].concurrency", http, &mut issues) {
            Some(c) if issues.is_empty() => Ok(c),
            _ => Err(issues.0.into_iter().map(|i| (i.path, i.message)).collect()),
        }
    }

    fn paths(v: Value) -> Vec<String> {
        parse(v, true)
            .unwrap_err()
            .into_iter()
            .map(|i| i.0)
            .collect()
    }

    #[test]
    fn defaults_are_adaptive_on_http_routes_and_off_elsewhere() {
        let c = parse(json!({}), true).unwrap();
        assert_eq!(c, CapacityConfig::default_for(true));
        assert_eq!(
            (c.mode, c.min_limit, c.max_limit, c.initial_limit),
            (ConcurrencyMode::Adaptive, 10, 10_000, 20)
        );
        assert_eq!(
            (c.priority_share, c.tolerance, c.retry_after_s),
            (0.2, 1.25, 1)
        );
        assert_eq!(
            (c.queue_timeout_ms, c.max_queue, c.queues()),
            (1000, 1024, true)
        );
        let c = parse(json!({ "queueTimeoutMs": 0, "maxQueue": 5 }), true).unwrap();
        assert_eq!((c.queue_timeout_ms, c.max_queue, c.queues()), (0, 5, false));
        assert_eq!(parse(json!({}), false).unwrap().mode, ConcurrencyMode::Off);
        assert!(!parse(json!({}), false).unwrap().queues());
        let c = parse(json!({ "mode": "fixed", "limit": 20 }), false).unwrap();
        assert_eq!((c.mode, c.limit), (ConcurrencyMode::Fixed, 20));
        let c = parse(json!({ "minLimit": 200 }), true).unwrap();
        assert_eq!(
            (c.min_limit, c.max_limit, c.initial_limit),
            (200, 10_000, 200)
        );
        let c = parse(json!({ "minLimit": 2000 }), true).unwrap();
        assert_eq!(c.initial_limit, 2000);
        let c = parse(json!({ "maxLimit": 15, "priorityShare": 0 }), true).unwrap();
        assert_eq!(
            (c.max_limit, c.initial_limit, c.priority_share),
            (15, 15, 0.0)
        );
    }

    #[test]
    fn every_bad_field_is_named() {
        let p = |s: &str| format!("routes[0].concurrency.{s}");
        assert_eq!(paths(json!({ "mode": "fixed" })), [p("limit")]);
        assert_eq!(paths(json!({ "limit": 5 })), [p("limit")]);
        assert_eq!(
            paths(json!({ "mode": "off", "minLimit": 2, "tolerance": 2 })),
            [p("minLimit"), p("tolerance")]
        );
        assert_eq!(
            paths(json!({ "mode": "fast", "limit": 0, "priorityShare": 1,
                "tolerance": 0.5, "retryAfterS": 1.5, "maxLimit": {"$nonFinite": "NaN"},
                "queueTimeoutMs": 60001, "maxQueue": -1, "limitt": 1 })),
            [
                p("limitt"),
                p("mode"),
                p("limit"),
                p("maxLimit"),
                p("priorityShare"),
                p("tolerance"),
                p("retryAfterS"),
                p("queueTimeoutMs"),
                p("maxQueue"),
            ]
        );
        assert_eq!(
            paths(json!({ "minLimit": 20, "maxLimit": 10 })),
            [p("maxLimit")]
        );
        assert_eq!(
            paths(json!({ "minLimit": 20, "initialLimit": 10 })),
            [p("initialLimit")]
        );
        assert_eq!(paths(json!({ "mode": "fixed", "limit": -1 })), [p("limit")]);
        assert_eq!(paths(json!("adaptive")), ["routes[0].concurrency"]);
        assert_eq!(
            paths(json!({ "latencyFloorMs": -1, "tolerance": {"$nonFinite": "Infinity"} })),
            [p("tolerance"), p("latencyFloorMs")]
        );
        assert_eq!(
            paths(json!({ "mode": "fixed", "limit": 5, "latencyFloorMs": 1 })),
            [p("latencyFloorMs")]
        );
        let c = parse(json!({ "latencyFloorMs": 0.5 }), true).unwrap();
        assert_eq!(c.latency_floor_ms, 0.5);
    }

    #[test]
    fn overload_block() {
        let mut issues = Issues::default();
        let o = parse_overload(&json!({ "eventLoopDelayMs": 50 }), "overload", &mut issues);
        assert_eq!(o.unwrap().event_loop_delay_ms, Some(50.0));
        let o = parse_overload(
            &json!({ "eventLoopDelayMs": -1, "x": 1 }),
            "overload",
            &mut issues,
        );
        assert!(o.is_some_and(|o| o.event_loop_delay_ms.is_none()));
        let got: Vec<_> = issues.0.iter().map(|i| i.path.as_str()).collect();
        assert_eq!(got, ["overload.x", "overload.eventLoopDelayMs"]);
    }
}
