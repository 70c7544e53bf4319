//! What the XDP layer reports and is told: the attach mode, ban reasons, counters and
//! `xdpStatus()`.

use super::abi;
use serde::{Serialize, Serializer};

/// How to attach (`attachXdp({ mode })`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum XdpMode {
    /// Native (driver) XDP, falling back to generic when the driver refuses.
    #[default]
    Auto,
    /// Native (driver) XDP only.
    Native,
    /// Generic (skb) XDP only: works on every interface, after skb allocation.
    Generic,
}

/// Why a source is banned in the kernel (`rampart_ban.reason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BanReason {
    /// `blockIp` of one address: fixed deadline; drops count as `dynamic`.
    Dynamic,
    /// Userspace penalty box: extended by continued SYN excess; drops count as `penalty`.
    Penalty,
    /// Kernel SYN limit: extended by continued SYN excess; drops count as `synFlood`.
    SynFlood,
}

impl BanReason {
    /// The `rampart_ban.reason` value.
    pub const fn code(self) -> u32 {
        match self {
            Self::Dynamic => abi::BAN_DYNAMIC,
            Self::Penalty => abi::BAN_PENALTY,
            Self::SynFlood => abi::BAN_SYNFLOOD,
        }
    }

    /// The name `explain(ip)` reports it under, as its drop counter in `xdpStatus()`
    /// (`dynamic`, `penalty`, `synFlood`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Dynamic => "dynamic",
            Self::Penalty => "penalty",
            Self::SynFlood => "synFlood",
        }
    }

    /// From a `rampart_ban.reason` value (unknown values read as `Penalty`).
    pub const fn from_code(code: u32) -> Self {
        match code {
            abi::BAN_DYNAMIC => Self::Dynamic,
            abi::BAN_SYNFLOOD => Self::SynFlood,
            _ => Self::Penalty,
        }
    }
}

/// Kernel counters, summed over CPUs (packets, except the two ban counters).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XdpCounters {
    /// Packets passed (every XDP_PASS, any port).
    pub passed: u64,
    /// SYNs dropped by a configured blocklist CIDR.
    pub dropped_cidr: u64,
    /// SYNs dropped by a dynamic block.
    pub dropped_dynamic: u64,
    /// SYNs dropped while the source is penalty-boxed.
    pub dropped_penalty: u64,
    /// SYNs dropped by the kernel SYN limit and while banned for it.
    pub dropped_syn_flood: u64,
    /// Packets whose port could not be read, from a blocked or banned source.
    pub dropped_unparsed: u64,
    /// Sources the kernel banned for SYN excess (`xdp.synPerSecond`).
    pub banned: u64,
    /// Ban deadlines the kernel moved forward because a banned source kept flooding.
    pub ban_extended: u64,
    /// SYNs of sources that are not known-good beyond the port's `xdp.synBudgetPerSecond`.
    pub dropped_syn_budget: u64,
    /// UDP / UDP-Lite / SCTP / DCCP packets to a protected port.
    pub dropped_non_tcp: u64,
    /// IP fragments dropped by `xdp.dropFragments`.
    pub dropped_fragment: u64,
}

impl Serialize for XdpCounters {
    /// `{ passed, dropped: { cidr, dynamic, penalty, synFlood, unparsed, synBudget, nonTcp,
    /// fragment }, banned, banExtended }`.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Dropped {
            cidr: u64,
            dynamic: u64,
            penalty: u64,
            syn_flood: u64,
            unparsed: u64,
            syn_budget: u64,
            non_tcp: u64,
            fragment: u64,
        }
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Shape {
            passed: u64,
            dropped: Dropped,
            banned: u64,
            ban_extended: u64,
        }
        Shape {
            passed: self.passed,
            dropped: Dropped {
                cidr: self.dropped_cidr,
                dynamic: self.dropped_dynamic,
                penalty: self.dropped_penalty,
                syn_flood: self.dropped_syn_flood,
                unparsed: self.dropped_unparsed,
                syn_budget: self.dropped_syn_budget,
                non_tcp: self.dropped_non_tcp,
                fragment: self.dropped_fragment,
            },
            banned: self.banned,
            ban_extended: self.ban_extended,
        }
        .serialize(s)
    }
}

/// The sizes (max entries) the attached program's sized maps were created with: the largest
/// `maxTrackedIps` of the protected listeners, or the largest `xdp.maxBans` when one sets it.
/// LRU hashes are preallocated (about 100 bytes of kernel memory per entry each).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct XdpMapSizes {
    /// Per-source bans (LRU hash).
    pub bans: u32,
    /// Boxed prefixes (LPM trie, allocated per entry).
    pub prefix_bans: u32,
    /// Per-(source, port) SYN GCRA states (LRU hash).
    pub syn_states: u32,
    /// Known-good sources per port (LRU hash).
    pub known_good: u32,
}

impl XdpMapSizes {
    /// The object's own sizes (unattached loads, tests).
    pub const DEFAULT: XdpMapSizes = XdpMapSizes {
        bans: abi::MAX_BANS,
        prefix_bans: abi::MAX_PREFIX_BANS,
        syn_states: abi::MAX_SYN_STATES,
        known_good: abi::MAX_KNOWN_GOOD,
    };

    /// Smallest size of a sized map.
    pub const MIN: u32 = crate::protection::policy::XDP_MAX_BANS_MIN;
    /// Largest size of a sized map (`xdp.maxBans` at most).
    pub const MAX: u32 = crate::protection::policy::XDP_MAX_BANS_MAX;

    /// Every sized map at `n` entries, clamped to [`MIN`](Self::MIN)..=[`MAX`](Self::MAX).
    pub fn uniform(n: u64) -> XdpMapSizes {
        let n = n.clamp(u64::from(Self::MIN), u64::from(Self::MAX)) as u32;
        XdpMapSizes {
            bans: n,
            prefix_bans: n,
            syn_states: n,
            known_good: n,
        }
    }
}

/// `xdpStatus()` (and `metrics().xdp`), serialised as the JS API shapes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct XdpStatus {
    /// Whether the program is attached to `interface`.
    pub attached: bool,
    /// Interface name (empty when not attached).
    pub interface: String,
    /// `"native"` or `"generic"` when attached; `"none"` otherwise.
    pub mode: &'static str,
    /// Counters summed over CPUs.
    pub counters: XdpCounters,
    /// Live bans, sorted: bare IPv4 addresses, IPv6 as their prefix (`2001:db8:1:2::/64`).
    pub banned_ips: Vec<String>,
    /// Failed kernel-map writes (bans, dynamic blocks) since start; each was also an `'error'`
    /// event `xdp_sync_failed`.
    pub errors: u64,
    /// Penalty boxes not mirrored as kernel bans because the ban queue was full.
    pub ban_queue_overflow: u64,
    /// What the sized maps were allocated with (all zero when not attached).
    pub maps: XdpMapSizes,
    /// Known-good marks not mirrored to the kernel because their queue was full.
    pub known_good_queue_overflow: u64,
    /// Known-good marks (and their refreshes) written to the kernel since start.
    pub known_good_mirrored: u64,
}

impl XdpStatus {
    /// The status when nothing is attached.
    pub fn not_attached() -> Self {
        Self {
            attached: false,
            interface: String::new(),
            mode: "none",
            counters: XdpCounters::default(),
            banned_ips: Vec::new(),
            errors: 0,
            ban_queue_overflow: 0,
            maps: XdpMapSizes::default(),
            known_good_queue_overflow: 0,
            known_good_mirrored: 0,
        }
    }
}
