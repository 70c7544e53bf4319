//! `ProtectionConfig` (JSON) → [`ProtectionPolicy`]: validation of every field (docs/protection.md:
//! Fields) and compilation at parse time.
//!
//!
//! Number rules (all issues are collected, each with its full path):
//! - rates (`connectionsPerSecond`, `connectionsPerMinute`): finite, > 0, fractional allowed
//!   (0.5/s = one every 2 s), at most 1e9/s (6e10/min) so the emission interval is ≥ 1 ns;
//! - durations (`durationMs`, `tlsHandshakeTimeoutMs`): finite ms > 0, fractional allowed, at most
//!   2^53−1; `tlsHandshakeTimeoutMs: 0` is Symphony's "the default" (10 s);
//! - counts (`burst`, `maxConcurrentPerIp`, `maxTrackedIps`, `ipv6PrefixLength`,
//!   `maxPendingPerIp`, `minBytesPerSecond`, `synPerSecond`, `synBurst`): integers in a stated
//!   range; a burst defaults to its rate rounded up;
//! - `http2`: counts (`maxConcurrentStreams`, `maxHeaderBlockBytes`, `maxContinuationFrames`,
//!   `boxAfterViolations`, `maxStreamsPerConnection`) are integers ≥ 1 within a stated range;
//!   `clientFactor` a number in [1, 1000]; rates (`maxStreamsPerSecond`,
//!   `maxResetsPerSecond`, `maxControlFramesPerSecond`) follow the rate rule above;
//! - NaN, ±Infinity (sent as `{"$nonFinite": ..}`), negatives, and zero wherever zero would
//!   silently disable the feature are errors; `maxConcurrentPerIp: 0` and
//!   `slowHandshake.minBytesPerSecond: 0` are the documented "off" values.

use super::error::{ConfigError, Issues};
use super::value::{
    array, as_number, boolean, describe, duration_ns, field, index, int_field, join, number_in,
    object, one_of, positive, reject_unknown, string, MAX_SAFE_INTEGER,
};
use crate::clock::ms_to_ns;
use crate::gcra::NS_PER_SEC;
use crate::protection::cidr::{parse_cidr, CidrSet};
use crate::protection::entry::MAX_PENDING;
use crate::protection::policy::{
    ClusterRateLimit, Defense, DefenseMode, Escalation, FingerprintSet, Http2Policy, ListenerLimit,
    Mode, PrefixLimit, ProtectionPolicy, RateLimit, XdpSyn, CLIENT_V6_LENGTHS, DEFAULT_PENALTY_MS,
    DEFAULT_PREFIX_V4, DEFAULT_PREFIX_V6, DEFAULT_TLS_HANDSHAKE_TIMEOUT_MS, MAX_RATE_PER_SEC,
    PREFIX_V4_LENGTHS, PREFIX_V6_LENGTHS, XDP_MAX_BANS_MAX, XDP_MAX_BANS_MIN,
};
use ipnet::IpNet;
use serde_json::{Map, Value};

const MAX_COUNT_LIMIT: f64 = 1e9;
const MAX_CONCURRENT: f64 = 1_000_000.0;
/// `http2.maxConcurrentStreams` at most: the guard keeps 8 bytes per open stream, so this bounds
/// one connection's stream set at 80 KB.
const MAX_H2_STREAMS: f64 = 10_000.0;
/// `http2.clientFactor` at most.
const MAX_H2_CLIENT_FACTOR: f64 = 1_000.0;
/// `http2.boxAfterViolations` at most.
const MAX_H2_BOX_AFTER: f64 = 1_000.0;

/// Parses a whole `ProtectionConfig` given at the root path `protection` (tests, tools).
pub fn policy_from_json(v: &Value) -> Result<ProtectionPolicy, ConfigError> {
    let mut issues = Issues::default();
    let p = parse_protection(v, "protection", &mut issues);
    match p {
        Some(p) if issues.is_empty() => Ok(p),
        _ => Err(ConfigError::new(issues.0)),
    }
}

