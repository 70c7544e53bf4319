//! Keeping the kernel maps in step with the userspace engine.
//!
//! - Port policy and CIDR lists: [`build_policy`] maps every listener's live policy to the
//!   kernel's; `updateConfig` stages it into the idle map set while it validates and commits it
//!   (one index write) at the swap, so the kernel flips all-or-nothing together with userspace. A
//!   listener in `mode: 'observe'` is given to the kernel as unprotected: observe never drops.
//! - `blockIp` entries: the kernel's trie is derived from the engine's one set
//!   ([`crate::protection::DynamicBlocks`]) by [`super::XdpManager::sync_dynamic`] after each
//!   change, and again whenever expiry changed the set ([`XdpSlot::dynamic_generation`]).
//! - Penalty boxes: each engine reports boxes and extensions through its box listener into a
//!   bounded [`BanQueue`] (never blocks admission; overflow is counted) which the background tick
//!   drains into kernel bans, each under the port of the listener that boxed it: one source in
//!   the ban map, a boxed prefix of the prefix tier in the prefix-ban trie (keyed by the prefix).
//!   The kernel then measures the banned source's SYNs against the port's ban rate (the
//!   listener's `rateLimit`, or `xdp.synPerSecond`) and extends the ban while the excess goes on.
//! - Known-good clients: each engine reports marks through its known-good listener into a bounded
//!   [`KnownGoodQueue`], drained by the same tick into the kernel's known-good LRU map (per
//!   port), which `xdp.synBudgetPerSecond` exempts.
//! - Map sizes: [`map_sizes`], from the listeners' config at attach.
//!
//! Nothing is swallowed: a failed write is counted in [`XdpSlot::errors`] and reported by the
//! caller as an `'error'` event with code [`XDP_SYNC_FAILED`].

use super::manager::XdpManager;
use super::policy::{XdpPolicy, XdpPortPolicy};
use super::status::XdpMapSizes;
use crate::clock::ms_to_ns;
use crate::protection::{Engine, Mode, ProtectionPolicy};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, MutexGuard};

/// Capacity of the box → kernel-ban queue (entries between two background ticks).
pub(crate) const BAN_QUEUE: usize = 65_536;

/// `'error'` event code of a failed kernel-map write.
pub(crate) const XDP_SYNC_FAILED: &str = "xdp_sync_failed";

/// The kernel-side policy for the given listener policies (`(port, policy)` in listener order;
/// a port with several listeners appears once, with its first listener's policy). The set
/// header's IPv6 prefix (for packets whose port cannot be read) is the first protected port's.
pub(crate) fn build_policy(listeners: &[(u16, Option<Arc<ProtectionPolicy>>)]) -> XdpPolicy {
    let mut ports: Vec<XdpPortPolicy> = Vec::new();
    let mut listener_ports: Vec<u16> = Vec::new();
    let mut v6 = None;
    let mut drop_fragments = false;
    for (port, p) in listeners {
        if ports.iter().any(|x| x.port == *port) || listener_ports.contains(port) {
            continue;
        }
        match p {
            Some(p) if p.mode() == Mode::Enforce => {
                v6.get_or_insert(p.ipv6_prefix_length());
                let xdp = p.xdp();
                let kernel = p.xdp_kernel();
                drop_fragments |= kernel.drop_fragments;
                ports.push(XdpPortPolicy {
                    port: *port,
                    syn_per_second: xdp.map(|x| x.syn_per_second.min(u32::MAX as u64) as u32),
                    syn_burst: xdp
                        .map(|x| x.syn_burst.min(u32::MAX as u64) as u32)
                        .unwrap_or(0),
                    penalty_ns: ms_to_ns(p.xdp_ban_ms()),
                    allow: p.allowlist_nets(),
                    block: p.blocklist_nets(),
                    ipv6_prefix_len: p.ipv6_prefix_length(),
                    ban_rate: p.rate_limit().map(|r| r.gcra),
                    syn_budget_per_second: kernel
                        .syn_budget_per_second
                        .map(|b| b.min(u32::MAX as u64) as u32),
                });
            }
            // dropFragments applies to the attached program whatever the listener's mode.
            Some(p) => {
                drop_fragments |= p.xdp_kernel().drop_fragments;
                listener_ports.push(*port)
            }
            _ => listener_ports.push(*port),
        }
    }
    XdpPolicy {
        ports,
        listener_ports,
        ipv6_prefix_len: v6.unwrap_or(crate::protection::key::DEFAULT_IPV6_PREFIX),
        drop_fragments,
    }
}

