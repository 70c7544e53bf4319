//! The protection engine of one listener: every admission decision, in the documented order.
//!
//! At accept, before reading a byte ([`Engine::admit`]): allowlist (skips every check) →
//! `blocklist`, then dynamic blocks → penalty box → `rateLimit` and `sustained` (GCRA) →
//! `maxConcurrentPerIp`. After the ClientHello peek ([`Engine::check_hello`]): an incomplete
//! ClientHello while a fingerprint list is set → `requireSni` → `ja3Blocklist` → `ja4Blocklist`.
//! During the pre-TLS phase ([`Engine::pending_handshake`]): `slowHandshake.maxPendingPerIp`.
//!
//! Cost of an admission with a policy: one CIDR binary search per list, one relaxed load for the
//! dynamic blocks (plus O(prefix lengths) lookups when any exist), then one shard-lock hold during
//! which the table probe finds the entry (one cache line) and the whole decision — box, both GCRA
//! limits, concurrency count — is made and recorded on it. Dropping the guard takes the lock once
//! more. No allocation once the table is warm. Time is always the caller's `now_ns`
//! (CLOCK_MONOTONIC ns).
//!
//! Policy swaps: the policy and its rate-limit generation are published together (one pointer
//! store). The first decision on an entry after a swap that changed a limit's interval, or switched
//! a limit on or off, rescales its TATs so that its usage carries over in connections
//! ([`super::rescale`]); penalty deadlines, active and pending counts carry over unchanged.
//!
//! Boxes earned on a connection ([`Engine::record_h2_violation`], [`Engine::box_client`]) live
//! in `offenders`, beside the table: they hold on listeners without protection too, and
//! are checked where the penalty box is (after the lists, before the rate limits), refused as
//! `penalty_boxed`, listed in `blockedIps().penaltyBoxed` and reported to the box listener like
//! rate-limit boxes.
//!
//! `mode: 'observe'`: the same decisions, the same state changes (boxes, blocked lists), but the
//! connection is admitted and counted; the verdict says `observed`. This applies to every check of
//! the listener, dynamic blocks included (a handshake over `maxPendingPerIp` goes on uncounted).
//! Without a policy only dynamic blocks apply (enforced).
//!
//! When the table is at `maxTrackedIps` and no entry can be evicted (every candidate holds
//! connections), a client is admitted untracked (fail-open, as a full stick table does) and counted
//! in [`Engine::untracked_admissions`].

use super::blocked::{BlockedEntry, BlockedView};
use super::dynamic::DynamicBlocks;
use super::entry::{Entry, FLAG_BOX, FLAG_CONC, FLAG_RATE};
use super::key::{IpKey, DEFAULT_IPV6_PREFIX};
use super::offenders::Offenders;
use super::penalty;
use super::policy::{
    Mode, ProtectionPolicy, DEFAULT_H2_BOX_AFTER_VIOLATIONS, DEFAULT_PENALTY_MS,
    H2_VIOLATION_WINDOW_NS,
};
use super::reason::BlockReason;
use super::rescale::Installed;
pub use super::table::{ConnGuard, PendingGuard};
use super::table::{Ctx, Table};
use crate::clock::{ms_to_ns, ns_to_ms_ceil};
use arc_swap::{ArcSwap, ArcSwapOption};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// What the ClientHello peek learned, for [`Engine::check_hello`].
#[derive(Debug, Clone, Copy, Default)]
pub struct HelloFacts<'a> {
    /// The whole ClientHello was read and parsed.
    pub complete: bool,
    /// It carried a server_name extension.
    pub has_sni: bool,
    /// JA3 MD5 (32 hex, any case), if computed.
    pub ja3: Option<&'a str>,
    /// JA4 string (36 chars, any case), if computed.
    pub ja4: Option<&'a str>,
}

/// A refusal decision. With `observed` (observe mode) the connection is admitted anyway.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    /// Why.
    pub reason: BlockReason,
    /// True in observe mode: report, but admit.
    pub observed: bool,
}