const FIELDS: &[&str] = &[
    "rateLimit",
    "sustained",
    "penaltyBox",
    "maxConcurrentPerIp",
    "allowlist",
    "blocklist",
    "ja3Blocklist",
    "ja4Blocklist",
    "tlsHandshakeTimeoutMs",
    "requireSni",
    "ipv6PrefixLength",
    "maxTrackedIps",
    "slowHandshake",
    "mode",
    "xdp",
    "http2",
    "prefixLimit",
    "listenerLimit",
    "knownGoodTtlMs",
    "defense",
    "slowRequest",
    "clusterRateLimit",
    "requestLimit",
    "shadow",
];

const HTTP2_FIELDS: &[&str] = &[
    "enabled",
    "maxConcurrentStreams",
    "maxStreamsPerSecond",
    "maxResetsPerSecond",
    "maxHeaderBlockBytes",
    "maxContinuationFrames",
    "maxControlFramesPerSecond",
    "boxAfterViolations",
    "maxStreamsPerConnection",
    "clientFactor",
];

/// Validates and compiles one `ProtectionConfig` found at `path` (e.g.
/// `protection[1].protection`, `listeners[0].protection`). Every problem is pushed to `issues`
/// with its full path; returns `None` if this config added any.
pub fn parse_protection(v: &Value, path: &str, issues: &mut Issues) -> Option<ProtectionPolicy> {
    let before = issues.len();
    let obj = object(v, path, issues)?;
    reject_unknown(obj, FIELDS, path, issues);
    let mut p = ProtectionPolicy::default();
    let f = |k: &str| join(path, k);

    if let Some(v) = field(obj, "rateLimit") {
        p.rate_limit = rate(v, &f("rateLimit"), "connectionsPerSecond", 1, issues);
    }
    if let Some(v) = field(obj, "clusterRateLimit") {
        p.cluster_rate_limit = cluster_rate(v, &f("clusterRateLimit"), issues);
    }
    if let Some(v) = field(obj, "sustained") {
        p.sustained = rate(v, &f("sustained"), "connectionsPerMinute", 60, issues);
    }
    if let Some(v) = field(obj, "penaltyBox") {
        let path = f("penaltyBox");
        if let Some(o) = object(v, &path, issues) {
            reject_unknown(o, &["durationMs", "escalation"], &path, issues);
            p.penalty_duration_ns = match field(o, "durationMs") {
                Some(d) => duration_ns(d, &join(&path, "durationMs"), issues),
                None => Some(ms_to_ns(DEFAULT_PENALTY_MS)),
            };
            if let Some(e) = field(o, "escalation") {
                let base = p.penalty_duration_ns.unwrap_or(0);
                p.escalation = escalation(e, &join(&path, "escalation"), base, issues);
            }
        }
    }
    if let Some(v) = field(obj, "maxConcurrentPerIp") {
        p.max_concurrent_per_ip = max_concurrent_per_ip(v, &f("maxConcurrentPerIp"), issues);
    }
    if let Some(v) = field(obj, "allowlist") {
        p.allowlist = CidrSet::new(cidrs(v, &f("allowlist"), issues));
    }
    if let Some(v) = field(obj, "blocklist") {
        p.blocklist = CidrSet::new(cidrs(v, &f("blocklist"), issues));
    }
    if let Some(v) = field(obj, "ja3Blocklist") {
        p.ja3 = FingerprintSet::new(strings(v, &f("ja3Blocklist"), issues, |s| {
            crate::tls::ja3::validate_ja3(s)
        }));
    }
    if let Some(v) = field(obj, "ja4Blocklist") {
        p.ja4 = FingerprintSet::new(strings(v, &f("ja4Blocklist"), issues, |s| {
            crate::tls::ja4::validate_ja4(s)
        }));
    }
    if let Some(v) = field(obj, "tlsHandshakeTimeoutMs") {
        tls_handshake_timeout(v, &f("tlsHandshakeTimeoutMs"), &mut p, issues);
    }
    if let Some(v) = field(obj, "requireSni") {
        p.require_sni = boolean(v, &f("requireSni"), issues).unwrap_or(false);
    }
    if let Some(v) = field(obj, "ipv6PrefixLength") {
        if let Some(n) = number_in(
            v,
            &f("ipv6PrefixLength"),
            f64::from(*CLIENT_V6_LENGTHS.start()),
            f64::from(*CLIENT_V6_LENGTHS.end()),
            true,
            issues,
        ) {
            p.ipv6_prefix_length = n as u8;
        }
    }
    if let Some(v) = field(obj, "maxTrackedIps") {
        if let Some(n) = number_in(v, &f("maxTrackedIps"), 1.0, MAX_COUNT_LIMIT, true, issues) {
            p.max_tracked_ips = n as usize;
        }
    }
    if let Some(v) = field(obj, "slowHandshake") {
        slow_handshake(v, &f("slowHandshake"), &mut p, issues);
    }
    if let Some(v) = field(obj, "mode") {
        p.mode = match one_of(v, &f("mode"), &["enforce", "observe"], issues) {
            Some("observe") => Mode::Observe,
            _ => Mode::Enforce,
        };
    }
    if let Some(v) = field(obj, "xdp") {
        xdp(v, &f("xdp"), &mut p, issues);
    }
    if let Some(v) = field(obj, "http2") {
        if let Some(h) = http2(v, &f("http2"), issues) {
            p.http2 = h;
        }
    }
    if let Some(v) = field(obj, "prefixLimit") {
        p.prefix_limit = prefix_limit(v, &f("prefixLimit"), p.ipv6_prefix_length, issues);
    }
    if let Some(v) = field(obj, "shadow") {
        p.shadow = shadow(v, &f("shadow"), p.ipv6_prefix_length, issues);
    }
    if let Some(v) = field(obj, "listenerLimit") {
        p.listener_limit = listener_limit(v, &f("listenerLimit"), issues);
    }
    if let Some(v) = field(obj, "knownGoodTtlMs") {
        if let Some(ns) = duration_ns(v, &f("knownGoodTtlMs"), issues) {
            p.known_good_ttl_ns = ns;
        }
    }
    if let Some(v) = field(obj, "defense") {
        if let Some(d) = defense(v, &f("defense"), issues) {
            p.defense = d;
        }
    }
    if let Some(v) = field(obj, "slowRequest") {
        super::requests::slow_request(v, &f("slowRequest"), &mut p, issues);
    }
    if let Some(v) = field(obj, "requestLimit") {
        p.request_limit = super::requests::request_limit(v, &f("requestLimit"), issues);
    }
    (issues.len() == before).then_some(p)
}

