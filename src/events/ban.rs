//! `'ban'` events: a ban's start, extension, escalation, expiry and lift, with its origin
//! (docs/integrating.md: Events; docs/protection.md: Ban events).
//!
//! Engines and operator calls push [`BanChange`]s into a bounded [`BanQueue`] (a non-blocking
//! `try_send`, no allocation for local boxes; a full queue counts the change in
//! [`BanQueue::overflow`]). The background tick drains it every 100 ms into a [`BanTracker`],
//! which coalesces the changes of one tick per ban (a client knocking 1,000 times while boxed
//! gives one `'extend'`, not 1,000), remembers up to [`MAX_TRACKED_BANS`] live bans to notice
//! their expiry, and returns the events to emit; [`super::EventHub::ban`] then caps them per
//! second like `'blocked'` (the excess counts in `eventsDropped`).

use crate::clock::NS_PER_MS;
use crate::protection::{BanNote, BanOrigin};
use ipnet::IpNet;
use serde::Serialize;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};

/// Live bans remembered for their expiry event; past it, a new ban still gets its start event
/// but no expiry (counted in [`BanTracker::untracked`]).
pub const MAX_TRACKED_BANS: usize = 10_000;
/// Changes queued between two ticks (100 ms) before they are counted as overflow.
pub const BAN_QUEUE_LEN: usize = 4_096;

/// Which table a ban lives in: an engine's penalty box, the kernel's ban map, the operator's
/// `blockIp` set. The same address may be in several at once; each has its own lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BanLayer {
    /// A penalty box (this node's, or one received from another node).
    Box,
    /// A ban written to the XDP ban map.
    Kernel,
    /// A `blockIp` entry.
    Block,
}

/// One change of a ban, as queued.
#[derive(Debug, Clone)]
pub struct BanChange {
    /// Listener port (`None`: every listener, a `blockIp` without `port`).
    pub port: Option<u16>,
    /// The address (a /32 or /128) or prefix.
    pub net: IpNet,
    /// The table it lives in.
    pub layer: BanLayer,
    /// Deadline, CLOCK_MONOTONIC ns (`None`: until lifted, a `blockIp` without `ttlMs`).
    pub deadline_ns: Option<u64>,
    /// Escalation level.
    pub level: u8,
    /// The ban is new (was not in force before this change).
    pub started: bool,
    /// Lifted before its deadline (`unblockIp`).
    pub lifted: bool,
    /// Reason label.
    pub reason: &'static str,
    /// Who put it there.
    pub origin: BanOrigin,
    /// The operator's note (`blockIp`'s `reason`), if any.
    pub note: Option<Arc<str>>,
}

impl BanChange {
    /// The change an engine of listener `port` reported.
    pub fn from_note(port: u16, n: &BanNote) -> BanChange {
        BanChange {
            port: Some(port),
            net: n.key.to_ipnet(),
            layer: BanLayer::Box,
            deadline_ns: Some(n.deadline_ns),
            level: n.level,
            started: n.started,
            lifted: false,
            reason: n.reason,
            origin: n.origin.clone(),
            note: None,
        }
    }
}

/// The bounded queue from the engines (and operator calls) to the background tick.
pub struct BanQueue {
    tx: SyncSender<BanChange>,
    rx: Mutex<Receiver<BanChange>>,
    /// Changes lost to a full queue since start.
    pub overflow: AtomicU64,
}

impl Default for BanQueue {
    fn default() -> Self {
        let (tx, rx) = sync_channel(BAN_QUEUE_LEN);
        BanQueue {
            tx,
            rx: Mutex::new(rx),
            overflow: AtomicU64::new(0),
        }
    }
}