/// The outcome of [`Engine::admit`]. Admitted iff `verdict` is `None` or observed; keep `guard`
/// for the connection's lifetime (it holds the per-IP active count).
#[derive(Debug)]
pub struct Admission {
    /// `None`: admitted cleanly.
    pub verdict: Option<Verdict>,
    /// The per-IP connection count (none for allowlisted or untracked clients, or without a
    /// policy).
    pub guard: Option<ConnGuard>,
}

impl Admission {
    /// Whether the connection may proceed.
    pub fn admitted(&self) -> bool {
        self.verdict.is_none_or(|v| v.observed)
    }

    fn open(guard: Option<ConnGuard>) -> Admission {
        Admission {
            verdict: None,
            guard,
        }
    }
}

/// Called with the client key and its new deadline (CLOCK_MONOTONIC ns) whenever a client is
/// boxed or its deadline moves forward (XDP ban-map sync). Runs on the admission path: keep it
/// cheap (e.g. push to a channel).
pub type BoxListener = dyn Fn(IpKey, u64) + Send + Sync;

struct ListenerCell(Arc<BoxListener>);

/// The protection engine of one listener. Per-IP state lives as long as the engine and survives
/// every policy swap.
pub struct Engine {
    port: u16,
    dynamic: Arc<DynamicBlocks>,
    installed: ArcSwap<Installed>,
    swap: Mutex<u32>,
    epoch: AtomicU32,
    table: Table,
    box_listener: ArcSwapOption<ListenerCell>,
    untracked: AtomicU64,
    offenders: Offenders,
}

/// `note` of a box earned by HTTP/2 guard violations in `blockedIps({ detail: true })`.
pub const H2_BOX_NOTE: &str = "boxed by protection.http2.boxAfterViolations";

const SWAP_EVICT_BUDGET: usize = 4096;

impl Engine {
    /// An engine for the listener on `port`, with no policy (only `dynamic` blocks apply).
    pub fn new(port: u16, dynamic: Arc<DynamicBlocks>) -> Engine {
        Engine {
            port,
            dynamic,
            installed: ArcSwap::from_pointee(Installed::initial()),
            swap: Mutex::new(0),
            epoch: AtomicU32::new(0),
            table: Table::new(),
            box_listener: ArcSwapOption::empty(),
            untracked: AtomicU64::new(0),
            offenders: Offenders::default(),
        }
    }

    /// The listener port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Installs a policy (`None` removes protection) at `now_ns` (CLOCK_MONOTONIC ns) with one
    /// atomic pointer store; O(1) whatever the number of tracked clients. Per-IP state survives:
    /// active and pending counts, penalty deadlines while the new policy keeps a penalty box
    /// (turning the box off and on again starts a new box epoch, so old deadlines are not
    /// resurrected), and each limit's usage in connections, taken at `now_ns`: a changed
    /// interval rescales a client's TAT lazily, on its next decision; a limit switched on starts
    /// fresh, one switched off drops its state ([`super::rescale`]). If the new `maxTrackedIps`
    /// is below the tracked count, a bounded eviction pass runs at `now_ns` (the rest is left to
    /// [`Engine::evict_tick`]).
    pub fn set_policy(&self, p: Option<Arc<ProtectionPolicy>>, now_ns: u64) {
        let mut last_epoch = self.swap.lock().unwrap_or_else(|e| e.into_inner());
        let box_on = p.as_ref().is_some_and(|p| p.penalty_box());
        let current = self.epoch.load(Ordering::Acquire);
        if box_on && current == 0 {
            *last_epoch = penalty::next_epoch(*last_epoch);
            self.epoch.store(*last_epoch, Ordering::Release);
        } else if !box_on {
            self.epoch.store(0, Ordering::Release);
        }
        let cap = p.as_ref().map(|p| p.max_tracked_ips());
        // Serialised by the swap lock: each installation is derived from the previous one.
        let next = self.installed.load().next(p, now_ns);
        self.installed.store(Arc::new(next));
        drop(last_epoch);
        if cap.is_some_and(|c| self.table.len() > c) {
            self.evict_tick(now_ns, SWAP_EVICT_BUDGET);
        }
    }