/// `tlsHandshakeTimeoutMs` (0 keeps the default), into `p`.
fn tls_handshake_timeout(v: &Value, path: &str, p: &mut ProtectionPolicy, issues: &mut Issues) {
    // 0 keeps the default, as Symphony reads it.
    match as_number(v) {
        Some(0.0) => {}
        Some(n) if n.is_finite() && n > 0.0 => {
            if let Some(ns) = duration_ns(v, path, issues) {
                p.tls_handshake_timeout_ns = ns;
            }
        }
        _ => issues.push(
            path,
            format!(
                "must be a finite number >= 0 (0: the default, {DEFAULT_TLS_HANDSHAKE_TIMEOUT_MS}), got {}",
                describe(v)
            ),
        ),
    }
}

/// `slowHandshake`: `maxPendingPerIp` and `minBytesPerSecond`, into `p`.
fn slow_handshake(v: &Value, path: &str, p: &mut ProtectionPolicy, issues: &mut Issues) {
    if let Some(o) = object(v, path, issues) {
        reject_unknown(o, &["maxPendingPerIp", "minBytesPerSecond"], path, issues);
        if let Some(v) = field(o, "maxPendingPerIp") {
            let p2 = join(path, "maxPendingPerIp");
            let max = MAX_PENDING as f64;
            if let Some(n) = number_in(v, &p2, 1.0, max, true, issues) {
                p.slow_handshake.max_pending_per_ip = n as u64;
            }
        }
        if let Some(v) = field(o, "minBytesPerSecond") {
            let p2 = join(path, "minBytesPerSecond");
            if let Some(n) = number_in(v, &p2, 0.0, MAX_SAFE_INTEGER, true, issues) {
                p.slow_handshake.min_bytes_per_second = n as u64;
            }
        }
    }
}