impl BanQueue {
    /// Queues `c` without blocking; a full queue counts it in `overflow`.
    pub fn push(&self, c: BanChange) {
        if let Err(TrySendError::Full(_)) = self.tx.try_send(c) {
            self.overflow.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Takes every queued change.
    pub fn drain(&self) -> Vec<BanChange> {
        match self.rx.lock() {
            Ok(rx) => rx.try_iter().collect(),
            Err(_) => Vec::new(),
        }
    }
}

/// `action` of a `'ban'` event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BanAction {
    /// A new ban at escalation level 0.
    Start,
    /// A running ban's deadline moved forward.
    Extend,
    /// A new ban at a level above 0 (the previous one ended within the escalation memory), or a
    /// running one whose level rose.
    Escalate,
    /// The deadline passed.
    Expire,
    /// Removed before its deadline (`unblockIp`).
    Lift,
}

/// A `'ban'` event before formatting: the change and what it means.
#[derive(Debug, Clone)]
pub struct BanRecord {
    /// What happened.
    pub action: BanAction,
    /// The ban.
    pub change: BanChange,
}

#[derive(Debug)]
struct Live {
    deadline_ns: Option<u64>,
    level: u8,
    change: BanChange,
}

type BanId = (Option<u16>, IpNet, BanLayer);

/// The live bans seen so far and what each change means (owned by the background task; time
/// injected).
#[derive(Default)]
pub struct BanTracker {
    live: HashMap<BanId, Live>,
    /// Bans not remembered because [`MAX_TRACKED_BANS`] were live (no expiry event).
    pub untracked: u64,
}

impl BanTracker {
    /// Bans remembered now.
    pub fn len(&self) -> usize {
        self.live.len()
    }

    /// Whether no ban is remembered.
    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    /// The kernel-layer bans whose remembered deadline has passed at `now_ns`, as `(port, net)`:
    /// the kernel may have extended them on its own (continued SYN excess); the caller reads
    /// the ban map and queues an extension for those still there, before [`BanTracker::tick`].
    pub fn kernel_due(&self, now_ns: u64) -> Vec<(Option<u16>, IpNet)> {
        self.live
            .iter()
            .filter(|(id, l)| {
                id.2 == BanLayer::Kernel && l.deadline_ns.is_some_and(|d| d <= now_ns)
            })
            .map(|(id, _)| (id.0, id.1))
            .collect()
    }

    /// Folds one tick's `changes` (in arrival order) at `now_ns` and returns the events: per
    /// ban at most one start/extend/escalate (an expiry of its previous ban first when a new
    /// one started after it), then the expiry of every remembered ban whose deadline passed.
    pub fn tick(&mut self, changes: Vec<BanChange>, now_ns: u64) -> Vec<BanRecord> {
        let mut order: Vec<BanId> = Vec::new();
        let mut merged: HashMap<BanId, BanChange> = HashMap::new();
        for c in changes {
            let id = (c.port, c.net, c.layer);
            match merged.get_mut(&id) {
                None => {
                    order.push(id);
                    merged.insert(id, c);
                }
                Some(m) if c.lifted || m.lifted => *m = c,
                Some(m) => {
                    m.deadline_ns = match (m.deadline_ns, c.deadline_ns) {
                        (Some(a), Some(b)) => Some(a.max(b)),
                        _ => None,
                    };
                    m.level = m.level.max(c.level);
                    m.started |= c.started;
                    if c.note.is_some() {
                        m.note = c.note;
                    }
                }
            }
        }
        let mut out = Vec::new();
        for id in order {
            let Some(c) = merged.remove(&id) else {
                continue;
            };
            self.fold(id, c, now_ns, &mut out);
        }
        let gone: Vec<BanId> = self
            .live
            .iter()
            .filter(|(_, l)| l.deadline_ns.is_some_and(|d| d <= now_ns))
            .map(|(id, _)| *id)
            .collect();
        for id in gone {
            if let Some(l) = self.live.remove(&id) {
                out.push(BanRecord {
                    action: BanAction::Expire,
                    change: l.change,
                });
            }
        }
        out
    }