/// The sizes of the kernel's sized maps for these listener policies: the largest `xdp.maxBans`
/// when any listener sets it, else the largest `maxTrackedIps` of the listeners with a policy
/// (observe mode included: switching it to enforce needs no re-attach); the object's defaults
/// when no listener has a policy. Clamped to [`XdpMapSizes::MIN`]..=[`XdpMapSizes::MAX`].
pub(crate) fn map_sizes(listeners: &[(u16, Option<Arc<ProtectionPolicy>>)]) -> XdpMapSizes {
    let policies = || listeners.iter().filter_map(|(_, p)| p.as_deref());
    let max_bans = policies().filter_map(|p| p.xdp_kernel().max_bans).max();
    let tracked = policies().map(|p| p.max_tracked_ips() as u64).max();
    match max_bans.or(tracked) {
        Some(n) => XdpMapSizes::uniform(n),
        None => XdpMapSizes::DEFAULT,
    }
}

/// One penalty box to mirror as a kernel ban.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BoxedClient {
    /// The client (IPv6: the network address of its prefix).
    pub ip: IpAddr,
    /// The port of the listener that boxed it.
    pub port: u16,
    /// CLOCK_MONOTONIC deadline, ns.
    pub deadline_ns: u64,
    /// A whole prefix of the prefix tier (`prefixLimit`) rather than one client: written to the
    /// prefix-ban trie with `net` as the key.
    pub prefix: bool,
    /// The boxed network: the client's key (`/32`, the IPv6 client prefix) or the prefix.
    pub net: ipnet::IpNet,
}

/// One known-good mark to mirror into the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KnownGoodClient {
    /// The client (IPv6: the network address of its prefix).
    pub ip: IpAddr,
    /// The port of the listener that marked it.
    pub port: u16,
    /// CLOCK_MONOTONIC deadline, ns.
    pub deadline_ns: u64,
}

/// Capacity of the known-good queue (marks between two background ticks).
pub(crate) const KNOWN_GOOD_QUEUE: usize = 65_536;

/// Bounded queue of known-good marks waiting to be written to the kernel.
pub(crate) struct KnownGoodQueue {
    tx: SyncSender<KnownGoodClient>,
    rx: Mutex<Receiver<KnownGoodClient>>,
    /// Marks not queued because the queue was full (`xdpStatus().knownGoodQueueOverflow`).
    pub overflow: AtomicU64,
}

impl Default for KnownGoodQueue {
    fn default() -> Self {
        let (tx, rx) = sync_channel(KNOWN_GOOD_QUEUE);
        KnownGoodQueue {
            tx,
            rx: Mutex::new(rx),
            overflow: AtomicU64::new(0),
        }
    }
}

impl KnownGoodQueue {
    /// Registers a known-good listener on `engine` feeding this queue (non-blocking).
    pub(crate) fn listen(self: &Arc<Self>, engine: &Engine) {
        let q = self.clone();
        let port = engine.port();
        engine.set_known_good_listener(Some(Arc::new(move |key, deadline_ns| {
            let k = KnownGoodClient {
                ip: key.addr(),
                port,
                deadline_ns,
            };
            if let Err(TrySendError::Full(_)) = q.tx.try_send(k) {
                q.overflow.fetch_add(1, Ordering::Relaxed);
            }
        })));
    }

    /// Takes every queued mark.
    pub(crate) fn drain(&self) -> Vec<KnownGoodClient> {
        match self.rx.lock() {
            Ok(rx) => rx.try_iter().collect(),
            Err(_) => Vec::new(),
        }
    }
}

/// Bounded queue of boxes waiting to become kernel bans.
pub(crate) struct BanQueue {
    tx: SyncSender<BoxedClient>,
    rx: Mutex<Receiver<BoxedClient>>,
    /// Boxes not queued because the queue was full (`metrics().xdp.banQueueOverflow`).
    pub overflow: AtomicU64,
}

impl Default for BanQueue {
    fn default() -> Self {
        let (tx, rx) = sync_channel(BAN_QUEUE);
        BanQueue {
            tx,
            rx: Mutex::new(rx),
            overflow: AtomicU64::new(0),
        }
    }
}

impl BanQueue {
    /// Registers a box listener on `engine` feeding this queue (non-blocking, no allocation).
    pub(crate) fn listen(self: &Arc<Self>, engine: &Engine) {
        let q = self.clone();
        let port = engine.port();
        engine.set_box_listener(Some(Arc::new(move |key, deadline_ns, prefix| {
            let b = BoxedClient {
                ip: key.addr(),
                port,
                deadline_ns,
                prefix,
                net: key.to_ipnet(),
            };
            if let Err(TrySendError::Full(_)) = q.tx.try_send(b) {
                q.overflow.fetch_add(1, Ordering::Relaxed);
            }
        })));
    }

