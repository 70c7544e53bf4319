//! `ProtectionConfig` → [`ProtectionPolicy`]: validation of every field (DESIGN.md §2) and
//! compilation (GCRA parameters, CIDR range sets, fingerprint hash sets) at parse time, so a swap
//! is one pointer store and no decision re-parses anything.
//!
//! Number rules (all issues are collected, each with its full path):
//! - rates (`connectionsPerSecond`, `connectionsPerMinute`): finite, > 0, fractional allowed
//!   (0.5/s = one every 2 s), at most 1e9/s (6e10/min) so the emission interval is ≥ 1 ns;
//! - durations (`durationMs`, `tlsHandshakeTimeoutMs`): finite ms > 0, fractional allowed, at most
//!   2^53−1;
//! - counts (`burst`, `maxConcurrentPerIp`, `maxTrackedIps`, `ipv6PrefixLength`,
//!   `maxPendingPerIp`, `minBytesPerSecond`, `synPerSecond`, `synBurst`): integers in a stated
//!   range; a burst defaults to its rate rounded up;
//! - NaN, ±Infinity (sent as `{"$nonFinite": ..}`), negatives, and zero wherever zero would
//!   silently disable the feature are errors; `maxConcurrentPerIp: 0` and
//!   `slowHandshake.minBytesPerSecond: 0` are the documented "off" values.

use super::cidr::{parse_cidr, CidrSet};
use super::gcra::{Gcra, NS_PER_SEC};
use super::key::DEFAULT_IPV6_PREFIX;
use crate::config::error::Issues;
use crate::config::value::{
    array, as_number, boolean, describe, field, index, join, number_in, object, one_of,
    reject_unknown, string, MAX_SAFE_INTEGER,
};
use ipnet::IpNet;
use serde_json::{Map, Value};
use std::collections::HashSet;

/// Default `penaltyBox.durationMs`.
pub const DEFAULT_PENALTY_MS: u64 = 600_000;
/// Default `tlsHandshakeTimeoutMs`.
pub const DEFAULT_TLS_HANDSHAKE_TIMEOUT_MS: u64 = 10_000;
/// Default `maxTrackedIps`.
pub const DEFAULT_MAX_TRACKED_IPS: usize = 1_000_000;
/// Default `slowHandshake.maxPendingPerIp`.
pub const DEFAULT_MAX_PENDING_PER_IP: u64 = 64;
/// XDP ban duration when there is no penalty box (ms).
pub const DEFAULT_XDP_BAN_MS: u64 = 600_000;

const MAX_RATE_PER_SEC: f64 = 1e9;
const MAX_COUNT_LIMIT: f64 = 1e9;
const MAX_CONCURRENT: f64 = 1_000_000.0;

/// `mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Refuse what the policy refuses.
    #[default]
    Enforce,
    /// Decide and report, but admit everything (a dry run).
    Observe,
}

/// One GCRA limit as configured (`rateLimit` or `sustained`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimit {
    /// Connections per period (per second for `rateLimit`, per minute for `sustained`).
    pub rate: f64,
    /// Connections admitted at once from a fresh client.
    pub burst: u64,
    /// The compiled limit.
    pub gcra: Gcra,
}

/// `slowHandshake`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SlowHandshake {
    /// Handshakes in progress allowed per client (default 64).
    pub max_pending_per_ip: u64,
    /// Minimum bytes/s a client must send before its ClientHello is read (0 = off); enforced by
    /// the listener's peek loop.
    pub min_bytes_per_second: u64,
}

/// `xdp`: the per-source SYN limit enforced in the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XdpSyn {
    /// SYNs per second per source.
    pub syn_per_second: u64,
    /// SYN burst (default `syn_per_second`).
    pub syn_burst: u64,
}

/// A set of JA3 (32 chars) or JA4 (36 chars) fingerprints, compared ASCII-case-insensitively
/// without allocation.
#[derive(Debug, Clone, Default)]
pub struct FingerprintSet<const N: usize> {
    set: HashSet<[u8; N]>,
    list: Vec<String>,
}

