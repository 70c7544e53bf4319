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
//!   drains into kernel bans, each under the port of the listener that boxed it.
//!
//! Nothing is swallowed: a failed write is counted in [`XdpSlot::errors`] and reported by the
//! caller as an `'error'` event with code [`XDP_SYNC_FAILED`].

use super::manager::XdpManager;
use super::policy::{XdpPolicy, XdpPortPolicy};
use crate::clock::ms_to_ns;
use crate::protection::{Engine, Mode, ProtectionPolicy};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, MutexGuard};

/// Capacity of the box → kernel-ban queue (entries between two background ticks).
pub const BAN_QUEUE: usize = 65_536;

/// `'error'` event code of a failed kernel-map write.
pub const XDP_SYNC_FAILED: &str = "xdp_sync_failed";

/// The kernel-side policy for the given listener policies (`(port, policy)` in listener order;
/// a port with several listeners appears once, with its first listener's policy). The set
/// header's IPv6 prefix (for packets whose port cannot be read) is the first protected port's.
pub fn build_policy(listeners: &[(u16, Option<Arc<ProtectionPolicy>>)]) -> XdpPolicy {
    let mut ports: Vec<XdpPortPolicy> = Vec::new();
    let mut listener_ports: Vec<u16> = Vec::new();
    let mut v6 = None;
    for (port, p) in listeners {
        if ports.iter().any(|x| x.port == *port) || listener_ports.contains(port) {
            continue;
        }
        match p {
            Some(p) if p.mode() == Mode::Enforce => {
                v6.get_or_insert(p.ipv6_prefix_length());
                let xdp = p.xdp();
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
                });
            }
            _ => listener_ports.push(*port),
        }
    }
    XdpPolicy {
        ports,
        listener_ports,
        ipv6_prefix_len: v6.unwrap_or(crate::protection::key::DEFAULT_IPV6_PREFIX),
    }
}

/// One penalty box to mirror as a kernel ban.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BoxedClient {
    /// The client (IPv6: the network address of its prefix).
    pub ip: IpAddr,
    /// The port of the listener that boxed it.
    pub port: u16,
    /// CLOCK_MONOTONIC deadline, ns.
    pub deadline_ns: u64,
    /// A whole prefix of the prefix tier (`prefixLimit`) rather than one client. The kernel's
    /// ban map is keyed by one source (an IPv4 address, an IPv6 client prefix), so such a box is
    /// not written there yet (a prefix-keyed ban trie is a follow-up): its clients are refused
    /// in userspace (`penalty_boxed`).
    pub prefix: bool,
}

/// Bounded queue of boxes waiting to become kernel bans.
pub struct BanQueue {
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
    pub fn listen(self: &Arc<Self>, engine: &Engine) {
        let q = self.clone();
        let port = engine.port();
        engine.set_box_listener(Some(Arc::new(move |key, deadline_ns, prefix| {
            let b = BoxedClient {
                ip: key.addr(),
                port,
                deadline_ns,
                prefix,
            };
            if let Err(TrySendError::Full(_)) = q.tx.try_send(b) {
                q.overflow.fetch_add(1, Ordering::Relaxed);
            }
        })));
    }

    /// Takes every queued box.
    pub fn drain(&self) -> Vec<BoxedClient> {
        match self.rx.lock() {
            Ok(rx) => rx.try_iter().collect(),
            Err(_) => Vec::new(),
        }
    }
}

/// The XDP side of one proxy: the attached program (if any), its ban queue and its counters.
#[derive(Default)]
pub struct XdpSlot {
    mgr: Mutex<Option<XdpManager>>,
    /// Boxes waiting to become kernel bans.
    pub bans: Arc<BanQueue>,
    /// Failed kernel-map writes (bans, dynamic blocks) since start (`metrics().xdp.errors`).
    pub errors: AtomicU64,
    /// The `DynamicBlocks` generation last written to the kernel.
    pub dynamic_generation: AtomicU64,
}

impl XdpSlot {
    /// The manager slot (`None` when not attached). Never held across an await.
    pub fn lock(&self) -> MutexGuard<'_, Option<XdpManager>> {
        self.mgr.lock().unwrap_or_else(|e| e.into_inner())
    }
}
