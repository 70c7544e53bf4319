//! `'ban'` events of a proxy: the engines' ban sinks, operator and cluster blocks and kernel
//! writes feed [`Shared::bans`]; the background tick folds them ([`BanTracker`]) and emits.

use crate::clock;
use crate::events::ban::{BanChange, BanLayer, BanQueue, BanTracker};
use crate::protection::{BanOrigin, BlockReason, Engine};
use crate::shared::Shared;
use crate::xdp::XdpManager;
use ipnet::IpNet;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// Makes `engine` (of listener `port`) report every box change into `queue`.
pub(super) fn listen(queue: &Arc<BanQueue>, engine: &Engine, port: u16) {
    let q = queue.clone();
    engine.set_ban_sink(Some(Arc::new(move |n| {
        q.push(BanChange::from_note(port, n))
    })));
}

/// A `blockIp` entry was added (`lifted` false) or removed (`unblockIp`, `lifted` true) by
/// `origin`.
pub(super) fn block_changed(
    shared: &Shared,
    net: IpNet,
    port: Option<u16>,
    ttl_ms: Option<u64>,
    note: Option<&str>,
    origin: BanOrigin,
    lifted: bool,
) {
    let now = clock::now_ns();
    shared.bans.push(BanChange {
        port,
        net,
        layer: BanLayer::Block,
        deadline_ns: ttl_ms.map(|t| now.saturating_add(clock::ms_to_ns(t))),
        level: 0,
        started: !lifted,
        lifted,
        reason: BlockReason::DynamicBlocked.as_str(),
        origin,
        note: note.map(Arc::from),
    });
}

/// A penalty box was written to the kernel's ban map (`net` on listener `port` until
/// `deadline_ns`).
pub(super) fn kernel_written(shared: &Shared, net: IpNet, port: u16, deadline_ns: u64) {
    shared.bans.push(kernel_change(net, port, deadline_ns));
}

fn kernel_change(net: IpNet, port: u16, deadline_ns: u64) -> BanChange {
    BanChange {
        port: Some(port),
        net,
        layer: BanLayer::Kernel,
        deadline_ns: Some(deadline_ns),
        level: 0,
        started: true,
        lifted: false,
        reason: BlockReason::PenaltyBoxed.as_str(),
        origin: BanOrigin::Kernel,
        note: None,
    }
}

/// The kernel may extend a ban past the deadline it was written with (a banned source keeps
/// sending SYNs over its rate): for each kernel ban whose remembered deadline passed, reads the
/// ban map once and queues an extension (reason `penalty_boxed`, origin `kernel`) for those still
/// there with a later deadline; the others expire at this tick.
pub(super) fn kernel_extensions(shared: &Shared, mgr: &XdpManager, tracker: &BanTracker, now: u64) {
    let due = tracker.kernel_due(now);
    if due.is_empty() {
        return;
    }
    for b in mgr.bans() {
        let Ok(net) = IpNet::new(b.ip, b.prefix_len).map(|n| n.trunc()) else {
            continue;
        };
        if b.deadline_ns > now && due.contains(&(Some(b.port), net)) {
            shared.bans.push(BanChange {
                started: false,
                ..kernel_change(net, b.port, b.deadline_ns)
            });
        }
    }
}

/// Every background tick: folds the queued changes at `now` and emits the `'ban'` events (capped
/// per second by the hub).
pub(super) fn tick(shared: &Shared, tracker: &mut BanTracker, now: u64) {
    let changes = shared.bans.drain();
    if changes.is_empty() && tracker.is_empty() {
        return;
    }
    let records = tracker.tick(changes, now);
    if records.is_empty() {
        return;
    }
    let unix_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    for r in &records {
        let label = r.change.port.and_then(|p| {
            shared
                .listeners
                .iter()
                .find(|l| l.config.port == p)
                .map(|l| l.label.as_str())
        });
        shared.events.ban(&r.event(label, now, unix_ms), now);
    }
}
