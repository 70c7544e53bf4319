//! [`ProtectionPolicy`]: one listener's compiled `ProtectionConfig` (GCRA parameters, CIDR range
//! sets, fingerprint hash sets), so a swap is one pointer store and no decision re-parses
//! anything. The JSON walk that validates and builds it lives in `crate::config::protection`,
//! which documents the number rules.

use super::cidr::CidrSet;
use super::key::{IpKey, DEFAULT_IPV6_PREFIX};
use crate::clock::{ms_to_ns, ns_to_ms_ceil};
use crate::gcra::{Gcra, NS_PER_SEC};
use crate::http2::H2GuardConfig;
use ipnet::IpNet;
use std::collections::HashSet;
use std::net::IpAddr;

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

/// Default `http2.boxAfterViolations`.
pub const DEFAULT_H2_BOX_AFTER_VIOLATIONS: u32 = 3;
/// Default `http2.clientFactor`.
pub const DEFAULT_H2_CLIENT_FACTOR: f64 = 2.0;
/// The window `http2.boxAfterViolations` is counted over, ns (60 s).
pub const H2_VIOLATION_WINDOW_NS: u64 = 60 * NS_PER_SEC;

/// Largest accepted rate, per second (the emission interval stays >= 1 ns).
pub const MAX_RATE_PER_SEC: f64 = 1e9;
/// Default `knownGoodTtlMs`.
pub const DEFAULT_KNOWN_GOOD_TTL_MS: u64 = 3_600_000;
/// Default `slowRequest.headTimeoutMs`.
pub const DEFAULT_HEAD_TIMEOUT_MS: u64 = 10_000;
/// Default `slowRequest.keepAliveTimeoutMs` (nginx's `keepalive_timeout`).
pub const DEFAULT_KEEP_ALIVE_TIMEOUT_MS: u64 = 75_000;
/// Default `slowRequest.maxRequestsPerConnection` (nginx's `keepalive_requests`).
pub const DEFAULT_MAX_REQUESTS_PER_CONNECTION: u32 = 1000;
/// Default `prefixLimit.ipv4PrefixLength`.
pub const DEFAULT_PREFIX_V4: u8 = 24;
/// Default `prefixLimit.ipv6PrefixLength`.
pub const DEFAULT_PREFIX_V6: u8 = 48;
/// Accepted `prefixLimit.ipv4PrefixLength` values (bits).
pub const PREFIX_V4_LENGTHS: std::ops::RangeInclusive<u8> = 1..=32;
/// Accepted `prefixLimit.ipv6PrefixLength` values (bits; at most the policy's
/// `ipv6PrefixLength`).
pub const PREFIX_V6_LENGTHS: std::ops::RangeInclusive<u8> = 1..=128;
/// Accepted `ipv6PrefixLength` values (bits): how much of an IPv6 address is one client.
pub const CLIENT_V6_LENGTHS: std::ops::RangeInclusive<u8> = 1..=128;

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

impl RateLimit {
    /// `rate` connections per `period_ns` with `burst` at once (GCRA, exact).
    pub fn new(rate: f64, period_ns: u64, burst: u64) -> RateLimit {
        RateLimit {
            rate,
            burst,
            gcra: Gcra::per_period(rate, period_ns, burst),
        }
    }

    /// `rate` connections per second.
    pub fn per_second(rate: f64, burst: u64) -> RateLimit {
        RateLimit::new(rate, NS_PER_SEC, burst)
    }

    /// `rate` connections per minute.
    pub fn per_minute(rate: f64, burst: u64) -> RateLimit {
        RateLimit::new(rate, 60 * NS_PER_SEC, burst)
    }
}

/// `clusterRateLimit`: a per-client GCRA shared by every node through Redis
/// ([`crate::cluster`]); each node admits from a local lease of `lease` tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClusterRateLimit {
    /// The limit (connections per second, burst) Redis enforces over all nodes.
    pub limit: RateLimit,
    /// Tokens one node takes from Redis per refill (1..=burst); the worst-case over-admission
    /// over all nodes is nodes × lease (docs/cluster.md).
    pub lease: u64,
}