    /// The policy in force.
    pub fn policy(&self) -> Option<Arc<ProtectionPolicy>> {
        self.installed.load().policy.clone()
    }

    /// Sets (or clears) the box listener.
    pub fn set_box_listener(&self, f: Option<Arc<BoxListener>>) {
        self.box_listener
            .store(f.map(|f| Arc::new(ListenerCell(f))));
    }

    fn ctx(&self, inst: &Installed, p: &ProtectionPolicy, now: u64, epoch: u32) -> Ctx<'_> {
        Ctx {
            now,
            epoch,
            cap: p.max_tracked_ips(),
            tag: inst.tag(),
            latest: Some(&self.installed),
        }
    }

    /// Admission at accept, before reading a byte (see the module doc for the order), at
    /// `now_ns` (CLOCK_MONOTONIC ns; tests inject it).
    pub fn admit(&self, ip: IpAddr, now_ns: u64) -> Admission {
        self.admit_clocked(ip, || now_ns)
    }

    /// [`Engine::admit`] with a clock: `clock()` is read once for the list and TTL checks and
    /// once more under the client's shard lock for the rate decision, so concurrent decisions
    /// use times in the order they are made (see `Table::with`). The accept loop passes
    /// [`crate::clock::now_ns`].
    pub fn admit_clocked(&self, ip: IpAddr, clock: impl Fn() -> u64) -> Admission {
        let now_ns = clock();
        let ip = ip.to_canonical();
        let inst = self.installed.load();
        let Some(p) = inst.policy.as_deref() else {
            if self.dynamic.matches(ip, self.port, now_ns) {
                return refused(BlockReason::DynamicBlocked);
            }
            if self
                .offenders
                .is_boxed(IpKey::new(ip, DEFAULT_IPV6_PREFIX), now_ns)
            {
                return refused(BlockReason::PenaltyBoxed);
            }
            return Admission::open(None);
        };
        if p.allowlist().contains(ip) {
            return Admission::open(None);
        }
        let observe = p.mode() == Mode::Observe;
        let epoch = self.epoch.load(Ordering::Acquire);
        let ctx = self.ctx(&inst, p, now_ns, epoch);
        let key = IpKey::new(ip, p.ipv6_prefix_length());
        let listed = if p.blocklist().contains(ip) {
            Some(BlockReason::CidrBlocked)
        } else if self.dynamic.matches(ip, self.port, now_ns) {
            Some(BlockReason::DynamicBlocked)
        } else {
            None
        };
        if let Some(reason) = listed {
            if !observe {
                return refused(reason);
            }
            let guard = self
                .table
                .with(
                    key,
                    &ctx,
                    || now_ns,
                    |e, _| e.active = e.active.saturating_add(1),
                )
                .map(|(_, slot)| slot.conn_guard());
            return Admission {
                verdict: Some(observed(reason)),
                guard,
            };
        }
        let offender = self.offenders.is_boxed(key, now_ns);
        if offender && !observe {
            return refused(BlockReason::PenaltyBoxed);
        }
        let Some((out, slot)) = self.table.with(key, &ctx, &clock, |e, now| {
            if e.tag() == inst.tag() {
                decide(p, &inst, e, epoch, now, observe)
            } else {
                self.decide_rescaled(p, e, epoch, now, observe)
            }
        }) else {
            self.untracked.fetch_add(1, Ordering::Relaxed);
            return Admission::open(None);
        };
        for flag in [FLAG_RATE, FLAG_CONC, FLAG_BOX] {
            if out.new_flags & flag != 0 {
                self.table.lists.add(flag, key);
            }
        }
        if let Some(deadline_ns) = out.boxed_ns {
            self.notify_box(key, deadline_ns);
        }
        // An offender in observe mode is reported as boxed, whatever the limits said.
        let reason = if offender {
            Some(BlockReason::PenaltyBoxed)
        } else {
            out.reason
        };
        Admission {
            verdict: reason.map(|reason| Verdict {
                reason,
                observed: observe,
            }),
            guard: out.counted.then(|| slot.conn_guard()),
        }
    }

    /// The key and box parameters of `ip` under the policy in force: `(key, threshold,
    /// duration_ns)`; `None` for an allowlisted client (the allowlist skips every check).
    fn offender_key(&self, ip: IpAddr) -> Option<(IpKey, u32, u64)> {
        let ip = ip.to_canonical();
        match self.installed.load().policy.as_deref() {
            Some(p) if p.allowlist().contains(ip) => None,
            Some(p) => Some((
                IpKey::new(ip, p.ipv6_prefix_length()),
                p.http2().box_after_violations,
                p.box_duration_ns(),
            )),
            None => Some((
                IpKey::new(ip, DEFAULT_IPV6_PREFIX),
                DEFAULT_H2_BOX_AFTER_VIOLATIONS,
                DEFAULT_PENALTY_MS * 1_000_000,
            )),
        }
    }

    /// Counts one HTTP/2 guard violation by `ip`'s client at `now_ns` (CLOCK_MONOTONIC ns). The
    /// `http2.boxAfterViolations`-th within 60 s puts the client in the penalty box for
    /// `penaltyBox.durationMs` (600000 ms without a penalty box), as [`Engine::box_client`]
    /// does; returns the deadline (ns) when this violation boxed it. Allowlisted clients are
    /// never counted.
    pub fn record_h2_violation(&self, ip: IpAddr, now_ns: u64) -> Option<u64> {
        let (key, threshold, duration_ns) = self.offender_key(ip)?;
        let deadline = self.offenders.violation(
            key,
            now_ns,
            threshold,
            H2_VIOLATION_WINDOW_NS,
            duration_ns,
        )?;
        self.notify_box(key, deadline);
        Some(deadline)
    }

    /// Puts `ip`'s client in the penalty box until `now_ns + duration_ns` (CLOCK_MONOTONIC ns;
    /// a later running deadline is kept): from then on it is refused `penalty_boxed` at accept
    /// (reported as observed in observe mode), listed in `blockedIps().penaltyBoxed`, and the
    /// box listener (the XDP ban queue) is told. Works with or without a policy, penalty box or
    /// rate limit; the box ends at its deadline. Returns the deadline in force, or `None` for an
    /// allowlisted client.
    pub fn box_client(&self, ip: IpAddr, duration_ns: u64, now_ns: u64) -> Option<u64> {
        let (key, _, _) = self.offender_key(ip)?;
        let deadline = self
            .offenders
            .put_in_box(key, now_ns.saturating_add(duration_ns));
        self.notify_box(key, deadline);
        Some(deadline)
    }

    fn notify_box(&self, key: IpKey, deadline_ns: u64) {
        if let Some(l) = self.box_listener.load().as_ref() {
            (l.0)(key, deadline_ns);
        }
    }

    /// Clients with a recent HTTP/2 guard violation or a box earned on a connection.
    pub fn offenders(&self) -> usize {
        self.offenders.len()
    }

    /// [`decide`] on an entry written in another rate-limit generation than the caller's snapshot:
    /// under the entry's lock, load the generation in force (never older than the entry's),
    /// rescale the entry to it and decide with its limits.
    #[cold]
    #[inline(never)]
    fn decide_rescaled(
        &self,
        p: &ProtectionPolicy,
        e: &mut Entry,
        epoch: u32,
        now: u64,
        observe: bool,
    ) -> Outcome {
        let latest = self.installed.load();
        latest.rescale(e);
        decide(p, &latest, e, epoch, now, observe)
    }

    /// Checks after the ClientHello peek: an incomplete ClientHello while a fingerprint list is
    /// set (`incomplete_handshake`), then `requireSni` (`no_sni`), `ja3Blocklist`
    /// (`ja3_blocked`), `ja4Blocklist` (`ja4_blocked`). `None`: go on. Allowlisted clients and
    /// listeners without a policy always pass.
    pub fn check_hello(&self, ip: IpAddr, facts: &HelloFacts<'_>) -> Option<Verdict> {
        let inst = self.installed.load();
        let p = inst.policy.as_deref()?;
        let ip = ip.to_canonical();
        if p.allowlist().contains(ip) {
            return None;
        }
        let reason = if !facts.complete && p.has_fingerprint_lists() {
            BlockReason::IncompleteHandshake
        } else if p.require_sni() && !facts.has_sni {
            BlockReason::NoSni
        } else if facts.ja3.is_some_and(|j| p.ja3_blocklist().contains(j)) {
            BlockReason::Ja3Blocked
        } else if facts.ja4.is_some_and(|j| p.ja4_blocklist().contains(j)) {
            BlockReason::Ja4Blocked
        } else {
            return None;
        };
        Some(Verdict {
            reason,
            observed: p.mode() == Mode::Observe,
        })
    }

    /// Counts one handshake in progress for `ip` against `slowHandshake.maxPendingPerIp`; keep
    /// the guard until the handshake ends. `Err(slow_handshake)` when the client already has that
    /// many; in observe mode the verdict is `observed` and the handshake goes on uncounted. An
    /// allowlisted or untracked client, or a listener without a policy, gets an empty guard.
    pub fn pending_handshake(&self, ip: IpAddr, now_ns: u64) -> Result<PendingGuard, Verdict> {
        let inst = self.installed.load();
        let Some(p) = inst.policy.as_deref() else {
            return Ok(PendingGuard::empty());
        };
        let ip = ip.to_canonical();
        if p.allowlist().contains(ip) {
            return Ok(PendingGuard::empty());
        }
        let max = p.slow_handshake().max_pending_per_ip;
        let ctx = self.ctx(&inst, p, now_ns, self.epoch.load(Ordering::Acquire));
        let key = IpKey::new(ip, p.ipv6_prefix_length());
        let counted = self.table.with(
            key,
            &ctx,
            || now_ns,
            |e, _| {
                let ok = u64::from(e.pending) < max;
                if ok {
                    e.pending += 1;
                }
                ok
            },
        );
        match counted {
            None => Ok(PendingGuard::empty()),
            Some((true, slot)) => Ok(slot.pending_guard()),
            Some((false, _)) => Err(Verdict {
                reason: BlockReason::SlowHandshake,
                observed: p.mode() == Mode::Observe,
            }),
        }
    }

    /// Every boxed client with its deadline (CLOCK_MONOTONIC ns), in O(number boxed): for
    /// syncing the XDP ban map when it is attached.
    pub fn boxed(&self, now_ns: u64) -> Vec<(IpKey, u64)> {
        let epoch = self.epoch.load(Ordering::Acquire);
        let mut out = Vec::new();
        for key in self.table.lists.snapshot(FLAG_BOX) {
            let deadline = self.table.inspect(key, |e| {
                let e = e?;
                penalty::remaining_ms(e.penalty, epoch, now_ns)?;
                penalty::deadline_ms(e.penalty, epoch).map(ms_to_ns)
            });
            if let Some(d) = deadline {
                out.push((key, d));
            }
        }
        out.extend(self.offenders.boxed(now_ns));
        out
    }

    /// Blocked clients and networks at `now_ns`, in O(number blocked) (see [`super::blocked`]).
    pub fn blocked(&self, now_ns: u64) -> BlockedView {
        let inst = self.installed.load();
        let p = inst.policy.as_deref();
        let epoch = self.epoch.load(Ordering::Acquire);
        let mut view = BlockedView {
            dynamic_blocklist: self.dynamic.entries(Some(self.port), now_ns),
            ..BlockedView::default()
        };
        if let Some(p) = p {
            view.cidr_blocklist = p
                .blocklist()
                .nets()
                .iter()
                .map(|n| BlockedEntry {
                    ip: n.to_string(),
                    reason: BlockReason::CidrBlocked,
                    remaining_ms: None,
                    note: None,
                })
                .collect();
        }
        view.rate_limited = self.collect(FLAG_RATE, BlockReason::RateLimited, |e, lim| {
            p?;
            let wait = [
                lim.rate.map(|g| g.retry_after_ns(e.tat_rate, now_ns)),
                lim.sustained
                    .map(|g| g.retry_after_ns(e.tat_sustained, now_ns)),
            ]
            .into_iter()
            .flatten()
            .max()
            .unwrap_or(0);
            (wait > 0).then(|| Some(ns_to_ms_ceil(wait)))
        });
        view.concurrency_limited =
            self.collect(FLAG_CONC, BlockReason::TooManyConnections, |e, _| {
                let max = p?.max_concurrent_per_ip();
                (max > 0 && u64::from(e.active) >= max).then_some(None)
            });
        view.penalty_boxed = self.collect(FLAG_BOX, BlockReason::PenaltyBoxed, |e, _| {
            p?.penalty_duration_ns()?;
            penalty::remaining_ms(e.penalty, epoch, now_ns).map(Some)
        });
        for (key, deadline) in self.offenders.boxed(now_ns) {
            view.penalty_boxed.push(BlockedEntry {
                ip: key.to_string(),
                reason: BlockReason::PenaltyBoxed,
                remaining_ms: Some((deadline - now_ns).div_ceil(1_000_000)),
                note: Some(H2_BOX_NOTE.to_string()),
            });
        }
        view.sort();
        view
    }

    /// Walks one side set: `still` says whether an entry is still blocked (and its remaining ms),
    /// given the entry rescaled to the generation in force and that generation; stale keys are
    /// removed and their flag cleared.
    fn collect(
        &self,
        flag: u8,
        reason: BlockReason,
        still: impl Fn(&Entry, &Installed) -> Option<Option<u64>>,
    ) -> Vec<BlockedEntry> {
        let mut out = Vec::new();
        for key in self.table.lists.snapshot(flag) {
            let hit = self.table.inspect(key, |mut e| {
                let latest = self.installed.load();
                if let Some(e) = e.as_deref_mut() {
                    latest.rescale(e);
                }
                let hit = e.as_deref().and_then(|e| still(e, &latest));
                if hit.is_none() {
                    if let Some(e) = e {
                        e.flags &= !flag;
                    }
                    self.table.lists.remove(flag, key);
                }
                hit
            });
            if let Some(remaining_ms) = hit {
                out.push(BlockedEntry {
                    ip: key.to_string(),
                    reason,
                    remaining_ms,
                    note: None,
                });
            }
        }
        out
    }

    /// Number of tracked clients (entries in the per-IP table).
    pub fn tracked_ips(&self) -> usize {
        self.table.len()
    }

    /// Background eviction: examines at most `budget` table slots (bounded work, short lock
    /// holds) and drops expired dynamic blocks. Returns the number of entries evicted. Call it
    /// periodically (e.g. every 100 ms with a budget of 10_000).
    pub fn evict_tick(&self, now_ns: u64, budget: usize) -> usize {
        self.dynamic.purge_expired(now_ns);
        self.offenders.purge(now_ns, H2_VIOLATION_WINDOW_NS);
        let inst = self.installed.load();
        let ctx = Ctx {
            now: now_ns,
            epoch: self.epoch.load(Ordering::Acquire),
            cap: inst
                .policy
                .as_deref()
                .map_or(usize::MAX, |p| p.max_tracked_ips()),
            tag: inst.tag(),
            latest: Some(&self.installed),
        };
        self.table.evict_tick(&ctx, budget)
    }

    /// The client's (active connections, pending handshakes) as counted by its guards; `(0, 0)`
    /// when it is not tracked or there is no policy.
    pub fn counts(&self, ip: IpAddr) -> (u64, u64) {
        let inst = self.installed.load();
        let Some(p) = inst.policy.as_deref() else {
            return (0, 0);
        };
        let key = IpKey::new(ip, p.ipv6_prefix_length());
        self.table.inspect(key, |e| {
            e.map_or((0, 0), |e| (u64::from(e.active), u64::from(e.pending)))
        })
    }

    /// Whether `ip`'s client has an entry in the per-IP table.
    pub fn is_tracked(&self, ip: IpAddr) -> bool {
        let inst = self.installed.load();
        let Some(p) = inst.policy.as_deref() else {
            return false;
        };
        let key = IpKey::new(ip, p.ipv6_prefix_length());
        self.table.inspect(key, |e| e.is_some())
    }

    /// Clients admitted without an entry because the table was full of connected clients.
    pub fn untracked_admissions(&self) -> u64 {
        self.untracked.load(Ordering::Relaxed)
    }

    /// Heap bytes held by the per-IP table (entries, index, free lists).
    pub fn table_memory_bytes(&self) -> usize {
        self.table.memory_bytes()
    }

    /// The shared dynamic blocks.
    pub fn dynamic(&self) -> &Arc<DynamicBlocks> {
        &self.dynamic
    }
}

