//! What the engine tells its ban sink when a penalty box starts or its deadline moves forward
//! (`'ban'` events, docs/integrating.md: Events): one [`BanNote`] per change, after the entry's
//! lock.

use super::IpKey;
use std::sync::Arc;

/// Who put a ban in place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BanOrigin {
    /// This node's engine (a rate-limit or HTTP/2 box, a prefix box).
    Local,
    /// The kernel: a SYN-limit ban or a box the XDP program extended.
    Kernel,
    /// Another node of the cluster tier, with its `nodeId` when the message named it.
    Cluster(Option<Arc<str>>),
    /// `blockIp`, `updateConfig` lists or the admin API.
    Operator,
}

impl BanOrigin {
    /// The `origin` label of a `'ban'` event.
    pub fn as_str(&self) -> &'static str {
        match self {
            BanOrigin::Local => "local",
            BanOrigin::Kernel => "kernel",
            BanOrigin::Cluster(_) => "cluster",
            BanOrigin::Operator => "operator",
        }
    }
}

/// One change of a box: it started (`started`) or its deadline moved to `deadline_ns`.
#[derive(Debug, Clone)]
pub struct BanNote {
    /// The client's key, or the prefix's (`prefix`).
    pub key: IpKey,
    /// The key is a network prefix (the prefix tier, a prefix box of another node).
    pub prefix: bool,
    /// The box's deadline, CLOCK_MONOTONIC ns.
    pub deadline_ns: u64,
    /// The escalation level of the box (`penaltyBox.escalation`; 0 without).
    pub level: u8,
    /// A new box (the client was not boxed before); false when a running box was extended.
    pub started: bool,
    /// The refusal that earned the box (`rate_limited`, `prefix_rate_limited`, `h2_flood`,
    /// `penalty_boxed` for a box received from another node).
    pub reason: &'static str,
    /// Where the box came from.
    pub origin: BanOrigin,
}

/// Receives every [`BanNote`] of an engine. Runs on the admission path: keep it cheap (push to
/// a bounded channel).
pub type BanSink = dyn Fn(&BanNote) + Send + Sync;
