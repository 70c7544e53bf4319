//! The per-request fields of a `ProtectionConfig` (docs/protection.md: Fields): `requestLimit`
//! and `slowRequest`, validated with the number rules of [`super::protection`].

use super::error::Issues;
use super::value::{duration_ns, field, int_field, join, object, positive, reject_unknown};
use crate::protection::policy::{ProtectionPolicy, RateLimit, RequestLimit, MAX_RATE_PER_SEC};
use serde_json::{Map, Value};

/// Largest `burst` / `prefixBurst`.
const MAX_BURST: f64 = 1e9;

/// `slowRequest: { headTimeoutMs, keepAliveTimeoutMs, maxRequestsPerConnection }` into `p`;
/// fields left out keep their defaults. `maxRequestsPerConnection: 0` is the documented "no cap".
pub(super) fn slow_request(v: &Value, path: &str, p: &mut ProtectionPolicy, issues: &mut Issues) {
    let Some(o) = object(v, path, issues) else {
        return;
    };
    reject_unknown(
        o,
        &[
            "headTimeoutMs",
            "keepAliveTimeoutMs",
            "maxRequestsPerConnection",
        ],
        path,
        issues,
    );
    if let Some(v) = field(o, "headTimeoutMs") {
        if let Some(ns) = duration_ns(v, &join(path, "headTimeoutMs"), issues) {
            p.head_timeout_ns = ns;
        }
    }
    if let Some(v) = field(o, "keepAliveTimeoutMs") {
        if let Some(ns) = duration_ns(v, &join(path, "keepAliveTimeoutMs"), issues) {
            p.keep_alive_timeout_ns = ns;
        }
    }
    let max = f64::from(u32::MAX);
    if let Some(n) = int_field(o, path, "maxRequestsPerConnection", (0.0, max), issues) {
        p.max_requests_per_connection = n as u32;
    }
}

/// One optional rate (`rate_key`, requests per second) with its burst (`burst_key`, defaulting
/// to the rate rounded up; it needs the rate).
fn rate(
    o: &Map<String, Value>,
    path: &str,
    (rate_key, burst_key): (&str, &str),
    issues: &mut Issues,
) -> Option<RateLimit> {
    let r = field(o, rate_key)
        .and_then(|v| positive(v, &join(path, rate_key), MAX_RATE_PER_SEC, issues));
    let burst = int_field(o, path, burst_key, (1.0, MAX_BURST), issues);
    if burst.is_some() && field(o, rate_key).is_none() {
        issues.push(join(path, burst_key), format!("needs {rate_key}"));
    }
    let r = r?;
    let burst = burst.unwrap_or_else(|| r.ceil().clamp(1.0, MAX_BURST) as u64);
    Some(RateLimit::per_second(r, burst))
}

/// `requestLimit: { requestsPerSecond, burst?, prefixRequestsPerSecond?, prefixBurst? }`:
/// `requestsPerSecond` is required.
pub(super) fn request_limit(v: &Value, path: &str, issues: &mut Issues) -> Option<RequestLimit> {
    let before = issues.len();
    let o = object(v, path, issues)?;
    reject_unknown(
        o,
        &[
            "requestsPerSecond",
            "burst",
            "prefixRequestsPerSecond",
            "prefixBurst",
        ],
        path,
        issues,
    );
    if field(o, "requestsPerSecond").is_none() {
        issues.push(
            join(path, "requestsPerSecond"),
            "is required: a finite number > 0 (requests per second per client)",
        );
    }
    let client = rate(o, path, ("requestsPerSecond", "burst"), issues);
    let prefix = rate(o, path, ("prefixRequestsPerSecond", "prefixBurst"), issues);
    (issues.len() == before).then_some(RequestLimit {
        client: client?,
        prefix,
    })
}