/// What one admission decided, made under the entry's shard lock.
#[derive(Default)]
struct Outcome {
    /// Refusal reason (`None`: admitted).
    reason: Option<BlockReason>,
    /// An active connection was counted (admitted, or observe mode): make a guard.
    counted: bool,
    /// Side-set flags newly set: add the key to those sets.
    new_flags: u8,
    /// The box deadline moved to this (ns): tell the box listener.
    boxed_ns: Option<u64>,
}

/// The per-entry part of [`Engine::admit`]: penalty box, then both GCRA limits (those of `lim`,
/// the generation `e` is written in), then `maxConcurrentPerIp`. A refused attempt changes no
/// limit; a boxed attempt that would conform is debited, one that would not moves the deadline to
/// `now + durationMs`.
#[inline]
fn decide(
    p: &ProtectionPolicy,
    lim: &Installed,
    e: &mut Entry,
    epoch: u32,
    now: u64,
    observe: bool,
) -> Outcome {
    let mut out = Outcome::default();
    let conforms = lim.rate.is_none_or(|g| g.conforms(e.tat_rate, now))
        && lim
            .sustained
            .is_none_or(|g| g.conforms(e.tat_sustained, now));
    let boxed = p.penalty_box() && penalty::is_boxed(e.penalty, epoch, now);
    let max = p.max_concurrent_per_ip();
    if boxed {
        out.reason = Some(BlockReason::PenaltyBoxed);
        if conforms {
            debit(lim, e, now);
        } else {
            exhausted(p, e, epoch, now, &mut out, false);
        }
    } else if !conforms {
        out.reason = Some(BlockReason::RateLimited);
        exhausted(p, e, epoch, now, &mut out, true);
    } else if max != 0 && u64::from(e.active) >= max {
        out.reason = Some(BlockReason::TooManyConnections);
        set_flag(e, FLAG_CONC, &mut out);
    } else {
        debit(lim, e, now);
    }
    if out.reason.is_none() || observe {
        e.active = e.active.saturating_add(1);
        out.counted = true;
    }
    out
}

