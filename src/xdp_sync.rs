//! Keeps the XDP maps in step with the userspace engine (DESIGN.md §2 "XDP").
//!
//! - Port policy and CIDR lists: built from every listener's live policy ([`build_policy`]),
//!   staged into the idle map set while `updateConfig` validates, committed (one index write) at
//!   the swap, so the kernel flips all-or-nothing together with userspace. A listener in
//!   `mode: 'observe'` is given to the kernel as unprotected: observe never drops.
//! - `blockIp` entries: written as dynamic blocks with the same deadline.
//! - Penalty-boxed IPs: each engine reports boxes and extensions through its box listener into a
//!   bounded channel (never blocks admission; overflow is counted) which the background tick
//!   drains into kernel bans. On attach every IP already boxed and every dynamic block is synced.

use crate::clock;
use crate::protection::{Engine, ProtectionPolicy};
use crate::xdp::{BanReason, XdpDynamicBlock, XdpPolicy, XdpPortPolicy};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};

/// Capacity of the box → kernel-ban queue (entries between two background ticks).
pub const BAN_QUEUE: usize = 65_536;

/// The kernel-side policy for the given listener policies (`(port, policy)` in listener order).
pub fn build_policy(listeners: &[(u16, Option<Arc<ProtectionPolicy>>)]) -> XdpPolicy {
    let mut ports = Vec::new();
    let mut listener_ports = Vec::new();
    let mut v6 = None;
    for (port, p) in listeners {
        match p {
            Some(p) if p.mode() == crate::protection::Mode::Enforce => {
                v6.get_or_insert(p.ipv6_prefix_length());
                let xdp = p.xdp();
                ports.push(XdpPortPolicy {
                    port: *port,
                    syn_per_second: xdp.map(|x| x.syn_per_second.min(u32::MAX as u64) as u32),
                    syn_burst: xdp
                        .map(|x| x.syn_burst.min(u32::MAX as u64) as u32)
                        .unwrap_or(0),
                    penalty_ns: p.xdp_ban_ms().saturating_mul(1_000_000),
                    allow: p.allowlist_nets(),
                    block: p.blocklist_nets(),
                });
            }
            _ => listener_ports.push(*port),
        }
    }
    XdpPolicy {
        ports,
        listener_ports,
        ipv6_prefix_len: v6.unwrap_or(64),
    }
}

/// Queue of boxes to mirror as kernel bans.
pub struct BanQueue {
    tx: SyncSender<(IpAddr, u64)>,
    rx: Mutex<Receiver<(IpAddr, u64)>>,
    /// Boxes not queued because the queue was full.
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
    /// Registers a box listener on `engine` feeding this queue (non-blocking).
    pub fn listen(self: &Arc<Self>, engine: &Engine) {
        let q = self.clone();
        engine.set_box_listener(Some(Arc::new(move |key, deadline_ns| {
            if let Err(TrySendError::Full(_)) = q.tx.try_send((key.addr(), deadline_ns)) {
                q.overflow.fetch_add(1, Ordering::Relaxed);
            }
        })));
    }

    /// Takes every queued box.
    pub fn drain(&self) -> Vec<(IpAddr, u64)> {
        match self.rx.lock() {
            Ok(rx) => rx.try_iter().collect(),
            Err(_) => Vec::new(),
        }
    }
}

/// Writes penalty boxes as kernel bans.
pub fn push_bans(mgr: &crate::xdp::XdpManager, bans: &[(IpAddr, u64)]) {
    let now = clock::now_ns();
    for (ip, deadline) in bans {
        if *deadline > now {
            let _ = mgr.ban(*ip, *deadline, BanReason::Penalty);
        }
    }
}

/// A dynamic block as the kernel stores it.
pub fn dynamic_block(
    net: ipnet::IpNet,
    port: Option<u16>,
    deadline_ns: Option<u64>,
) -> XdpDynamicBlock {
    XdpDynamicBlock {
        net,
        port,
        deadline_ns,
    }
}

/// `XdpStatus` as the JS API shapes it (DESIGN.md §2).
pub fn status_json(st: &crate::xdp::XdpStatus) -> serde_json::Value {
    serde_json::json!({
        "attached": st.attached,
        "interface": st.interface,
        "mode": st.mode,
        "counters": {
            "passed": st.counters.passed,
            "dropped": {
                "cidr": st.counters.dropped_cidr,
                "dynamic": st.counters.dropped_dynamic,
                "penalty": st.counters.dropped_penalty,
                "synFlood": st.counters.dropped_syn_flood,
                "unparsed": st.counters.dropped_unparsed,
            }
        },
        "bannedIps": st.banned_ips,
    })
}