/// `xdp`: the kernel's SYN limit and budget, `maxBans`, `dropFragments`, into `p`.
fn xdp(v: &Value, path: &str, p: &mut ProtectionPolicy, issues: &mut Issues) {
    if let Some(o) = object(v, path, issues) {
        reject_unknown(
            o,
            &[
                "synPerSecond",
                "synBurst",
                "synBudgetPerSecond",
                "maxBans",
                "dropFragments",
            ],
            path,
            issues,
        );
        let sps = match field(o, "synPerSecond") {
            Some(v) => number_in(
                v,
                &join(path, "synPerSecond"),
                1.0,
                MAX_COUNT_LIMIT,
                true,
                issues,
            ),
            None if field(o, "synBurst").is_some() => {
                issues.push(
                    join(path, "synPerSecond"),
                    "is required with synBurst: an integer in [1, 1000000000] (SYNs per \
                     second per source)",
                );
                None
            }
            None => None,
        };
        if let Some(v) = field(o, "synBudgetPerSecond") {
            p.xdp_kernel.syn_budget_per_second = number_in(
                v,
                &join(path, "synBudgetPerSecond"),
                1.0,
                MAX_COUNT_LIMIT,
                true,
                issues,
            )
            .map(|n| n as u64);
        }
        if let Some(v) = field(o, "maxBans") {
            p.xdp_kernel.max_bans = number_in(
                v,
                &join(path, "maxBans"),
                f64::from(XDP_MAX_BANS_MIN),
                f64::from(XDP_MAX_BANS_MAX),
                true,
                issues,
            )
            .map(|n| n as u64);
        }
        if let Some(v) = field(o, "dropFragments") {
            if let Some(b) = boolean(v, &join(path, "dropFragments"), issues) {
                p.xdp_kernel.drop_fragments = b;
            }
        }
        let burst = field(o, "synBurst").map(|v| {
            number_in(
                v,
                &join(path, "synBurst"),
                1.0,
                MAX_COUNT_LIMIT,
                true,
                issues,
            )
        });
        if let Some(sps) = sps {
            let burst = match burst {
                Some(b) => b,
                None => Some(sps),
            };
            p.xdp = burst.map(|b| XdpSyn {
                syn_per_second: sps as u64,
                syn_burst: b as u64,
            });
        }
    }
}