#[inline]
fn debit(lim: &Installed, e: &mut Entry, now: u64) {
    if let Some(g) = lim.rate {
        g.admit(&mut e.tat_rate, now);
    }
    if let Some(g) = lim.sustained {
        g.admit(&mut e.tat_sustained, now);
    }
}

/// A limit is exhausted: list the client as rate-limited (for the exhausting attempt) and box it
/// (or move its deadline) when the penalty box is on.
fn exhausted(
    p: &ProtectionPolicy,
    e: &mut Entry,
    epoch: u32,
    now: u64,
    out: &mut Outcome,
    list: bool,
) {
    if list {
        set_flag(e, FLAG_RATE, out);
    }
    if let (Some(duration), true) = (p.penalty_duration_ns(), epoch != 0) {
        let deadline = penalty::deadline_for(now, duration);
        if let Some(ns) = penalty::extend(&mut e.penalty, epoch, deadline) {
            out.boxed_ns = Some(ns);
            set_flag(e, FLAG_BOX, out);
        }
    }
}

fn set_flag(e: &mut Entry, flag: u8, out: &mut Outcome) {
    if e.flags & flag == 0 {
        e.flags |= flag;
        out.new_flags |= flag;
    }
}

fn refused(reason: BlockReason) -> Admission {
    Admission {
        verdict: Some(Verdict {
            reason,
            observed: false,
        }),
        guard: None,
    }
}

fn observed(reason: BlockReason) -> Verdict {
    Verdict {
        reason,
        observed: true,
    }
}
