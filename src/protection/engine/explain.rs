//! `explain(ip)` on one listener: everything the engine holds about one client, across its tiers
//! (lists, dynamic blocks, the penalty box and its escalation level, the rate limits, the
//! connection counts, the known-good mark, the prefix tier, defense mode), and the first check
//! that would refuse its next connection, in the documented check order (and the shadow
//! policy's verdict beside it).
//!
//! Read-only for the caller: entries are only brought to the rate-limit generation in force (the
//! rescale the client's next decision would make anyway); nothing is debited, no entry is created.
//! O(1) table lookups plus one walk over the dynamic blocks and the running boxes (an operator's
//! call, not the admission path).

use super::*;
use crate::protection::DynamicRule;

/// The prefix tier's view of one client (`prefixLimit`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrefixExplanation {
    /// The prefix (`203.0.113.0/24`, `2001:db8:1::/48`).
    pub cidr: IpNet,
    /// Whether the prefix has an entry in the prefix table.
    pub tracked: bool,
    /// Time left in the penalty box, ms (a local prefix box or one received from another node).
    pub boxed_ms: Option<u64>,
    /// Time until the prefix's rate admits a connection again, ms (`None`: it admits now).
    pub rate_limited_ms: Option<u64>,
    /// Connections open on the prefix, and `prefixLimit.maxConcurrent` (0 = off).
    pub active: u64,
    /// `prefixLimit.maxConcurrent` (0 = off).
    pub max_concurrent: u64,
}

/// One client's state on one listener ([`Engine::explain`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Explanation {
    /// The key the client is tracked under: its address, or its IPv6 prefix
    /// (`protection.ipv6PrefixLength`).
    pub key: IpKey,
    /// The listener has a protection policy.
    pub protected: bool,
    /// `mode: 'observe'`: a refusal below is reported, the connection admitted.
    pub observe: bool,
    /// On `protection.allowlist`: every check is skipped.
    pub allowlisted: bool,
    /// On `protection.blocklist`.
    pub blocklisted: bool,
    /// `blockIp` entries covering the client on this listener.
    pub dynamic: Vec<DynamicRule>,
    /// Time left in the penalty box, ms, and what put it there (`None`: a rate-limit box).
    pub boxed: Option<(u64, Option<&'static str>)>,
    /// Penalty-box escalation level (boxes in a row; 0 = the next box is a first one).
    pub box_level: u8,
    /// Time until `rateLimit` / `sustained` admit a connection again, ms (`None`: they admit now).
    pub rate_limited_ms: Option<u64>,
    /// Connections open, and `maxConcurrentPerIp` (0 = off).
    pub active: u64,
    /// `maxConcurrentPerIp` (0 = off).
    pub max_concurrent: u64,
    /// Handshakes in progress.
    pub pending: u64,
    /// Time left on the known-good mark, ms (`None`: not known-good).
    pub known_good_ms: Option<u64>,
    /// The client has an entry in the per-IP table.
    pub tracked: bool,
    /// The prefix tier, when `prefixLimit` is set.
    pub prefix: Option<PrefixExplanation>,
    /// Defense mode is on for this listener.
    pub defense_active: bool,
    /// The first check that would refuse the client's next connection now, in the check order
    /// (`None`: admitted, the listener budget permitting).
    pub verdict: Option<BlockReason>,
    /// What `protection.shadow` would refuse the client's next connection as, in the shadow's
    /// check order (`None`: the shadow admits it, or there is no shadow policy); reported, never
    /// enforced.
    pub shadow_verdict: Option<BlockReason>,
}