/// `http2: { enabled, maxConcurrentStreams, ... }`; fields left out keep their defaults (§7.3).
fn http2(v: &Value, path: &str, issues: &mut Issues) -> Option<Http2Policy> {
    let before = issues.len();
    let o = object(v, path, issues)?;
    reject_unknown(o, HTTP2_FIELDS, path, issues);
    let mut h = Http2Policy::default();
    let g = &mut h.guard;
    let count = |k: &str, max: f64, issues: &mut Issues| {
        field(o, k).and_then(|v| number_in(v, &join(path, k), 1.0, max, true, issues))
    };
    let per_second = |k: &str, issues: &mut Issues| {
        field(o, k).and_then(|v| positive(v, &join(path, k), MAX_RATE_PER_SEC, issues))
    };
    if let Some(v) = field(o, "enabled") {
        h.enabled = boolean(v, &join(path, "enabled"), issues).unwrap_or(true);
    }
    if let Some(n) = count("maxConcurrentStreams", MAX_H2_STREAMS, issues) {
        g.max_concurrent_streams = n as u32;
    }
    if let Some(r) = per_second("maxStreamsPerSecond", issues) {
        g.max_streams_per_second = r;
    }
    if let Some(r) = per_second("maxResetsPerSecond", issues) {
        g.max_resets_per_second = r;
    }
    if let Some(n) = count("maxHeaderBlockBytes", MAX_COUNT_LIMIT, issues) {
        g.max_header_block_bytes = n as u32;
    }
    if let Some(n) = count("maxContinuationFrames", MAX_CONCURRENT, issues) {
        g.max_continuation_frames = n as u32;
    }
    if let Some(r) = per_second("maxControlFramesPerSecond", issues) {
        g.max_control_frames_per_second = r;
    }
    if let Some(n) = count("boxAfterViolations", MAX_H2_BOX_AFTER, issues) {
        h.box_after_violations = n as u32;
    }
    // A connection has at most 2^30 client (odd) stream ids.
    if let Some(n) = count("maxStreamsPerConnection", f64::from(1u32 << 30), issues) {
        h.guard.max_streams_per_connection = n as u32;
    }
    if let Some(v) = field(o, "clientFactor") {
        let path = join(path, "clientFactor");
        if let Some(f) = number_in(v, &path, 1.0, MAX_H2_CLIENT_FACTOR, false, issues) {
            h.client_factor = f;
        }
    }
    (issues.len() == before).then_some(h)
}

/// An optional `connectionsPerSecond` with its `burst` (the burst needs the rate).
fn optional_rate(o: &Map<String, Value>, path: &str, issues: &mut Issues) -> Option<RateLimit> {
    let r = field(o, "connectionsPerSecond").and_then(|v| {
        positive(
            v,
            &join(path, "connectionsPerSecond"),
            MAX_RATE_PER_SEC,
            issues,
        )
    });
    let burst = int_field(o, path, "burst", (1.0, MAX_COUNT_LIMIT), issues);
    if burst.is_some() && field(o, "connectionsPerSecond").is_none() {
        issues.push(join(path, "burst"), "needs connectionsPerSecond");
    }
    let r = r?;
    let burst = burst.unwrap_or_else(|| r.ceil().clamp(1.0, MAX_COUNT_LIMIT) as u64);
    Some(RateLimit::per_second(r, burst))
}

/// A range of prefix lengths as `int_field` bounds.
fn lengths(r: std::ops::RangeInclusive<u8>) -> (f64, f64) {
    (f64::from(*r.start()), f64::from(*r.end()))
}

/// `prefixLimit: { ipv4PrefixLength, ipv6PrefixLength, connectionsPerSecond, burst,
/// maxConcurrent }`: a rate or a concurrency cap (or both) is required.
fn prefix_limit(v: &Value, path: &str, client_v6: u8, issues: &mut Issues) -> Option<PrefixLimit> {
    let before = issues.len();
    let o = object(v, path, issues)?;
    reject_unknown(
        o,
        &[
            "ipv4PrefixLength",
            "ipv6PrefixLength",
            "connectionsPerSecond",
            "burst",
            "maxConcurrent",
        ],
        path,
        issues,
    );
    let v4 = int_field(
        o,
        path,
        "ipv4PrefixLength",
        lengths(PREFIX_V4_LENGTHS),
        issues,
    )
    .map_or(DEFAULT_PREFIX_V4, |n| n as u8);
    let v6 = int_field(
        o,
        path,
        "ipv6PrefixLength",
        lengths(PREFIX_V6_LENGTHS),
        issues,
    )
    .map_or(DEFAULT_PREFIX_V6, |n| n as u8);
    if v6 > client_v6 {
        issues.push(
            join(path, "ipv6PrefixLength"),
            format!(
                "must be at most ipv6PrefixLength ({client_v6}), got {v6}: a prefix holds whole clients"
            ),
        );
    }
    let rate = optional_rate(o, path, issues);
    let max_concurrent =
        int_field(o, path, "maxConcurrent", (1.0, MAX_CONCURRENT), issues).unwrap_or(0);
    if field(o, "connectionsPerSecond").is_none() && field(o, "maxConcurrent").is_none() {
        issues.push(
            path,
            "needs connectionsPerSecond or maxConcurrent (or both): a finite number > 0, an integer in [1, 1000000]",
        );
    }
    (issues.len() == before).then_some(PrefixLimit {
        ipv4_prefix_length: v4,
        ipv6_prefix_length: v6,
        rate,
        max_concurrent,
    })
}