impl ClusterRateLimit {
    /// The default lease: a tenth of a second of the rate, at least 1, at most the burst.
    pub fn default_lease(limit: &RateLimit) -> u64 {
        ((limit.rate / 10.0).ceil() as u64).clamp(1, limit.burst.max(1))
    }
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

/// `xdp.maxBans` at least (also the smallest size of a kernel ban map).
pub const XDP_MAX_BANS_MIN: u32 = 1024;
/// `xdp.maxBans` at most (also the largest size of a kernel ban map).
pub const XDP_MAX_BANS_MAX: u32 = 1 << 24;

/// The `xdp` fields beside the SYN limit (docs/xdp.md).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XdpKernel {
    /// `synBudgetPerSecond`: SYNs per second this port admits in the kernel from sources that
    /// are not known-good (burst: one second's worth); `None` = no budget.
    pub syn_budget_per_second: Option<u64>,
    /// `maxBans`: entries of the kernel's ban maps (the largest over the listeners wins; without
    /// it the largest `maxTrackedIps` of the protected listeners).
    pub max_bans: Option<u64>,
    /// `dropFragments`: every IP fragment is dropped by the attached program (any listener
    /// setting it turns it on).
    pub drop_fragments: bool,
}

/// `http2`: the HTTP/2 guard of the listener's terminated h2 connections (docs/protection.md:
/// HTTP/2 guard). The limits are the guard's own config; this adds the off switch and the box
/// threshold. The same defaults apply to a listener without protection.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Http2Policy {
    /// `enabled` (default true): inspect terminated h2 connections at all.
    pub enabled: bool,
    /// The per-connection limits.
    pub guard: H2GuardConfig,
    /// `boxAfterViolations` (default 3): violations by one client within
    /// [`H2_VIOLATION_WINDOW_NS`] that put it in the penalty box. A rapid reset boxes at its
    /// first violation.
    pub box_after_violations: u32,
    /// `clientFactor` (default 2, in [1, 1000]): a client's stream, reset and control-frame
    /// budgets over all its connections are the per-connection rates and bursts × this.
    pub client_factor: f64,
}

impl Default for Http2Policy {
    fn default() -> Self {
        Http2Policy {
            enabled: true,
            guard: H2GuardConfig::default(),
            box_after_violations: DEFAULT_H2_BOX_AFTER_VIOLATIONS,
            client_factor: DEFAULT_H2_CLIENT_FACTOR,
        }
    }
}

/// `prefixLimit`: the second tier, keyed by network prefix.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PrefixLimit {
    /// Bits of an IPv4 address that name its prefix (1..=32, default 24).
    pub ipv4_prefix_length: u8,
    /// Bits of an IPv6 address that name its prefix (1..=128, default 48).
    pub ipv6_prefix_length: u8,
    /// New connections per second per prefix (GCRA), if set.
    pub rate: Option<RateLimit>,
    /// Simultaneous connections per prefix (0 = off).
    pub max_concurrent: u64,
}

impl PrefixLimit {
    /// The prefix-tier key of client `ip`: its first `ipv4PrefixLength` (IPv4, IPv4-mapped) or
    /// `ipv6PrefixLength` bits ([`IpKey::prefix`]).
    #[inline]
    pub fn key(&self, ip: IpAddr) -> IpKey {
        IpKey::prefix(ip, self.ipv4_prefix_length, self.ipv6_prefix_length)
    }
}

/// `requestLimit`: a GCRA on the HTTP requests of each client (HTTP/1.1 request heads, HTTP/2
/// streams opened), over all its connections, and optionally of each prefix.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RequestLimit {
    /// `requestsPerSecond` and `burst`, per client (keyed as admission keys clients:
    /// `ipv6PrefixLength`).
    pub client: RateLimit,
    /// `prefixRequestsPerSecond` and `prefixBurst`, per prefix (the `prefixLimit` prefix lengths,
    /// or its defaults /24 and /48), if set.
    pub prefix: Option<RateLimit>,
}

/// `listenerLimit`: a budget over every client of the listener that is not known-good.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ListenerLimit {
    /// New connections per second over the listener (one GCRA word), if set.
    pub rate: Option<RateLimit>,
    /// Handshakes in progress over the listener (0 = off).
    pub max_pending_handshakes: u64,
}

/// `defense.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DefenseMode {
    /// Never on.
    #[default]
    Off,
    /// On while the listener's new-connection rate is anomalous (see `protection::defense`).
    Auto,
    /// Always on (the operator's switch during an incident).
    On,
}

/// `defense`: what turns defense mode on and what it tightens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Defense {
    /// `mode`.
    pub mode: DefenseMode,
    /// Deviations above the mean that count as a surge (default 3).
    pub sigma: f64,
    /// Floor of the threshold, new connections per second (default 100).
    pub min_connections_per_second: u64,
    /// Time below the threshold before it turns off, ns (default 30 s).
    pub hold_ns: u64,
    /// Rate multiplier for clients that are not known-good, in (0, 1] (default 0.25).
    pub factor: f64,
    /// Pending handshakes of a client first seen while defense is on (default 1).
    pub new_client_max_pending: u64,
    /// Handshake timeout while on, ns (default 3 s; the smaller of it and
    /// `tlsHandshakeTimeoutMs` applies).
    pub handshake_timeout_ns: u64,
}

