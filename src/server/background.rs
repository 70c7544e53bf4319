//! What runs beside the JS operations of [`super::Proxy`]: the cluster tier's view of the proxy
//! ([`ClusterPeer`]) and the work of the every-100-ms background tick — capacity windows and
//! `'overload'` events, penalty boxes and kernel SYN bans to and from the XDP maps, known-good
//! marks, the dynamic-block trie.

use crate::clock;
use crate::config::proxy::ListenerId;
use crate::events::OverloadEvent;
use crate::protection::BanOrigin;
use crate::shared::Shared;
use crate::xdp::sync::{BoxedClient, KnownGoodClient};
use crate::xdp::{BanReason, XdpManager};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The cluster tier's view of this proxy: received bans go to the engines (and from them to
/// XDP: boxes through the box listener's ban queue, blocks through the `DynamicBlocks` sync).
pub(super) struct ClusterPeer(pub(super) Arc<Shared>);

impl crate::cluster::Node for ClusterPeer {
    fn serves(&self, port: u16) -> bool {
        self.0.listeners_on(port).next().is_some()
    }

    fn apply_box(
        &self,
        ip: std::net::IpAddr,
        port: Option<u16>,
        remaining_ns: u64,
        now_ns: u64,
        node: &Arc<str>,
    ) {
        for l in self.0.listeners_for(port) {
            let origin = BanOrigin::Cluster(Some(node.clone()));
            l.engine.box_client_from(ip, remaining_ns, now_ns, origin);
        }
    }

    fn apply_prefix_box(
        &self,
        net: ipnet::IpNet,
        port: Option<u16>,
        remaining_ns: u64,
        now_ns: u64,
        node: &Arc<str>,
    ) {
        for l in self.0.listeners_for(port) {
            let origin = BanOrigin::Cluster(Some(node.clone()));
            l.engine.box_prefix_from(net, remaining_ns, now_ns, origin);
        }
    }

    fn apply_block(
        &self,
        net: ipnet::IpNet,
        port: Option<u16>,
        ttl_ms: Option<u64>,
        note: Option<String>,
        now_ns: u64,
    ) {
        let origin = BanOrigin::Cluster(None);
        super::bans::block_changed(&self.0, net, port, ttl_ms, note.as_deref(), origin, false);
        self.0.dynamic.block(net, ttl_ms, note, port, now_ns);
    }

    fn apply_unblock(&self, net: ipnet::IpNet, port: Option<u16>) {
        self.0.dynamic.unblock(net, port);
    }

    fn unavailable(&self, message: String) {
        self.0.report_cluster_unavailable(message);
    }

    fn rejected(&self, message: String) {
        self.0.report_cluster_rejected(message);
    }

    fn apply_blocks(&self, blocks: Vec<crate::config::update::BlockRequest>, now_ns: u64) {
        self.0.dynamic.block_many(blocks, now_ns);
    }

    fn update_lease(
        &self,
        listener: ListenerId,
        key: crate::protection::IpKey,
        u: crate::protection::LeaseUpdate,
    ) -> u64 {
        self.0
            .listeners
            .get(listener.0)
            .map_or(0, |l| l.engine.update_lease(key, u))
    }

    fn lease_clients(&self) -> u64 {
        self.0
            .listeners
            .iter()
            .map(|l| l.engine.lease_clients() as u64)
            .sum()
    }
}

/// `note` of a kernel SYN-limit ban in `blockedIps({ detail: true })`.
pub const KERNEL_SYN_BAN_NOTE: &str = "banned in the kernel by xdp.synPerSecond";

/// `note` of a penalty box the kernel extended past its userspace deadline (the client kept
/// sending SYNs over its rate while banned) in `blockedIps({ detail: true })`.
pub const KERNEL_EXTENDED_NOTE: &str = "ban extended in the kernel by continued SYN excess";

/// Every ~100 ms: closes each live route's latency window if no request did, and emits
/// `'overload'` on each on/off transition. Returns whether a route is overloaded (defense mode
/// follows it on every listener: routes are shared by all listeners).
pub(super) fn tick_capacities(shared: &Shared, now: u64) -> bool {
    let mut any = false;
    for r in shared.routes.load().routes() {
        any |= r.capacity.refuses_new(now);
        if let Some(c) = r.capacity.tick(now) {
            shared.events.overload(&OverloadEvent {
                route: &r.metrics.route,
                on: c.on,
                in_flight: c.in_flight,
                limit: (c.limit != u32::MAX).then_some(c.limit),
                latency_ms: c.latency_ms,
                baseline_ms: c.baseline_ms,
            });
        }
    }
    any
}