/// `listenerLimit: { connectionsPerSecond, burst, maxPendingHandshakes }`: a rate or a pending
/// cap (or both) is required.
fn listener_limit(v: &Value, path: &str, issues: &mut Issues) -> Option<ListenerLimit> {
    let before = issues.len();
    let o = object(v, path, issues)?;
    reject_unknown(
        o,
        &["connectionsPerSecond", "burst", "maxPendingHandshakes"],
        path,
        issues,
    );
    let rate = optional_rate(o, path, issues);
    let max_pending = int_field(
        o,
        path,
        "maxPendingHandshakes",
        (1.0, MAX_COUNT_LIMIT),
        issues,
    )
    .unwrap_or(0);
    if field(o, "connectionsPerSecond").is_none() && field(o, "maxPendingHandshakes").is_none() {
        issues.push(
            path,
            "needs connectionsPerSecond or maxPendingHandshakes (or both): a finite number > 0, an integer in [1, 1000000000]",
        );
    }
    (issues.len() == before).then_some(ListenerLimit {
        rate,
        max_pending_handshakes: max_pending,
    })
}

/// `defense: { mode, sigma, minConnectionsPerSecond, holdMs, factor, newClientMaxPending,
/// handshakeTimeoutMs }`.
fn defense(v: &Value, path: &str, issues: &mut Issues) -> Option<Defense> {
    let before = issues.len();
    let o = object(v, path, issues)?;
    reject_unknown(
        o,
        &[
            "mode",
            "sigma",
            "minConnectionsPerSecond",
            "holdMs",
            "factor",
            "newClientMaxPending",
            "handshakeTimeoutMs",
        ],
        path,
        issues,
    );
    let mut d = Defense::default();
    if let Some(m) = field(o, "mode") {
        d.mode = match one_of(m, &join(path, "mode"), &["off", "auto", "on"], issues) {
            Some("auto") => DefenseMode::Auto,
            Some("on") => DefenseMode::On,
            _ => DefenseMode::Off,
        };
    }
    if let Some(n) = field(o, "sigma")
        .and_then(|v| number_in(v, &join(path, "sigma"), 0.0, 1000.0, false, issues))
    {
        d.sigma = n;
    }
    if let Some(n) = int_field(
        o,
        path,
        "minConnectionsPerSecond",
        (1.0, MAX_COUNT_LIMIT),
        issues,
    ) {
        d.min_connections_per_second = n;
    }
    if let Some(ns) = field(o, "holdMs").and_then(|v| duration_ns(v, &join(path, "holdMs"), issues))
    {
        d.hold_ns = ns;
    }
    if let Some(v) = field(o, "factor") {
        match as_number(v) {
            Some(n) if n.is_finite() && n > 0.0 && n <= 1.0 => d.factor = n,
            _ => issues.push(
                join(path, "factor"),
                format!(
                    "must be a finite number in (0, 1] (a rate multiplier), got {}",
                    describe(v)
                ),
            ),
        }
    }
    if let Some(n) = int_field(
        o,
        path,
        "newClientMaxPending",
        (1.0, MAX_PENDING as f64),
        issues,
    ) {
        d.new_client_max_pending = n;
    }
    if let Some(ns) = field(o, "handshakeTimeoutMs")
        .and_then(|v| duration_ns(v, &join(path, "handshakeTimeoutMs"), issues))
    {
        d.handshake_timeout_ns = ns;
    }
    (issues.len() == before).then_some(d)
}