impl Engine {
    /// `ip`'s state on this listener at `now_ns` (CLOCK_MONOTONIC ns); see the module doc.
    pub fn explain(&self, ip: IpAddr, now_ns: u64) -> Explanation {
        let ip = ip.to_canonical();
        let inst = self.installed.load();
        let p = inst.policy.as_deref();
        let epoch = self.epoch.load(Ordering::Acquire);
        let v6 = p.map_or(DEFAULT_IPV6_PREFIX, |p| p.ipv6_prefix_length());
        let key = IpKey::new(ip, v6);
        let dynamic: Vec<DynamicRule> = self
            .dynamic
            .rules(Some(self.port), now_ns)
            .into_iter()
            .filter(|r| r.net.contains(&ip))
            .collect();
        let retry = |gs| retry_after_ms(gs, now_ns);
        let client = self.table.inspect(key, |e| {
            let e = e?;
            inst.rescale(e, Tier::Client);
            let box_ms = p
                .and_then(|p| p.penalty_duration_ns())
                .and_then(|_| penalty::remaining_ms(e.penalty, epoch, now_ns));
            let rate = retry([
                inst.rate.map(|g| (g, e.tat_rate)),
                inst.sustained.map(|g| (g, e.tat_sustained)),
            ]);
            Some((box_ms, rate, u64::from(e.active), u64::from(e.pending)))
        });
        let (level, known_good_s) = self
            .table
            .inspect_standing(key, |s| s.map_or((0, 0), |s| (s.level, s.known_good_s)));
        let known_good_ms = (u64::from(known_good_s) * crate::clock::NS_PER_SEC)
            .checked_sub(now_ns)
            .filter(|&ns| ns > 0)
            .map(ns_to_ms_ceil);
        let offender_ms = self
            .offenders
            .boxed(now_ns)
            .into_iter()
            .find(|(k, _)| *k == key)
            .map(|(_, d)| ns_to_ms_ceil(d.saturating_sub(now_ns)));
        let boxed = match (client.and_then(|c| c.0), offender_ms) {
            (Some(ms), _) => Some((ms, None)),
            (None, Some(ms)) => Some((ms, Some(H2_BOX_NOTE))),
            (None, None) => None,
        };
        let prefix = p.and_then(|p| Some((p, p.prefix_limit()?))).map(|(p, pl)| {
            let pkey = pl.key(ip);
            let entry = self.prefixes.inspect(pkey, |e| {
                let e = e?;
                inst.rescale(e, Tier::Prefix);
                let box_ms = p
                    .penalty_duration_ns()
                    .and_then(|_| penalty::remaining_ms(e.penalty, epoch, now_ns));
                let rate = retry([inst.prefix.map(|g| (g, e.tat_rate)), None]);
                Some((box_ms, rate, u64::from(e.active)))
            });
            let received = self
                .prefix_boxes
                .holding(ip, now_ns)
                .map(|(_, d)| ns_to_ms_ceil(d.saturating_sub(now_ns)));
            PrefixExplanation {
                cidr: pkey.to_ipnet(),
                tracked: entry.is_some(),
                boxed_ms: entry.and_then(|e| e.0).or(received),
                rate_limited_ms: entry.and_then(|e| e.1),
                active: entry.map_or(0, |e| e.2),
                max_concurrent: pl.max_concurrent,
            }
        });
        let mut x = Explanation {
            key,
            protected: p.is_some(),
            observe: p.is_some_and(|p| p.mode() == Mode::Observe),
            allowlisted: p.is_some_and(|p| p.allowlist().contains(ip)),
            blocklisted: p.is_some_and(|p| p.blocklist().contains(ip)),
            dynamic,
            boxed,
            box_level: level,
            rate_limited_ms: client.and_then(|c| c.1),
            active: client.map_or(0, |c| c.2),
            max_concurrent: p.map_or(0, |p| p.max_concurrent_per_ip()),
            pending: client.map_or(0, |c| c.3),
            known_good_ms,
            tracked: client.is_some(),
            prefix,
            defense_active: self.defended.load(Ordering::Relaxed),
            verdict: None,
            shadow_verdict: None,
        };
        x.verdict = x.first_refusal();
        if let (Some(sp), false) = (p.and_then(|p| p.shadow()), x.allowlisted) {
            let c = crate::protection::shadow::ShadowClient {
                ip,
                key,
                active: u32::try_from(x.active).unwrap_or(u32::MAX),
                known_good: x.known_good_ms.is_some(),
            };
            x.shadow_verdict = self.shadow.verdict(sp, &c, now_ns);
        }
        x
    }
}

impl Explanation {
    /// The check order of admission at accept (see the engine's module doc).
    fn first_refusal(&self) -> Option<BlockReason> {
        if self.allowlisted {
            return None;
        }
        let at_max = |active: u64, max: u64| max > 0 && active >= max;
        let prefix = self.prefix.as_ref();
        [
            (self.blocklisted, BlockReason::CidrBlocked),
            (!self.dynamic.is_empty(), BlockReason::DynamicBlocked),
            (self.boxed.is_some(), BlockReason::PenaltyBoxed),
            (self.rate_limited_ms.is_some(), BlockReason::RateLimited),
            (
                at_max(self.active, self.max_concurrent),
                BlockReason::TooManyConnections,
            ),
            (
                prefix.is_some_and(|p| p.boxed_ms.is_some()),
                BlockReason::PenaltyBoxed,
            ),
            (
                prefix.is_some_and(|p| p.rate_limited_ms.is_some()),
                BlockReason::PrefixRateLimited,
            ),
            (
                prefix.is_some_and(|p| at_max(p.active, p.max_concurrent)),
                BlockReason::PrefixTooManyConnections,
            ),
        ]
        .into_iter()
        .find_map(|(hit, reason)| hit.then_some(reason))
    }
}
