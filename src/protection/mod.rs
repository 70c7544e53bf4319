//! The connection-protection engine: per-IP admission control in front of the TLS proxy.
//!
//! Pure Rust, no sockets: every decision takes the client address and `now_ns`
//! (CLOCK_MONOTONIC). One [`Engine`] per listener holds the per-IP table and the policy in force;
//! [`DynamicBlocks`] (`blockIp`) is shared by all engines. Concepts, one per file:
//! - [`reason`]: block reasons and their wire strings;
//! - [`key`]: what one client is (IPv4 address, IPv6 prefix, IPv4-mapped = IPv4);
//! - [`crate::gcra`] (shared with the route limits and the HTTP/2 guard): the exact one-word
//!   rate limiter;
//! - [`penalty`]: the penalty-box deadline word and its epochs;
//! - [`entry`]: one client's fixed-size state (TATs, box word, counts, flags);
//! - [`table`]: the sharded per-IP table (also the prefix tier's), guards, cap and incremental
//!   eviction;
//! - [`cidr`]: CIDR parsing rules and O(log n) CIDR sets;
//! - [`dynamic`]: runtime blocks with TTL and port scope;
//! - `offenders`: clients boxed for violations on admitted connections (the HTTP/2 guard);
//! - `prefix_boxes`: prefix boxes received from another node (the cluster tier);
//! - [`lease`]: a client's local lease of `clusterRateLimit` tokens, kept beside its entry;
//! - [`policy`]: the compiled `ProtectionConfig` (parsed by `crate::config::protection`);
//! - [`rescale`]: carrying each client's rate-limit usage over a policy swap;
//! - [`defense`]: defense mode's per-second measure, baseline and on/off rule;
//! - [`blocked`]: the O(blocked) view behind `blockedIps()`;
//! - [`engine`]: the decision order tying them together.

pub(crate) mod ban;
pub(crate) mod blocked;
pub(crate) mod cidr;
pub(crate) mod defense;
pub mod dynamic;
pub mod engine;
pub(crate) mod entry;
pub(crate) mod h2_budget;
pub(crate) mod key;
pub(crate) mod lease;
pub(crate) mod offenders;
pub(crate) mod penalty;
pub mod policy;
pub(crate) mod prefix_boxes;
pub(crate) mod reason;
pub(crate) mod rescale;
pub(crate) mod shadow;
pub(crate) mod table;

pub use ban::{BanNote, BanOrigin, BanSink};
pub use blocked::{BlockedEntry, BlockedIps, BlockedView, Listed, Lists};
pub use cidr::{parse_cidr, CidrSet};
pub use defense::DefenseChange;
pub use dynamic::{DynamicBlocks, DynamicRule};
pub use engine::explain::{Explanation, PrefixExplanation};
pub use engine::{
    Admission, BoxListener, ConnGuard, Engine, HelloFacts, KnownGoodListener, LeaseRequest,
    PendingGuard, RequestLimited, RequestScope, Verdict, PREFIX_NOTE,
};
pub use key::IpKey;
pub use lease::{LeaseUpdate, LEASE_TTL_NS};
pub use policy::{
    ClusterRateLimit, Defense, DefenseMode, Escalation, ListenerLimit, Mode, PrefixLimit,
    ProtectionPolicy, RateLimit, RequestLimit, ShadowPolicy, SlowHandshake, XdpKernel, XdpSyn,
};
pub use reason::BlockReason;

/// The reasons a `protection.shadow` refusal can carry, in the shadow's check order
/// (`shadowByReason`, `rampart_shadow_refusals_total`).
pub const SHADOW_REASONS: [BlockReason; 6] = [
    BlockReason::CidrBlocked,
    BlockReason::RateLimited,
    BlockReason::TooManyConnections,
    BlockReason::PrefixRateLimited,
    BlockReason::PrefixTooManyConnections,
    BlockReason::ListenerOverloaded,
];