/// `penaltyBox.escalation: { factor, maxDurationMs, memoryMs }` (`base_ns`: `durationMs`).
fn escalation(v: &Value, path: &str, base_ns: u64, issues: &mut Issues) -> Option<Escalation> {
    let before = issues.len();
    let o = object(v, path, issues)?;
    reject_unknown(o, &["factor", "maxDurationMs", "memoryMs"], path, issues);
    let mut e = Escalation {
        factor: 2.0,
        max_duration_ns: ms_to_ns(86_400_000),
        memory_ns: ms_to_ns(86_400_000),
    };
    if let Some(n) = field(o, "factor")
        .and_then(|v| number_in(v, &join(path, "factor"), 1.0, 1e6, false, issues))
    {
        e.factor = n;
    }
    if let Some(v) = field(o, "maxDurationMs") {
        if let Some(ns) = duration_ns(v, &join(path, "maxDurationMs"), issues) {
            if ns < base_ns {
                issues.push(
                    join(path, "maxDurationMs"),
                    format!(
                        "must be at least penaltyBox.durationMs ({} ms), got {}",
                        base_ns.div_ceil(crate::clock::NS_PER_MS),
                        describe(v)
                    ),
                );
            }
            e.max_duration_ns = ns;
        }
    } else {
        e.max_duration_ns = e.max_duration_ns.max(base_ns);
    }
    if let Some(ns) =
        field(o, "memoryMs").and_then(|v| duration_ns(v, &join(path, "memoryMs"), issues))
    {
        e.memory_ns = ns;
    }
    (issues.len() == before).then_some(e)
}

/// `clusterRateLimit: { connectionsPerSecond, burst?, lease? }` (docs/cluster.md);
/// `lease` defaults to [`crate::protection::ClusterRateLimit::default_lease`] and is at most
/// `burst`.
fn cluster_rate(v: &Value, path: &str, issues: &mut Issues) -> Option<ClusterRateLimit> {
    let o: &Map<String, Value> = object(v, path, issues)?;
    reject_unknown(o, &["connectionsPerSecond", "burst", "lease"], path, issues);
    let rest: Map<String, Value> = o
        .iter()
        .filter(|(k, _)| *k == "connectionsPerSecond" || *k == "burst")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let lease = o.get("lease");
    let limit = rate(
        &Value::Object(rest),
        path,
        "connectionsPerSecond",
        1,
        issues,
    );
    let lease = match lease.as_ref().filter(|l| !l.is_null()) {
        Some(l) => Some(number_in(l, &join(path, "lease"), 1.0, 10_000.0, true, issues)? as u64),
        None => None,
    };
    let limit = limit?;
    let lease = lease.unwrap_or_else(|| ClusterRateLimit::default_lease(&limit));
    if lease > limit.burst {
        issues.push(
            join(path, "lease"),
            format!("must be at most burst ({}), got {lease}", limit.burst),
        );
        return None;
    }
    Some(ClusterRateLimit { limit, lease })
}

/// `rateLimit` / `sustained`: `{ <rate_field>, burst? }` per `period_s` seconds.
/// `maxConcurrentPerIp` (enforced or shadow): an integer in [0, MAX_CONCURRENT], 0 = off (also
/// when invalid: the problem is in `issues`).
fn max_concurrent_per_ip(v: &Value, path: &str, issues: &mut Issues) -> u64 {
    number_in(v, path, 0.0, MAX_CONCURRENT, true, issues).map_or(0, |n| n as u64)
}

