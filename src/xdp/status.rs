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
}

impl Serialize for XdpCounters {
    /// `{ passed, dropped: { cidr, dynamic, penalty, synFlood, unparsed }, banned, banExtended }`.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Dropped {
            cidr: u64,
            dynamic: u64,
            penalty: u64,
            syn_flood: u64,
            unparsed: u64,
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
            },
            banned: self.banned,
            ban_extended: self.ban_extended,
        }
        .serialize(s)
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
        }
    }
}