    fn fold(&mut self, id: BanId, c: BanChange, now_ns: u64, out: &mut Vec<BanRecord>) {
        if c.lifted {
            // Without a port, every listener's entry of that network goes too.
            let ids: Vec<BanId> = if id.0.is_none() {
                self.live
                    .keys()
                    .filter(|k| k.1 == id.1 && k.2 == id.2)
                    .copied()
                    .collect()
            } else {
                vec![id]
            };
            for id in ids {
                if let Some(l) = self.live.remove(&id) {
                    out.push(BanRecord {
                        action: BanAction::Lift,
                        change: BanChange {
                            origin: c.origin.clone(),
                            ..l.change
                        },
                    });
                }
            }
            return;
        }
        let action = match self.live.get(&id) {
            Some(l) if l.deadline_ns.is_some_and(|d| d <= now_ns) && c.started => {
                if let Some(old) = self.live.remove(&id) {
                    out.push(BanRecord {
                        action: BanAction::Expire,
                        change: old.change,
                    });
                }
                fresh(&c)
            }
            Some(l) if c.level > l.level => BanAction::Escalate,
            Some(l) if later(c.deadline_ns, l.deadline_ns) || c.started => BanAction::Extend,
            Some(_) => return,
            None if c.started => fresh(&c),
            None => BanAction::Extend,
        };
        let live = Live {
            deadline_ns: c.deadline_ns,
            level: c.level,
            change: c.clone(),
        };
        if let Some(l) = self.live.get_mut(&id) {
            *l = live;
        } else if self.live.len() < MAX_TRACKED_BANS {
            self.live.insert(id, live);
        } else {
            self.untracked += 1;
        }
        out.push(BanRecord { action, change: c });
    }
}

fn fresh(c: &BanChange) -> BanAction {
    if c.level > 0 {
        BanAction::Escalate
    } else {
        BanAction::Start
    }
}

/// Whether deadline `a` is later than `b` (`None` = never ends).
fn later(a: Option<u64>, b: Option<u64>) -> bool {
    match (a, b) {
        (None, Some(_)) => true,
        (Some(a), Some(b)) => a > b,
        _ => false,
    }
}

/// Payload of `'ban'` (docs/integrating.md: Events; docs/protection.md: Ban events).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BanEvent<'a> {
    /// `start`, `extend`, `escalate`, `expire` or `lift`.
    pub action: BanAction,
    /// `local`, `kernel`, `cluster` or `operator`.
    pub origin: &'static str,
    /// The `nodeId` of the node a cluster ban came from (`null` otherwise or when unknown).
    pub node: Option<&'a str>,
    /// The address (`203.0.113.7`, an IPv6 client as its `/64`-style prefix when the policy
    /// keys IPv6 by prefix) or prefix in CIDR form when it is wider than one address.
    pub ip: String,
    /// Listener port (`null`: every listener).
    pub port: Option<u16>,
    /// Listener `host:port` (`null`: every listener).
    pub listener: Option<&'a str>,
    /// The refusal that earned the ban (`rate_limited`, `prefix_rate_limited`, `h2_flood`,
    /// `penalty_boxed` for a box of another node or of the kernel, `dynamic_blocked`).
    pub reason: &'static str,
    /// The operator's note (`blockIp`'s `reason`), else `null`.
    pub note: Option<&'a str>,
    /// Escalation level (0 without `penaltyBox.escalation`).
    pub level: u8,
    /// Ms until the deadline when the event was made (0 for `expire`; `null` for a block
    /// without TTL).
    pub remaining_ms: Option<u64>,
    /// The deadline as Unix ms (`Date.now()` scale; `null` for a block without TTL).
    pub expires_at: Option<u64>,
}