/// `shadow: { blocklist?, rateLimit?, sustained?, maxConcurrentPerIp?, prefixLimit?,
/// listenerLimit? }`, each field as in the enforced policy (`client_v6`: the policy's
/// `ipv6PrefixLength`, which bounds `prefixLimit.ipv6PrefixLength`), except that
/// `listenerLimit.maxPendingHandshakes` has no shadow (docs/protection.md: Shadow rules).
fn shadow(
    v: &Value,
    path: &str,
    client_v6: u8,
    issues: &mut Issues,
) -> Option<crate::protection::ShadowPolicy> {
    let obj = object(v, path, issues)?;
    reject_unknown(
        obj,
        &[
            "blocklist",
            "rateLimit",
            "sustained",
            "maxConcurrentPerIp",
            "prefixLimit",
            "listenerLimit",
        ],
        path,
        issues,
    );
    let f = |k: &str| join(path, k);
    let mut s = crate::protection::ShadowPolicy::default();
    if let Some(v) = field(obj, "blocklist") {
        s.blocklist = CidrSet::new(cidrs(v, &f("blocklist"), issues));
    }
    if let Some(v) = field(obj, "rateLimit") {
        s.rate_limit = rate(v, &f("rateLimit"), "connectionsPerSecond", 1, issues);
    }
    if let Some(v) = field(obj, "sustained") {
        s.sustained = rate(v, &f("sustained"), "connectionsPerMinute", 60, issues);
    }
    if let Some(v) = field(obj, "maxConcurrentPerIp") {
        s.max_concurrent_per_ip = max_concurrent_per_ip(v, &f("maxConcurrentPerIp"), issues);
    }
    if let Some(v) = field(obj, "prefixLimit") {
        s.prefix_limit = prefix_limit(v, &f("prefixLimit"), client_v6, issues);
    }
    if let Some(v) = field(obj, "listenerLimit") {
        let path = f("listenerLimit");
        if let Some(l) = listener_limit(v, &path, issues) {
            if l.max_pending_handshakes != 0 {
                issues.push(
                    join(&path, "maxPendingHandshakes"),
                    "has no shadow (a handshake cap acts while the handshake runs, not at accept): remove it, or set connectionsPerSecond",
                );
            }
            s.listener_rate = l.rate;
        }
    }
    Some(s)
}

fn rate(
    v: &Value,
    path: &str,
    rate_field: &str,
    period_s: u64,
    issues: &mut Issues,
) -> Option<RateLimit> {
    let o: &Map<String, Value> = object(v, path, issues)?;
    reject_unknown(o, &[rate_field, "burst"], path, issues);
    let max_rate = MAX_RATE_PER_SEC * period_s as f64;
    let r = match field(o, rate_field) {
        Some(v) => positive(v, &join(path, rate_field), max_rate, issues),
        None => {
            issues.push(join(path, rate_field), "is required: a finite number > 0");
            None
        }
    };
    let burst = match field(o, "burst") {
        Some(v) => Some(number_in(
            v,
            &join(path, "burst"),
            1.0,
            MAX_COUNT_LIMIT,
            true,
            issues,
        )?),
        None => None,
    };
    let r = r?;
    let burst = burst.unwrap_or_else(|| r.ceil().clamp(1.0, MAX_COUNT_LIMIT)) as u64;
    Some(RateLimit::new(r, period_s * NS_PER_SEC, burst))
}

/// An array of CIDR strings; each bad entry is reported at its index.
pub(crate) fn cidrs(v: &Value, path: &str, issues: &mut Issues) -> Vec<IpNet> {
    strings(v, path, issues, parse_cidr)
}

/// An array of strings, each checked by `check`.
fn strings<T>(
    v: &Value,
    path: &str,
    issues: &mut Issues,
    check: impl Fn(&str) -> Result<T, String>,
) -> Vec<T> {
    let Some(items) = array(v, path, issues) else {
        return Vec::new();
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let p = index(path, i);
        if let Some(s) = string(item, &p, issues) {
            match check(s) {
                Ok(t) => out.push(t),
                Err(msg) => issues.push(p, msg),
            }
        }
    }
    out
}