impl<const N: usize> FingerprintSet<N> {
    fn new(list: Vec<String>) -> Self {
        let mut list: Vec<String> = list.into_iter().map(|s| s.to_ascii_lowercase()).collect();
        list.sort();
        list.dedup();
        let set = list
            .iter()
            .filter_map(|s| <[u8; N]>::try_from(s.as_bytes()).ok())
            .collect();
        FingerprintSet { set, list }
    }

    /// Whether `fp` (any case) is in the set.
    #[inline]
    pub fn contains(&self, fp: &str) -> bool {
        let Ok(mut buf) = <[u8; N]>::try_from(fp.as_bytes()) else {
            return false;
        };
        buf.make_ascii_lowercase();
        self.set.contains(&buf)
    }

    /// The fingerprints, lower-case, sorted, deduplicated.
    pub fn list(&self) -> &[String] {
        &self.list
    }

    /// True when the list is empty.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
}

/// A validated, compiled `ProtectionConfig`. Immutable; engines hold it in an `Arc`.
#[derive(Debug, Clone)]
pub struct ProtectionPolicy {
    rate_limit: Option<RateLimit>,
    sustained: Option<RateLimit>,
    penalty_duration_ns: Option<u64>,
    max_concurrent_per_ip: u64,
    allowlist: CidrSet,
    blocklist: CidrSet,
    ja3: FingerprintSet<32>,
    ja4: FingerprintSet<36>,
    tls_handshake_timeout_ns: u64,
    require_sni: bool,
    ipv6_prefix_length: u8,
    max_tracked_ips: usize,
    slow_handshake: SlowHandshake,
    mode: Mode,
    xdp: Option<XdpSyn>,
}

impl Default for ProtectionPolicy {
    /// Every field at its default (`{}`): no limits, no lists, enforce mode.
    fn default() -> Self {
        ProtectionPolicy {
            rate_limit: None,
            sustained: None,
            penalty_duration_ns: None,
            max_concurrent_per_ip: 0,
            allowlist: CidrSet::default(),
            blocklist: CidrSet::default(),
            ja3: FingerprintSet::default(),
            ja4: FingerprintSet::default(),
            tls_handshake_timeout_ns: DEFAULT_TLS_HANDSHAKE_TIMEOUT_MS * 1_000_000,
            require_sni: false,
            ipv6_prefix_length: DEFAULT_IPV6_PREFIX,
            max_tracked_ips: DEFAULT_MAX_TRACKED_IPS,
            slow_handshake: SlowHandshake {
                max_pending_per_ip: DEFAULT_MAX_PENDING_PER_IP,
                min_bytes_per_second: 0,
            },
            mode: Mode::Enforce,
            xdp: None,
        }
    }
}

impl ProtectionPolicy {
    /// Parses a whole `ProtectionConfig` given as JSON at the root path (tests, tools).
    pub fn from_json(v: &Value) -> Result<ProtectionPolicy, crate::config::ConfigError> {
        let mut issues = Issues::default();
        let p = parse_protection(v, "protection", &mut issues);
        match p {
            Some(p) if issues.is_empty() => Ok(p),
            _ => Err(crate::config::ConfigError::new(issues.0)),
        }
    }