/// Samples the CPU use of every upstream with `pid` / `tid` of the live routes
/// ([`crate::proxy::cpu`]) when `*next` (CLOCK_MONOTONIC ns) has come, then sets the next time
/// [`crate::proxy::cpu::SAMPLE_PERIOD_MS`] later. Runs on the 100 ms tick, never on a connection.
pub(super) fn sample_cpu(shared: &Shared, now: u64, next: &mut u64) {
    if now < *next {
        return;
    }
    *next = now + crate::proxy::cpu::SAMPLE_PERIOD_MS * crate::clock::NS_PER_MS;
    for r in shared.routes.load().routes() {
        if r.cpu_sampled() {
            r.sample_cpu(now);
        }
    }
}

/// Writes penalty boxes as kernel bans (a boxed prefix into the prefix-ban trie); each failure
/// is counted and reported.
pub(super) fn push_bans(shared: &Shared, mgr: &XdpManager, bans: &[BoxedClient]) {
    let now = clock::now_ns();
    for b in bans.iter().filter(|b| b.deadline_ns > now) {
        let written = if b.prefix {
            mgr.ban_prefix(b.net, b.port, b.deadline_ns, BanReason::Penalty)
        } else {
            mgr.ban(b.ip, b.port, b.deadline_ns, BanReason::Penalty)
        };
        match written {
            Ok(()) => {
                super::bans::kernel_written(shared, b.net, b.port, b.deadline_ns);
                if let Some(c) = &shared.cluster {
                    c.kernel_written(b.net, b.port, b.deadline_ns);
                }
            }
            Err(e) => shared.report_xdp_failure(&format!("kernel ban of {}", b.net), &e),
        }
    }
}

/// With `shareBans`: publishes the bans the kernel made on its own (`xdp.synPerSecond`) and the
/// ones it extended, read back from the ban maps only when the kernel's `banned` or
/// `banExtended` counter moved ([`crate::cluster::kernel`]).
pub(super) fn share_kernel_bans(shared: &Shared, mgr: &XdpManager, now: u64) {
    let Some(c) = shared.cluster.as_ref().filter(|c| c.shares_bans()) else {
        return;
    };
    let banned = mgr.counter(crate::xdp::abi::counter::BANNED);
    let extended = mgr.counter(crate::xdp::abi::counter::BAN_EXTENDED);
    c.kernel_scan(banned, extended, now, || {
        mgr.bans()
            .into_iter()
            .filter(|b| b.reason != BanReason::Dynamic)
            .filter_map(|b| {
                Some(crate::cluster::kernel::KernelBan {
                    net: ipnet::IpNet::new(b.ip, b.prefix_len).ok()?.trunc(),
                    port: b.port,
                    deadline_ns: b.deadline_ns,
                    syn: b.reason == BanReason::SynFlood,
                    prefix: b.prefix,
                })
            })
            .collect()
    });
}

/// Mirrors known-good marks into the kernel's known-good map; each failure is counted and
/// reported.
pub(super) fn push_known_good(shared: &Shared, mgr: &XdpManager, marks: &[KnownGoodClient]) {
    let now = clock::now_ns();
    for k in marks.iter().filter(|k| k.deadline_ns > now) {
        match mgr.set_known_good(k.ip, k.port, k.deadline_ns) {
            Ok(()) => {
                shared
                    .xdp
                    .known_good_mirrored
                    .fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => shared.report_xdp_failure(&format!("known-good mark of {}", k.ip), &e),
        }
    }
}

/// Rewrites the kernel's dynamic-block trie from the engine's set when it changed since the
/// last write (or always, with `force`); a failure is counted and reported, and retried at the
/// next tick.
pub(super) fn sync_dynamic(shared: &Shared, mgr: &XdpManager, force: bool) {
    let generation = shared.dynamic.generation();
    let written = shared.xdp.dynamic_generation.load(Ordering::Acquire);
    if !force && generation == written {
        return;
    }
    let rules = shared.dynamic.rules(None, clock::now_ns());
    match mgr.sync_dynamic(&rules) {
        Ok(()) => shared
            .xdp
            .dynamic_generation
            .store(generation, Ordering::Release),
        Err(e) => {
            shared
                .xdp
                .dynamic_generation
                .store(generation.wrapping_sub(1), Ordering::Release);
            shared.report_xdp_failure("dynamic blocks", &e);
        }
    }
}