impl BanRecord {
    /// The payload at `now_ns` (CLOCK_MONOTONIC) and `unix_ms` (wall clock, the same instant);
    /// `listener` is the label of the record's port.
    pub fn event<'a>(
        &'a self,
        listener: Option<&'a str>,
        now_ns: u64,
        unix_ms: u64,
    ) -> BanEvent<'a> {
        let c = &self.change;
        let remaining_ms = c
            .deadline_ns
            .map(|d| d.saturating_sub(now_ns).div_ceil(NS_PER_MS));
        let ip = if c.net.prefix_len() == c.net.max_prefix_len() {
            c.net.addr().to_string()
        } else {
            c.net.to_string()
        };
        BanEvent {
            action: self.action,
            origin: c.origin.as_str(),
            node: match &c.origin {
                BanOrigin::Cluster(n) => n.as_deref(),
                _ => None,
            },
            ip,
            port: c.port,
            listener,
            reason: c.reason,
            note: c.note.as_deref(),
            level: c.level,
            remaining_ms: if self.action == BanAction::Expire {
                Some(0)
            } else {
                remaining_ms
            },
            expires_at: remaining_ms.map(|r| unix_ms.saturating_add(r)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = NS_PER_MS;

    fn change(net: &str, deadline_ms: u64, level: u8, started: bool) -> BanChange {
        BanChange {
            port: Some(8443),
            net: net.parse().unwrap(),
            layer: BanLayer::Box,
            deadline_ns: Some(deadline_ms * MS),
            level,
            started,
            lifted: false,
            reason: "rate_limited",
            origin: BanOrigin::Local,
            note: None,
        }
    }

    fn actions(r: &[BanRecord]) -> Vec<(BanAction, String)> {
        r.iter()
            .map(|r| (r.action, r.change.net.to_string()))
            .collect()
    }

    #[test]
    fn start_extend_coalesce_and_expire() {
        let mut t = BanTracker::default();
        let got = t.tick(
            vec![
                change("10.0.0.1/32", 100, 0, true),
                change("10.0.0.1/32", 150, 0, false),
                change("10.0.0.1/32", 200, 0, false),
            ],
            10 * MS,
        );
        assert_eq!(actions(&got), [(BanAction::Start, "10.0.0.1/32".into())]);
        assert_eq!(got[0].change.deadline_ns, Some(200 * MS));
        let got = t.tick(vec![change("10.0.0.1/32", 300, 0, false)], 110 * MS);
        assert_eq!(actions(&got), [(BanAction::Extend, "10.0.0.1/32".into())]);
        // An older deadline is no change.
        assert!(t
            .tick(vec![change("10.0.0.1/32", 250, 0, false)], 120 * MS)
            .is_empty());
        assert!(t.tick(vec![], 299 * MS).is_empty());
        let got = t.tick(vec![], 300 * MS);
        assert_eq!(actions(&got), [(BanAction::Expire, "10.0.0.1/32".into())]);
        assert!(t.is_empty());
    }

    #[test]
    fn a_new_box_after_an_unnoticed_expiry_expires_the_old_one_first_and_escalates() {
        let mut t = BanTracker::default();
        t.tick(vec![change("10.0.0.2/32", 100, 0, true)], 0);
        let got = t.tick(vec![change("10.0.0.2/32", 400, 1, true)], 150 * MS);
        assert_eq!(
            actions(&got),
            [
                (BanAction::Expire, "10.0.0.2/32".into()),
                (BanAction::Escalate, "10.0.0.2/32".into())
            ]
        );
        let ev = got[1].event(Some("0.0.0.0:8443"), 150 * MS, 1_000_000);
        assert_eq!(ev.level, 1);
        assert_eq!(ev.remaining_ms, Some(250));
        assert_eq!(ev.expires_at, Some(1_000_250));
        assert_eq!(ev.ip, "10.0.0.2");
    }

    #[test]
    fn layers_and_origins_are_separate_bans_and_a_lift_ends_one() {
        let mut t = BanTracker::default();
        let mut kernel = change("10.0.0.3/32", 100, 0, true);
        kernel.layer = BanLayer::Kernel;
        kernel.origin = BanOrigin::Kernel;
        let block = BanChange {
            port: None,
            net: "10.9.0.0/16".parse().unwrap(),
            layer: BanLayer::Block,
            deadline_ns: None,
            level: 0,
            started: true,
            lifted: false,
            reason: "dynamic_blocked",
            origin: BanOrigin::Operator,
            note: Some("abuse".into()),
        };
        let mut cluster = change("10.0.0.4/32", 100, 0, true);
        cluster.origin = BanOrigin::Cluster(Some("node-b".into()));
        cluster.reason = "penalty_boxed";
        let got = t.tick(
            vec![
                change("10.0.0.3/32", 100, 0, true),
                kernel,
                block.clone(),
                cluster,
            ],
            0,
        );
        assert_eq!(got.len(), 4);
        let ev = got[2].event(None, 0, 5);
        assert_eq!(
            serde_json::to_string(&ev).unwrap(),
            r#"{"action":"start","origin":"operator","node":null,"ip":"10.9.0.0/16","port":null,"listener":null,"reason":"dynamic_blocked","note":"abuse","level":0,"remainingMs":null,"expiresAt":null}"#
        );
        assert_eq!(got[3].event(None, 0, 5).node, Some("node-b"));
        let lift = BanChange {
            lifted: true,
            started: false,
            ..block
        };
        let got = t.tick(vec![lift], MS);
        assert_eq!(actions(&got), [(BanAction::Lift, "10.9.0.0/16".into())]);
        let got = t.tick(vec![], 100 * MS);
        assert_eq!(got.len(), 3);
        assert!(got.iter().all(|r| r.action == BanAction::Expire));
    }

    #[test]
    fn kernel_bans_due_are_listed_for_a_recheck() {
        let mut t = BanTracker::default();
        let mut kernel = change("10.0.0.5/32", 100, 0, true);
        kernel.layer = BanLayer::Kernel;
        kernel.origin = BanOrigin::Kernel;
        t.tick(vec![change("10.0.0.5/32", 100, 0, true), kernel.clone()], 0);
        assert!(t.kernel_due(99 * MS).is_empty());
        let due = t.kernel_due(100 * MS);
        assert_eq!(due, [(Some(8443), "10.0.0.5/32".parse().unwrap())]);
        // Still in the ban map with a later deadline: an extension instead of an expiry.
        let ext = BanChange {
            deadline_ns: Some(900 * MS),
            started: false,
            ..kernel
        };
        let got = t.tick(vec![ext], 100 * MS);
        let got: Vec<_> = got.iter().map(|r| (r.action, r.change.layer)).collect();
        assert_eq!(
            got,
            [
                (BanAction::Extend, BanLayer::Kernel),
                (BanAction::Expire, BanLayer::Box)
            ]
        );
    }

    #[test]
    fn memory_is_bounded() {
        let mut t = BanTracker::default();
        let many: Vec<BanChange> = (0..MAX_TRACKED_BANS as u32 + 5)
            .map(|i| {
                let ip = std::net::Ipv4Addr::from(0x0a00_0000 + i);
                change(&format!("{ip}/32"), 100, 0, true)
            })
            .collect();
        let got = t.tick(many, 0);
        assert_eq!(got.len(), MAX_TRACKED_BANS + 5);
        assert_eq!(t.len(), MAX_TRACKED_BANS);
        assert_eq!(t.untracked, 5);
    }

    #[test]
    fn a_full_queue_counts_overflow() {
        let q = BanQueue::default();
        for _ in 0..BAN_QUEUE_LEN + 3 {
            q.push(change("10.0.0.1/32", 1, 0, true));
        }
        assert_eq!(q.overflow.load(Ordering::Relaxed), 3);
        assert_eq!(q.drain().len(), BAN_QUEUE_LEN);
    }
}