    /// `rateLimit` (per second), if set.
    pub fn rate_limit(&self) -> Option<&RateLimit> {
        self.rate_limit.as_ref()
    }
    /// `sustained` (per minute), if set.
    pub fn sustained(&self) -> Option<&RateLimit> {
        self.sustained.as_ref()
    }
    /// Whether `penaltyBox` is on.
    pub fn penalty_box(&self) -> bool {
        self.penalty_duration_ns.is_some()
    }
    /// `penaltyBox.durationMs` in ns, if the box is on.
    pub fn penalty_duration_ns(&self) -> Option<u64> {
        self.penalty_duration_ns
    }
    /// `penaltyBox.durationMs` in ms (rounded up), if the box is on.
    pub fn penalty_duration_ms(&self) -> Option<u64> {
        self.penalty_duration_ns.map(|ns| ns.div_ceil(1_000_000))
    }
    /// How long the XDP program bans an over-limit source: the penalty duration, or 10 min
    /// without a penalty box (ms).
    pub fn xdp_ban_ms(&self) -> u64 {
        self.penalty_duration_ms().unwrap_or(DEFAULT_XDP_BAN_MS)
    }
    /// `maxConcurrentPerIp` (0 = off).
    pub fn max_concurrent_per_ip(&self) -> u64 {
        self.max_concurrent_per_ip
    }
    /// `allowlist`, compiled.
    pub fn allowlist(&self) -> &CidrSet {
        &self.allowlist
    }
    /// `blocklist`, compiled.
    pub fn blocklist(&self) -> &CidrSet {
        &self.blocklist
    }
    /// `allowlist` as canonical networks (XDP allow-map sync).
    pub fn allowlist_nets(&self) -> Vec<IpNet> {
        self.allowlist.nets().to_vec()
    }
    /// `blocklist` as canonical networks (XDP block-map sync).
    pub fn blocklist_nets(&self) -> Vec<IpNet> {
        self.blocklist.nets().to_vec()
    }
    /// `ja3Blocklist` (lower-case).
    pub fn ja3_blocklist(&self) -> &FingerprintSet<32> {
        &self.ja3
    }
    /// `ja4Blocklist` (lower-case).
    pub fn ja4_blocklist(&self) -> &FingerprintSet<36> {
        &self.ja4
    }
    /// `tlsHandshakeTimeoutMs` in ns.
    pub fn tls_handshake_timeout_ns(&self) -> u64 {
        self.tls_handshake_timeout_ns
    }
    /// `tlsHandshakeTimeoutMs` in ms (rounded up).
    pub fn tls_handshake_timeout_ms(&self) -> u64 {
        self.tls_handshake_timeout_ns.div_ceil(1_000_000)
    }
    /// `requireSni`.
    pub fn require_sni(&self) -> bool {
        self.require_sni
    }
    /// `ipv6PrefixLength` (1..=128).
    pub fn ipv6_prefix_length(&self) -> u8 {
        self.ipv6_prefix_length
    }
    /// `maxTrackedIps`.
    pub fn max_tracked_ips(&self) -> usize {
        self.max_tracked_ips
    }
    /// `slowHandshake`.
    pub fn slow_handshake(&self) -> SlowHandshake {
        self.slow_handshake
    }
    /// `slowHandshake.minBytesPerSecond` in bytes/s (0 = off).
    pub fn min_bytes_per_second(&self) -> u64 {
        self.slow_handshake.min_bytes_per_second
    }
    /// `mode`.
    pub fn mode(&self) -> Mode {
        self.mode
    }
    /// `xdp` SYN limit, if set.
    pub fn xdp(&self) -> Option<XdpSyn> {
        self.xdp
    }
    /// Whether a fingerprint list is set (a ClientHello must then be read completely).
    pub fn has_fingerprint_lists(&self) -> bool {
        !self.ja3.is_empty() || !self.ja4.is_empty()
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
    if let Some(v) = field(obj, "sustained") {
        p.sustained = rate(v, &f("sustained"), "connectionsPerMinute", 60, issues);
    }
    if let Some(v) = field(obj, "penaltyBox") {
        let path = f("penaltyBox");
        if let Some(o) = object(v, &path, issues) {
            reject_unknown(o, &["durationMs"], &path, issues);
            p.penalty_duration_ns = match field(o, "durationMs") {
                Some(d) => duration_ns(d, &join(&path, "durationMs"), issues),
                None => Some(DEFAULT_PENALTY_MS * 1_000_000),
            };
        }
    }
    if let Some(v) = field(obj, "maxConcurrentPerIp") {
        let n = number_in(
            v,
            &f("maxConcurrentPerIp"),
            0.0,
            MAX_CONCURRENT,
            true,
            issues,
        );
        p.max_concurrent_per_ip = n.map_or(0, |n| n as u64);
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
        if let Some(ns) = duration_ns(v, &f("tlsHandshakeTimeoutMs"), issues) {
            p.tls_handshake_timeout_ns = ns;
        }
    }
    if let Some(v) = field(obj, "requireSni") {
        p.require_sni = boolean(v, &f("requireSni"), issues).unwrap_or(false);
    }
    if let Some(v) = field(obj, "ipv6PrefixLength") {
        if let Some(n) = number_in(v, &f("ipv6PrefixLength"), 1.0, 128.0, true, issues) {
            p.ipv6_prefix_length = n as u8;
        }
    }
    if let Some(v) = field(obj, "maxTrackedIps") {
        if let Some(n) = number_in(v, &f("maxTrackedIps"), 1.0, MAX_COUNT_LIMIT, true, issues) {
            p.max_tracked_ips = n as usize;
        }
    }
    if let Some(v) = field(obj, "slowHandshake") {
        let path = f("slowHandshake");
        if let Some(o) = object(v, &path, issues) {
            reject_unknown(o, &["maxPendingPerIp", "minBytesPerSecond"], &path, issues);
            if let Some(v) = field(o, "maxPendingPerIp") {
                let p2 = join(&path, "maxPendingPerIp");
                let max = super::table::MAX_PENDING as f64;
                if let Some(n) = number_in(v, &p2, 1.0, max, true, issues) {
                    p.slow_handshake.max_pending_per_ip = n as u64;
                }
            }
            if let Some(v) = field(o, "minBytesPerSecond") {
                let p2 = join(&path, "minBytesPerSecond");
                if let Some(n) = number_in(v, &p2, 0.0, MAX_SAFE_INTEGER, true, issues) {
                    p.slow_handshake.min_bytes_per_second = n as u64;
                }
            }
        }
    }
    if let Some(v) = field(obj, "mode") {
        p.mode = match one_of(v, &f("mode"), &["enforce", "observe"], issues) {
            Some("observe") => Mode::Observe,
            _ => Mode::Enforce,
        };
    }
    if let Some(v) = field(obj, "xdp") {
        let path = f("xdp");
        if let Some(o) = object(v, &path, issues) {
            reject_unknown(o, &["synPerSecond", "synBurst"], &path, issues);
            let sps = match field(o, "synPerSecond") {
                Some(v) => number_in(
                    v,
                    &join(&path, "synPerSecond"),
                    1.0,
                    MAX_COUNT_LIMIT,
                    true,
                    issues,
                ),
                None => {
                    issues.push(
                        join(&path, "synPerSecond"),
                        "is required: an integer in [1, 1000000000] (SYNs per second per source)",
                    );
                    None
                }
            };
            let burst = field(o, "synBurst").map(|v| {
                number_in(
                    v,
                    &join(&path, "synBurst"),
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
    (issues.len() == before).then_some(p)
}

/// A finite number > 0 and ≤ `max`, with the documented messages.
fn positive(v: &Value, path: &str, max: f64, issues: &mut Issues) -> Option<f64> {
    match as_number(v) {
        Some(n) if n.is_finite() && n > 0.0 => {
            if n <= max {
                Some(n)
            } else {
                issues.push(path, format!("must be at most {max}, got {}", describe(v)));
                None
            }
        }
        _ => {
            issues.push(
                path,
                format!("must be a finite number > 0, got {}", describe(v)),
            );
            None
        }
    }
}

/// A duration in ms (finite, > 0, ≤ 2^53−1, fractional allowed) → ns, rounded up.
fn duration_ns(v: &Value, path: &str, issues: &mut Issues) -> Option<u64> {
    positive(v, path, MAX_SAFE_INTEGER, issues).map(|ms| {
        let ns = (ms * 1e6).ceil();
        if ns >= u64::MAX as f64 {
            u64::MAX
        } else {
            ns as u64
        }
    })
}

/// `rateLimit` / `sustained`: `{ <rate_field>, burst? }` per `period_s` seconds.
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
    Some(RateLimit {
        rate: r,
        burst,
        gcra: Gcra::per_period(r, period_s * NS_PER_SEC, burst),
    })
}

/// An array of CIDR strings; each bad entry is reported at its index.
fn cidrs(v: &Value, path: &str, issues: &mut Issues) -> Vec<IpNet> {
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