impl Default for Defense {
    fn default() -> Self {
        Defense {
            mode: DefenseMode::Off,
            sigma: 3.0,
            min_connections_per_second: 100,
            hold_ns: 30 * NS_PER_SEC,
            factor: 0.25,
            new_client_max_pending: 1,
            handshake_timeout_ns: 3 * NS_PER_SEC,
        }
    }
}

/// `penaltyBox.escalation`: a client (or prefix) boxed again soon gets a longer box.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Escalation {
    /// Multiplier per repeat (≥ 1, default 2).
    pub factor: f64,
    /// Longest box, ns (default 24 h).
    pub max_duration_ns: u64,
    /// How long after a box's deadline a new box counts as a repeat, ns (default 24 h).
    pub memory_ns: u64,
}

/// A set of JA3 (32 chars) or JA4 (36 chars) fingerprints, compared ASCII-case-insensitively
/// without allocation.
#[derive(Debug, Clone, Default)]
pub struct FingerprintSet<const N: usize> {
    set: HashSet<[u8; N]>,
    list: Vec<String>,
}

impl<const N: usize> FingerprintSet<N> {
    /// A set of the given fingerprints (already validated: `N` characters each).
    pub fn new(list: Vec<String>) -> Self {
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

/// The compiled `protection.shadow` block (see [`crate::protection::shadow`]): every limit and
/// list here is evaluated beside the enforced one and reported, never enforced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ShadowPolicy {
    /// `shadow.blocklist` (reason `cidr_blocked`).
    pub blocklist: CidrSet,
    /// `shadow.rateLimit`.
    pub rate_limit: Option<RateLimit>,
    /// `shadow.sustained`.
    pub sustained: Option<RateLimit>,
    /// `shadow.maxConcurrentPerIp` (0 = off).
    pub max_concurrent_per_ip: u64,
    /// `shadow.prefixLimit` (reasons `prefix_rate_limited`, `prefix_too_many_connections`), with
    /// its own prefix lengths.
    pub prefix_limit: Option<PrefixLimit>,
    /// `shadow.listenerLimit.connectionsPerSecond` and `burst` (reason `listener_overloaded`):
    /// new connections per second over the listener from clients that are not known-good.
    pub listener_rate: Option<RateLimit>,
}

/// A validated, compiled `ProtectionConfig`. Immutable; engines hold it in an `Arc`.
#[derive(Debug, Clone)]
pub struct ProtectionPolicy {
    pub(crate) rate_limit: Option<RateLimit>,
    pub(crate) sustained: Option<RateLimit>,
    pub(crate) penalty_duration_ns: Option<u64>,
    pub(crate) max_concurrent_per_ip: u64,
    pub(crate) allowlist: CidrSet,
    pub(crate) blocklist: CidrSet,
    pub(crate) ja3: FingerprintSet<32>,
    pub(crate) ja4: FingerprintSet<36>,
    pub(crate) tls_handshake_timeout_ns: u64,
    pub(crate) require_sni: bool,
    pub(crate) ipv6_prefix_length: u8,
    pub(crate) max_tracked_ips: usize,
    pub(crate) slow_handshake: SlowHandshake,
    pub(crate) mode: Mode,
    pub(crate) xdp: Option<XdpSyn>,
    pub(crate) xdp_kernel: XdpKernel,
    pub(crate) http2: Http2Policy,
    pub(crate) prefix_limit: Option<PrefixLimit>,
    pub(crate) listener_limit: Option<ListenerLimit>,
    pub(crate) known_good_ttl_ns: u64,
    pub(crate) defense: Defense,
    pub(crate) head_timeout_ns: u64,
    pub(crate) keep_alive_timeout_ns: u64,
    pub(crate) max_requests_per_connection: u32,
    pub(crate) request_limit: Option<RequestLimit>,
    pub(crate) escalation: Option<Escalation>,
    pub(crate) cluster_rate_limit: Option<ClusterRateLimit>,
    pub(crate) shadow: Option<ShadowPolicy>,
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
            tls_handshake_timeout_ns: ms_to_ns(DEFAULT_TLS_HANDSHAKE_TIMEOUT_MS),
            require_sni: false,
            ipv6_prefix_length: DEFAULT_IPV6_PREFIX,
            max_tracked_ips: DEFAULT_MAX_TRACKED_IPS,
            slow_handshake: SlowHandshake {
                max_pending_per_ip: DEFAULT_MAX_PENDING_PER_IP,
                min_bytes_per_second: 0,
            },
            mode: Mode::Enforce,
            xdp: None,
            xdp_kernel: XdpKernel::default(),
            http2: Http2Policy::default(),
            prefix_limit: None,
            listener_limit: None,
            known_good_ttl_ns: ms_to_ns(DEFAULT_KNOWN_GOOD_TTL_MS),
            defense: Defense::default(),
            head_timeout_ns: ms_to_ns(DEFAULT_HEAD_TIMEOUT_MS),
            keep_alive_timeout_ns: ms_to_ns(DEFAULT_KEEP_ALIVE_TIMEOUT_MS),
            max_requests_per_connection: DEFAULT_MAX_REQUESTS_PER_CONNECTION,
            request_limit: None,
            escalation: None,
            shadow: None,
            cluster_rate_limit: None,
        }
    }
}