    /// Takes every queued box.
    pub(crate) fn drain(&self) -> Vec<BoxedClient> {
        match self.rx.lock() {
            Ok(rx) => rx.try_iter().collect(),
            Err(_) => Vec::new(),
        }
    }
}

/// The XDP side of one proxy: the attached program (if any), its ban queue and its counters.
#[derive(Default)]
pub(crate) struct XdpSlot {
    mgr: Mutex<Option<XdpManager>>,
    /// Boxes waiting to become kernel bans.
    pub bans: Arc<BanQueue>,
    /// Known-good marks waiting to be mirrored.
    pub known_good: Arc<KnownGoodQueue>,
    /// Known-good marks written to the kernel since start (`xdpStatus().knownGoodMirrored`).
    pub known_good_mirrored: AtomicU64,
    /// Failed kernel-map writes (bans, dynamic blocks) since start (`metrics().xdp.errors`).
    pub errors: AtomicU64,
    /// The `DynamicBlocks` generation last written to the kernel.
    pub dynamic_generation: AtomicU64,
}

impl XdpSlot {
    /// The manager slot (`None` when not attached). Never held across an await.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Option<XdpManager>> {
        self.mgr.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gcra::Gcra;
    use crate::protection::{DynamicBlocks, RateLimit};

    fn policy(f: impl FnOnce(&mut ProtectionPolicy)) -> Option<Arc<ProtectionPolicy>> {
        let mut p = ProtectionPolicy::default();
        f(&mut p);
        Some(Arc::new(p))
    }

    #[test]
    fn map_sizes_follow_max_tracked_ips_or_max_bans() {
        let a = policy(|p| p.max_tracked_ips = 5000);
        let b = policy(|p| p.max_tracked_ips = 20_000);
        assert_eq!(
            map_sizes(&[(443, a.clone()), (8443, b.clone()), (80, None)]),
            XdpMapSizes::uniform(20_000)
        );
        let capped = policy(|p| p.xdp_kernel.max_bans = Some(3000));
        assert_eq!(
            map_sizes(&[(443, a), (8443, b), (9443, capped)]),
            XdpMapSizes::uniform(3000)
        );
        assert_eq!(map_sizes(&[(80, None)]), XdpMapSizes::DEFAULT);
        assert_eq!(
            map_sizes(&[(443, policy(|p| p.max_tracked_ips = 10))]).bans,
            XdpMapSizes::MIN
        );
    }

    #[test]
    fn the_rate_limit_budget_and_fragments_reach_the_port_policy() {
        let gcra = Gcra::new(500_000_000, 4);
        let enforce = policy(|p| {
            p.rate_limit = Some(RateLimit {
                rate: 2.0,
                burst: 4,
                gcra,
            });
            p.xdp_kernel.syn_budget_per_second = Some(200);
        });
        let observe = policy(|p| {
            p.mode = Mode::Observe;
            p.xdp_kernel.drop_fragments = true;
        });
        let x = build_policy(&[(443, enforce), (8443, observe)]);
        assert_eq!(x.ports.len(), 1);
        assert_eq!(x.ports[0].ban_rate, Some(gcra));
        assert_eq!(x.ports[0].syn_per_second, None);
        assert_eq!(x.ports[0].syn_budget_per_second, Some(200));
        assert_eq!(x.listener_ports, vec![8443]);
        assert!(
            x.drop_fragments,
            "dropFragments applies whatever the listener's mode"
        );
    }

    #[test]
    fn known_good_marks_reach_the_queue_about_twice_per_ttl() {
        let engine = Engine::new(443, Arc::new(DynamicBlocks::new()));
        // knownGoodTtlMs 10 s: refreshed when the mark enters a new 5 s window.
        engine.set_policy(policy(|p| p.known_good_ttl_ns = 10_000_000_000), 0);
        let q = Arc::new(KnownGoodQueue::default());
        q.listen(&engine);
        let ip: IpAddr = "192.0.2.7".parse().unwrap();
        let t0 = 100_000_000_000;
        assert!(engine.mark_known_good(ip, t0));
        // Mark until ceil(t0 + 10 s) = 110 s; the mirror lasts half a TTL longer.
        assert_eq!(
            q.drain(),
            vec![KnownGoodClient {
                ip,
                port: 443,
                deadline_ns: 115_000_000_000
            }]
        );
        // Within the same half-TTL window: nothing new.
        assert!(engine.mark_known_good(ip, t0 + 1_000_000_000));
        assert!(q.drain().is_empty());
        // 5 s later the mark enters the next window: refreshed.
        assert!(engine.mark_known_good(ip, t0 + 5_000_000_000));
        assert_eq!(
            q.drain().iter().map(|k| k.deadline_ns).collect::<Vec<_>>(),
            vec![120_000_000_000]
        );
    }
}