impl ProtectionPolicy {
    /// `rateLimit` (per second), if set.
    pub fn rate_limit(&self) -> Option<&RateLimit> {
        self.rate_limit.as_ref()
    }
    /// `clusterRateLimit`, if set.
    pub fn cluster_rate_limit(&self) -> Option<&ClusterRateLimit> {
        self.cluster_rate_limit.as_ref()
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
        self.penalty_duration_ns.map(ns_to_ms_ceil)
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
        ns_to_ms_ceil(self.tls_handshake_timeout_ns)
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
    /// The other `xdp` fields (SYN budget, map size, fragments).
    pub fn xdp_kernel(&self) -> XdpKernel {
        self.xdp_kernel
    }
    /// `http2`.
    pub fn http2(&self) -> &Http2Policy {
        &self.http2
    }
    /// How long a client is boxed when it earns a box outside the rate limits (the HTTP/2
    /// guard's `boxAfterViolations`): `penaltyBox.durationMs`, or 10 min without a penalty box
    /// (ns).
    pub fn box_duration_ns(&self) -> u64 {
        self.penalty_duration_ns
            .unwrap_or(ms_to_ns(DEFAULT_PENALTY_MS))
    }
    /// `prefixLimit`, if set.
    pub fn prefix_limit(&self) -> Option<&PrefixLimit> {
        self.prefix_limit.as_ref()
    }
    /// `listenerLimit`, if set.
    pub fn listener_limit(&self) -> Option<&ListenerLimit> {
        self.listener_limit.as_ref()
    }
    /// `knownGoodTtlMs` in ns.
    pub fn known_good_ttl_ns(&self) -> u64 {
        self.known_good_ttl_ns
    }
    /// `defense`.
    pub fn defense(&self) -> &Defense {
        &self.defense
    }
    /// `slowRequest.headTimeoutMs` in ns (applies to routes that carry HTTP).
    pub fn head_timeout_ns(&self) -> u64 {
        self.head_timeout_ns
    }
    /// `slowRequest.keepAliveTimeoutMs` in ns: the longest gap between two requests of an
    /// HTTP/1.1 connection while no response is outstanding.
    pub fn keep_alive_timeout_ns(&self) -> u64 {
        self.keep_alive_timeout_ns
    }
    /// `slowRequest.maxRequestsPerConnection` (0 = no cap).
    pub fn max_requests_per_connection(&self) -> u32 {
        self.max_requests_per_connection
    }
    /// `requestLimit`, if set.
    pub fn request_limit(&self) -> Option<&RequestLimit> {
        self.request_limit.as_ref()
    }
    /// The prefix lengths (IPv4, IPv6 bits) `requestLimit`'s prefix budget is kept per: those of
    /// `prefixLimit`, or its defaults (the IPv6 one at most `ipv6PrefixLength`).
    pub fn request_prefix_lengths(&self) -> (u8, u8) {
        match &self.prefix_limit {
            Some(pl) => (pl.ipv4_prefix_length, pl.ipv6_prefix_length),
            None => (
                DEFAULT_PREFIX_V4,
                DEFAULT_PREFIX_V6.min(self.ipv6_prefix_length),
            ),
        }
    }
    /// `shadow`: limits evaluated and reported, never enforced, if set.
    pub fn shadow(&self) -> Option<&ShadowPolicy> {
        self.shadow.as_ref()
    }
    /// `penaltyBox.escalation`, if set.
    pub fn escalation(&self) -> Option<&Escalation> {
        self.escalation.as_ref()
    }
    /// The handshake timeout for a client defense mode tightens, ns.
    pub fn defense_handshake_timeout_ns(&self) -> u64 {
        self.tls_handshake_timeout_ns
            .min(self.defense.handshake_timeout_ns)
    }
    /// Whether a fingerprint list is set (a ClientHello must then be read completely).
    pub fn has_fingerprint_lists(&self) -> bool {
        !self.ja3.is_empty() || !self.ja4.is_empty()
    }
}
