//! The protection engine of one listener: every admission decision, in the documented order.
//!
//! At accept, before reading a byte ([`Engine::admit`]): allowlist (skips every check) →
//! `blocklist`, then dynamic blocks → the client's penalty box → `rateLimit` and `sustained`
//! (GCRA) → `maxConcurrentPerIp` → the prefix tier (`prefixLimit`: the prefix's penalty box, its
//! rate, its `maxConcurrent`) → the listener budget (`listenerLimit.connectionsPerSecond`, not for
//! known-good clients). After the ClientHello peek ([`Engine::check_hello`]): an incomplete
//! ClientHello while a fingerprint list is set → `requireSni` → `ja3Blocklist` → `ja4Blocklist`.
//! During the pre-TLS phase ([`Engine::pending_handshake`]): `slowHandshake.maxPendingPerIp`
//! (`defense.newClientMaxPending` for a client first seen in defense mode) →
//! `listenerLimit.maxPendingHandshakes` (not for known-good clients).
//!
//! **One decision across tiers, nothing consumed by a refusal**: the client's entry is decided
//! under its shard lock, and — when the client passes — the prefix's entry under the prefix
//! table's shard lock *taken while the client's is held* (always in that order; nothing takes a
//! client shard lock while holding a prefix shard lock, and the tables' other cross-shard paths
//! only try-lock), then the listener budget (one CAS on one word). Each tier only *checks* until
//! every tier has passed; then the budget's CAS, the prefix's debit and the client's debit are
//! made, in that order, still under both locks. So a connection refused by the prefix or the
//! budget leaves the client's TATs as they were, and one refused by the client never reaches the
//! prefix. The penalty box of the tier that refuses keeps its documented rule (a boxed attempt
//! that would conform is debited on that tier, one that would not moves its deadline).
//!
//! Cost of an admission with a policy: one CIDR binary search per list, one relaxed load for the
//! dynamic blocks (plus O(prefix lengths) lookups when any exist), then one shard-lock hold during
//! which the table probe finds the entry (one cache line) and the whole decision — box, both GCRA
//! limits, concurrency count — is made and recorded on it; with `prefixLimit` a second, nested
//! hold on the prefix table; with `listenerLimit` one CAS; with `defense` other than `'off'` one
//! relaxed load and one atomic add (the per-second count, [`super::defense`]). Dropping the guard
//! takes each lock once more, one at a time. No allocation once the tables are warm. Time is
//! always the caller's `now_ns` (CLOCK_MONOTONIC ns).
//!
//! **Known-good clients** ([`Engine::mark_known_good`], called by the connection path once a
//! connection has completed its handshake and moved application bytes both ways without a
//! refusal): marked in their entry's standing for `knownGoodTtlMs`. They keep every limit of
//! their own and their prefix's, but skip the listener budget (and are not counted in it) and
//! defense mode's tightening. A client that is boxed loses its mark. The known-good listener
//! ([`Engine::set_known_good_listener`]) hears of each new mark and of its refreshes (about twice
//! per TTL): the XDP layer mirrors them into the kernel, where they skip `xdp.synBudgetPerSecond`.
//!
//! **Defense mode** ([`Engine::defense_tick`], [`super::defense`]): while it is on, a client that
//! is not known-good is debited its rates (client and prefix) × `factor` ([`super::gcra::Gcra::tightened`]),
//! a client first seen while it is on may hold `newClientMaxPending` handshakes, and
//! [`PendingGuard::tightened`] tells the connection path to use the shorter handshake timeout.
//!
//! Policy swaps: the policy and its rate-limit generation are published together (one pointer
//! store). The first decision on an entry after a swap that changed a limit's interval, or switched
//! a limit on or off, rescales its TATs so that its usage carries over in connections
//! ([`super::rescale`]); penalty deadlines, active and pending counts carry over unchanged. The
//! listener budget's one word is carried over eagerly at the swap.
//!
//! Boxes earned on a connection ([`Engine::record_h2_violation`], [`Engine::box_client`]) live
//! in `offenders`, beside the table: they hold on listeners without protection too, and
//! are checked where the penalty box is (after the lists, before the rate limits), refused as
//! `penalty_boxed`, listed in `blockedIps().penaltyBoxed` and reported to the box listener like
//! rate-limit boxes. Prefix boxes received from another node ([`Engine::box_prefix`]) live in
//! `prefix_boxes` for the same reason and are checked at the same place.
//!
//! `mode: 'observe'`: the same decisions, the same state changes (boxes, blocked lists), but the
//! connection is admitted and counted (on its client and its prefix); the verdict says
//! `observed`. This applies to every check of the listener, dynamic blocks included (a handshake
//! over a pending cap goes on uncounted). Without a policy only dynamic blocks apply (enforced).
//!
//! `clusterRateLimit` ([`Engine::admit_clustered`], [`super::lease`]): with the cluster tier up,
//! a client that passed every local check takes one token of its local lease, in the same
//! critical section (no second lookup); out of tokens, it is admitted on credit or refused
//! `cluster_rate_limited`, and [`Admission::refill`] asks the cluster tier to refill the lease
//! (which it answers through [`Engine::update_lease`]). A refusal there debits neither of the
//! client's own limits (`rateLimit`, `sustained`); its prefix and the listener budget, decided
//! before it, are charged as for any admission that reached them.
//!
//! When a table is at `maxTrackedIps` and no entry can be evicted (every candidate holds
//! connections), a client is admitted untracked (fail-open, as a full stick table does) and counted
//! in [`Engine::untracked_admissions`]; a prefix that cannot be tracked is skipped (the client's
//! own limits and the listener budget still apply), counted in [`Engine::untracked_prefixes`].

use super::blocked::{BlockedEntry, BlockedView};
use super::defense::{Buckets, DefenseChange, DefenseState};
use super::dynamic::DynamicBlocks;
use super::entry::{Entry, Standing, FLAG_BOX, FLAG_CONC, FLAG_RATE, MARK_KNOWN_GOOD, MARK_NEW};
use super::key::{IpKey, DEFAULT_IPV6_PREFIX};
use super::lease::{Lease, LeaseUpdate};
use super::offenders::Offenders;
use super::penalty;
use super::policy::{
    ClusterRateLimit, DefenseMode, Mode, ProtectionPolicy, DEFAULT_H2_BOX_AFTER_VIOLATIONS,
    DEFAULT_PENALTY_MS, H2_VIOLATION_WINDOW_NS,
};
use super::prefix_boxes::PrefixBoxes;
use super::reason::BlockReason;
use super::rescale::{carry_over, Installed, Tier};
use super::table::{expire_mark, Ctx, Table};
pub use super::table::{ConnGuard, PendingGuard, PrefixHold};
use crate::clock::{ms_to_ns, ns_to_ms_ceil};
use crate::gcra::Gcra;
use arc_swap::{ArcSwap, ArcSwapOption};
use ipnet::IpNet;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
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
    /// The client's cluster lease ran out: ask for a refill (`Cluster::refill_lease`, which
    /// builds the request with [`Engine::lease_request`] and says [`LeaseUpdate::NotSent`] if it
    /// cannot be queued). Only from [`Engine::admit_clustered`]. (A flag, not the request: the
    /// admission stays small on the path every connection takes.)
    pub refill: bool,
}

/// A refill request for one client's cluster lease ([`Engine::lease_request`]).
#[derive(Debug, Clone, Copy)]
pub struct LeaseRequest {
    /// The listener port (Redis keeps one GCRA per port and client).
    pub port: u16,
    /// The client.
    pub key: IpKey,
    /// The limit in force when the lease ran out.
    pub limit: ClusterRateLimit,
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
            refill: false,
        }
    }
}

/// Called with the key, its new deadline (CLOCK_MONOTONIC ns) and whether the key is a prefix of
/// the prefix tier, whenever a client or a prefix is boxed or its deadline moves forward (XDP
/// ban-map sync). Runs on the admission path: keep it cheap (e.g. push to a channel).
pub type BoxListener = dyn Fn(IpKey, u64, bool) + Send + Sync;

struct ListenerCell(Arc<BoxListener>);

/// Called with the client's key and a deadline (CLOCK_MONOTONIC ns) when a client is marked
/// known-good, and again each time its mark moves into a new half-TTL window (so at most about
/// twice per `knownGoodTtlMs` per client); the deadline is the mark's plus half the TTL, so a
/// mirror refreshed this way never ends before the mark (XDP known-good map sync). Runs on the
/// connection path: keep it cheap.
pub type KnownGoodListener = dyn Fn(IpKey, u64) + Send + Sync;

struct KnownGoodCell(Arc<KnownGoodListener>);

/// The protection engine of one listener. Per-IP state lives as long as the engine and survives
/// every policy swap.
pub struct Engine {
    port: u16,
    dynamic: Arc<DynamicBlocks>,
    installed: ArcSwap<Installed>,
    swap: Mutex<u32>,
    epoch: AtomicU32,
    table: Table,
    /// The prefix tier (`prefixLimit`), keyed by network prefix.
    prefixes: Table,
    box_listener: ArcSwapOption<ListenerCell>,
    known_good_listener: ArcSwapOption<KnownGoodCell>,
    untracked: AtomicU64,
    offenders: Offenders,
    /// Prefix boxes received from another node.
    prefix_boxes: PrefixBoxes,
    untracked_prefixes: AtomicU64,
    /// `listenerLimit.connectionsPerSecond`: one GCRA TAT for the whole listener.
    budget_tat: AtomicU64,
    /// Handshakes in progress counted against `listenerLimit.maxPendingHandshakes`.
    pending: Arc<AtomicU64>,
    /// New connections per second (defense mode's measure).
    buckets: Buckets,
    defense: Mutex<DefenseState>,
    /// Defense mode is on (written by [`Engine::defense_tick`] and forced by a swap).
    defended: AtomicBool,
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
            prefixes: Table::new(),
            box_listener: ArcSwapOption::empty(),
            known_good_listener: ArcSwapOption::empty(),
            untracked: AtomicU64::new(0),
            offenders: Offenders::default(),
            prefix_boxes: PrefixBoxes::default(),
            untracked_prefixes: AtomicU64::new(0),
            budget_tat: AtomicU64::new(0),
            pending: Arc::new(AtomicU64::new(0)),
            buckets: Buckets::default(),
            defense: Mutex::new(DefenseState::default()),
            defended: AtomicBool::new(false),
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
    /// fresh, one switched off drops its state ([`super::rescale`]). The listener budget's word
    /// is carried over at once. `defense.mode` `'on'`/`'off'` applies at once (its event follows
    /// at the next [`Engine::defense_tick`]). If the new `maxTrackedIps` is below the tracked
    /// count, a bounded eviction pass runs at `now_ns` (the rest is left to
    /// [`Engine::evict_tick`]). Installing a policy without `clusterRateLimit` frees the cluster
    /// leases ([`super::lease`]).
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
        let budget = |p: Option<&ProtectionPolicy>| -> Option<Gcra> {
            p?.listener_limit()?.rate.map(|r| r.gcra)
        };
        let old = self.installed.load();
        let (before, after) = (budget(old.policy.as_deref()), budget(p.as_deref()));
        let mut tat = self.budget_tat.load(Ordering::Acquire);
        carry_over(before, after, &mut tat, now_ns);
        self.budget_tat.store(tat, Ordering::Release);
        match p.as_deref().map(|p| p.defense().mode) {
            Some(DefenseMode::On) => self.defended.store(true, Ordering::Release),
            Some(DefenseMode::Auto) => {}
            _ => self.defended.store(false, Ordering::Release),
        }
        // Serialised by the swap lock: each installation is derived from the previous one.
        let unlease = p
            .as_deref()
            .is_none_or(|p| p.cluster_rate_limit().is_none());
        let next = old.next(p, now_ns);
        drop(old);
        self.installed.store(Arc::new(next));
        if unlease {
            // After the store: decisions from now on take no lease (one made on the old
            // snapshot meanwhile may keep its shard's leases until the next swap without
            // `clusterRateLimit`: memory only; shards without leases are skipped).
            self.table.drop_leases();
        }
        drop(last_epoch);
        if cap.is_some_and(|c| self.table.len() > c || self.prefixes.len() > c) {
            self.evict_tick(now_ns, SWAP_EVICT_BUDGET);
        }
    }

    /// The policy in force.
    pub fn policy(&self) -> Option<Arc<ProtectionPolicy>> {
        self.installed.load().policy.clone()
    }

    /// The box listener in force, if any (so another can be chained behind it).
    pub fn box_listener(&self) -> Option<Arc<BoxListener>> {
        self.box_listener.load().as_ref().map(|c| c.0.clone())
    }

    /// Sets (or clears) the box listener.
    pub fn set_box_listener(&self, f: Option<Arc<BoxListener>>) {
        self.box_listener
            .store(f.map(|f| Arc::new(ListenerCell(f))));
    }

    /// Sets (or clears) the known-good listener.
    pub fn set_known_good_listener(&self, f: Option<Arc<KnownGoodListener>>) {
        self.known_good_listener
            .store(f.map(|f| Arc::new(KnownGoodCell(f))));
    }

    fn ctx<'a>(
        &'a self,
        inst: &Installed,
        p: &ProtectionPolicy,
        now: u64,
        epoch: u32,
        tier: Tier,
    ) -> Ctx<'a> {
        let (marked, new_marks) = match tier {
            Tier::Client => (
                Some(&self.table.marked),
                if self.defended.load(Ordering::Relaxed) {
                    MARK_NEW
                } else {
                    0
                },
            ),
            Tier::Prefix => (None, 0),
        };
        Ctx {
            now,
            epoch,
            cap: p.max_tracked_ips(),
            tag: inst.tag(),
            latest: Some(&self.installed),
            tier,
            memory_ns: memory_ns(p, epoch),
            marked,
            new_marks,
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
        self.admit_clustered(ip, clock, false)
    }

    /// [`Engine::admit_clocked`] with the cluster tier: with `cluster` (the tier is configured
    /// and its breaker closed) and a policy with `clusterRateLimit`, a client that passed every
    /// local check (and is not a penalty-box offender) takes a token of its lease under the same
    /// shard lock ([`super::lease`]): refused `cluster_rate_limited` (observed in observe mode)
    /// when Redis said no, and [`Admission::refill`] set when the lease needs refilling.
    pub fn admit_clustered(&self, ip: IpAddr, clock: impl Fn() -> u64, cluster: bool) -> Admission {
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
                || self.prefix_boxes.holding(ip, now_ns).is_some()
            {
                return refused(BlockReason::PenaltyBoxed);
            }
            return Admission::open(None);
        };
        if p.defense().mode != DefenseMode::Off {
            self.buckets.record(now_ns);
        }
        if p.allowlist().contains(ip) {
            return Admission::open(None);
        }
        let observe = p.mode() == Mode::Observe;
        let epoch = self.epoch.load(Ordering::Acquire);
        let defended = self.defended.load(Ordering::Relaxed);
        let ctx = self.ctx(&inst, p, now_ns, epoch, Tier::Client);
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
                    |e, _, _| e.active = e.active.saturating_add(1),
                )
                .map(|(_, slot)| slot.conn_guard());
            return Admission {
                verdict: Some(observed(reason)),
                guard,
                refill: false,
            };
        }
        let offender =
            self.offenders.is_boxed(key, now_ns) || self.prefix_boxes.holding(ip, now_ns).is_some();
        if offender && !observe {
            return refused(BlockReason::PenaltyBoxed);
        }
        let limit = p.cluster_rate_limit().filter(|_| cluster && !offender);
        let d = Decision {
            p,
            ip,
            epoch,
            observe,
            defended,
            lease: limit.map(|l| l.lease),
        };
        let Some((mut out, slot)) =
            self.table
                .with_lease(key, &ctx, &clock, limit.is_some(), |e, s, lease, now| {
                    if e.tag() == inst.tag() {
                        self.decide(&d, &inst, e, s, lease, now)
                    } else {
                        self.decide_rescaled(&d, e, s, lease, now)
                    }
                })
        else {
            self.untracked.fetch_add(1, Ordering::Relaxed);
            return Admission::open(None);
        };
        self.publish(key, &out.client, false);
        if let Some(pkey) = out.prefix_key {
            self.publish(pkey, &out.prefix_effects, true);
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
            guard: out.counted.then(|| slot.conn_guard_with(out.prefix.take())),
            refill: out.refill,
        }
    }

    /// The refill request for `ip`'s cluster lease under the policy in force (after an
    /// [`Admission::refill`]); `None` when that policy has no `clusterRateLimit` (it was swapped
    /// meanwhile, and the leases went with it).
    pub fn lease_request(&self, ip: IpAddr) -> Option<LeaseRequest> {
        let inst = self.installed.load();
        let p = inst.policy.as_deref()?;
        Some(LeaseRequest {
            port: self.port,
            key: IpKey::new(ip.to_canonical(), p.ipv6_prefix_length()),
            limit: *p.cluster_rate_limit()?,
        })
    }

    /// The refill task's update `u` of `key`'s cluster lease, under its shard lock (see
    /// [`LeaseUpdate`] for what it returns); 0 and nothing done when the client is no longer
    /// tracked (its lease went with its entry) or no lease is kept.
    pub fn update_lease(&self, key: IpKey, u: LeaseUpdate) -> u64 {
        self.table.inspect_lease(key, |l| l.update(u)).unwrap_or(0)
    }

    /// Clients holding a cluster lease (one lock per table shard: for metrics).
    pub fn lease_clients(&self) -> usize {
        self.table.lease_clients()
    }

    /// After the locks: side-set inserts for newly set flags, and the box listener.
    fn publish(&self, key: IpKey, fx: &Effects, prefix: bool) {
        let lists = if prefix {
            &self.prefixes.lists
        } else {
            &self.table.lists
        };
        for flag in [FLAG_RATE, FLAG_CONC, FLAG_BOX] {
            if fx.new_flags & flag != 0 {
                lists.add(flag, key);
            }
        }
        if let Some(deadline_ns) = fx.boxed_ns {
            if let Some(l) = self.box_listener.load().as_ref() {
                (l.0)(key, deadline_ns, prefix);
            }
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
                ms_to_ns(DEFAULT_PENALTY_MS),
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

    /// Puts the prefix `net` (a boxed prefix of another node's prefix tier, as its box listener
    /// reported it) in the penalty box until `now_ns + duration_ns` (a later running deadline is
    /// kept): every client in it is refused `penalty_boxed` at accept (observed in observe
    /// mode), the prefix is listed in `blockedIps().penaltyBoxed` as a CIDR with the note
    /// [`PREFIX_NOTE`] as a local prefix box is, and the box listener is told (as a prefix: the
    /// XDP prefix-ban trie). Holds whatever the local policy (see `prefix_boxes`). Returns the
    /// deadline in force, or `None` when the set is full.
    pub fn box_prefix(&self, net: IpNet, duration_ns: u64, now_ns: u64) -> Option<u64> {
        let net = super::cidr::canonical_net(net);
        let len = net.prefix_len();
        let key = IpKey::prefix(net.network(), len, len);
        let deadline = self
            .prefix_boxes
            .put(key, now_ns.saturating_add(duration_ns))?;
        if let Some(l) = self.box_listener.load().as_ref() {
            (l.0)(key, deadline, true);
        }
        Some(deadline)
    }

    fn notify_box(&self, key: IpKey, deadline_ns: u64) {
        if let Some(l) = self.box_listener.load().as_ref() {
            (l.0)(key, deadline_ns, false);
        }
    }

    /// Clients with a recent HTTP/2 guard violation or a box earned on a connection.
    pub fn offenders(&self) -> usize {
        self.offenders.len()
    }

    /// [`Engine::decide`] on an entry written in another rate-limit generation than the caller's
    /// snapshot: under the entry's lock, load the generation in force (never older than the
    /// entry's), rescale the entry to it and decide with its limits.
    #[cold]
    #[inline(never)]
    fn decide_rescaled(
        &self,
        d: &Decision<'_>,
        e: &mut Entry,
        s: &mut Standing,
        lease: Option<&mut Lease>,
        now: u64,
    ) -> Outcome {
        let latest = self.installed.load();
        latest.rescale(e, Tier::Client);
        self.decide(d, &latest, e, s, lease, now)
    }

    /// The per-entry part of [`Engine::admit`], under the client's shard lock: the client's
    /// penalty box, both GCRA limits (those of `lim`, the generation `e` is written in; × factor
    /// in defense mode for a client that is not known-good), `maxConcurrentPerIp`; then, if the
    /// client passes (or in observe mode, to count the connection), the prefix tier and the
    /// listener budget ([`Engine::prefix_tier`]); then, with `lease`, a token of the client's
    /// cluster lease; then the client's debit if everything passed. Kept out of line on every
    /// path, so each instantiation of the table's closure around it stays small and inlined (the
    /// clustered admission otherwise inlined it into a closure kept out of line: on/off 1.06
    /// against 1.04, `cargo bench --bench cluster_admission`).
    #[inline(never)]
    fn decide(
        &self,
        d: &Decision<'_>,
        lim: &Installed,
        e: &mut Entry,
        s: &mut Standing,
        lease: Option<&mut Lease>,
        now: u64,
    ) -> Outcome {
        let p = d.p;
        let mut out = Outcome::default();
        // The mark only matters to the budget and to defense mode: without them the decision
        // does not read the standing (the sweep uncounts expired marks).
        let known_good = (d.defended || p.listener_limit().is_some()) && {
            expire_mark(s, now, Some(&self.table.marked));
            s.known_good(now)
        };
        let tight = d.defended && !known_good;
        let (rate, sustained) = if tight {
            (lim.tight[0], lim.tight[1])
        } else {
            (lim.rate, lim.sustained)
        };
        // The tightened limits keep the tolerance: conformance reads the same either way.
        let conforms = rate.is_none_or(|g| g.conforms(e.tat_rate, now))
            && sustained.is_none_or(|g| g.conforms(e.tat_sustained, now));
        let boxed = p.penalty_box() && penalty::is_boxed(e.penalty, d.epoch, now);
        let max = p.max_concurrent_per_ip();
        if boxed {
            out.reason = Some(BlockReason::PenaltyBoxed);
            if conforms {
                debit(rate, sustained, e, now);
            } else {
                exhausted(
                    p,
                    e,
                    s,
                    d.epoch,
                    now,
                    &mut out.client,
                    false,
                    Some(&self.table.marked),
                );
            }
        } else if !conforms {
            out.reason = Some(BlockReason::RateLimited);
            exhausted(
                p,
                e,
                s,
                d.epoch,
                now,
                &mut out.client,
                true,
                Some(&self.table.marked),
            );
        } else if max != 0 && u64::from(e.active) >= max {
            out.reason = Some(BlockReason::TooManyConnections);
            set_flag(e, FLAG_CONC, &mut out.client);
        }
        let passed = out.reason.is_none();
        if passed || d.observe {
            let pt = self.prefix_tier(d, lim, now, passed, tight, known_good);
            if passed {
                out.reason = pt.reason;
            }
            out.prefix = pt.hold;
            out.prefix_key = pt.key;
            out.prefix_effects = pt.effects;
        }
        if let (Some(l), Some(n), None) = (lease, d.lease, out.reason) {
            let ld = l.admit(n, now);
            out.refill = ld.refill;
            if !ld.admit {
                out.reason = Some(BlockReason::ClusterRateLimited);
            }
        }
        if out.reason.is_none() {
            debit(rate, sustained, e, now);
        }
        if out.reason.is_none() || d.observe {
            e.active = e.active.saturating_add(1);
            out.counted = true;
        }
        out
    }

    /// The prefix tier and the listener budget, under the client's shard lock (the prefix shard
    /// lock is taken inside it). With `decide` false (observe mode after a client refusal) it
    /// only counts the connection on the prefix. Without `prefixLimit`, or when the prefix cannot
    /// be tracked, only the budget is decided.
    fn prefix_tier(
        &self,
        d: &Decision<'_>,
        lim: &Installed,
        now: u64,
        decide: bool,
        tight: bool,
        known_good: bool,
    ) -> PrefixOutcome {
        let p = d.p;
        let mut po = PrefixOutcome::default();
        let Some(pl) = p.prefix_limit() else {
            if decide {
                po.reason = self.budget(p, now, known_good);
            }
            return po;
        };
        let key = IpKey::prefix(d.ip, pl.ipv4_prefix_length, pl.ipv6_prefix_length);
        let inst = self.installed.load();
        let ctx = self.ctx(&inst, p, now, d.epoch, Tier::Prefix);
        let r = self.prefixes.with(
            key,
            &ctx,
            || now,
            |pe, ps, pnow| {
                let latest;
                let plim = if pe.tag() == lim.tag() {
                    lim
                } else {
                    latest = self.installed.load();
                    latest.rescale(pe, Tier::Prefix);
                    &latest
                };
                let g = if tight { plim.tight[2] } else { plim.prefix };
                let mut fx = Effects::default();
                let mut reason = None;
                if decide {
                    let conforms = g.is_none_or(|g| g.conforms(pe.tat_rate, pnow));
                    let boxed = p.penalty_box() && penalty::is_boxed(pe.penalty, d.epoch, pnow);
                    if boxed {
                        reason = Some(BlockReason::PenaltyBoxed);
                        if conforms {
                            debit(g, None, pe, pnow);
                        } else {
                            exhausted(p, pe, ps, d.epoch, pnow, &mut fx, false, None);
                        }
                    } else if !conforms {
                        reason = Some(BlockReason::PrefixRateLimited);
                        exhausted(p, pe, ps, d.epoch, pnow, &mut fx, true, None);
                    } else if pl.max_concurrent != 0 && u64::from(pe.active) >= pl.max_concurrent {
                        reason = Some(BlockReason::PrefixTooManyConnections);
                        set_flag(pe, FLAG_CONC, &mut fx);
                    } else {
                        reason = self.budget(p, pnow, known_good);
                        if reason.is_none() {
                            debit(g, None, pe, pnow);
                        }
                    }
                }
                let counted = reason.is_none() || d.observe;
                if counted {
                    pe.active = pe.active.saturating_add(1);
                }
                (reason, fx, counted)
            },
        );
        match r {
            Some(((reason, fx, counted), slot)) => {
                po.reason = reason;
                po.effects = fx;
                po.key = Some(key);
                po.hold = counted.then(|| slot.prefix_hold());
            }
            None => {
                self.untracked_prefixes.fetch_add(1, Ordering::Relaxed);
                if decide {
                    po.reason = self.budget(p, now, known_good);
                }
            }
        }
        po
    }

    /// The listener budget (`listenerLimit.connectionsPerSecond`): one CAS on the listener's TAT,
    /// debited only on admission (the last local check: only the cluster lease follows it);
    /// known-good clients are not counted.
    fn budget(&self, p: &ProtectionPolicy, now: u64, known_good: bool) -> Option<BlockReason> {
        if known_good {
            return None;
        }
        let g = p.listener_limit()?.rate?.gcra;
        g.try_debit(&self.budget_tat, now)
            .err()
            .map(|_| BlockReason::ListenerOverloaded)
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

    /// Counts one handshake in progress for `ip` against `slowHandshake.maxPendingPerIp` (in
    /// defense mode, `defense.newClientMaxPending` for a client first seen while it is on), then
    /// against `listenerLimit.maxPendingHandshakes` (not for known-good clients); keep the guard
    /// until the handshake ends ([`PendingGuard::tightened`] says whether defense mode's shorter
    /// handshake timeout applies). `Err(slow_handshake)` / `Err(listener_overloaded)` when a cap
    /// is reached (nothing is counted); in observe mode the verdict is `observed` and the
    /// handshake goes on uncounted. An allowlisted client, or a listener without a policy, gets
    /// an empty guard; an untracked client is counted on the listener only.
    pub fn pending_handshake(&self, ip: IpAddr, now_ns: u64) -> Result<PendingGuard, Verdict> {
        let inst = self.installed.load();
        let Some(p) = inst.policy.as_deref() else {
            return Ok(PendingGuard::empty());
        };
        let ip = ip.to_canonical();
        if p.allowlist().contains(ip) {
            return Ok(PendingGuard::empty());
        }
        let observed = p.mode() == Mode::Observe;
        let refuse = |reason| Verdict { reason, observed };
        let defended = self.defended.load(Ordering::Relaxed);
        let max = p.slow_handshake().max_pending_per_ip;
        let new_max = p.defense().new_client_max_pending;
        let listener_max = p.listener_limit().map_or(0, |l| l.max_pending_handshakes);
        let ctx = self.ctx(
            &inst,
            p,
            now_ns,
            self.epoch.load(Ordering::Acquire),
            Tier::Client,
        );
        let key = IpKey::new(ip, p.ipv6_prefix_length());
        let counted = self.table.with(
            key,
            &ctx,
            || now_ns,
            |e, s, now| {
                expire_mark(s, now, Some(&self.table.marked));
                let known_good = s.known_good(now);
                let tight = defended && !known_good;
                let max = if tight && s.marks & MARK_NEW != 0 {
                    max.min(new_max)
                } else {
                    max
                };
                if u64::from(e.pending) >= max {
                    return Err(BlockReason::SlowHandshake);
                }
                let on_listener = listener_max != 0 && !known_good;
                if on_listener && !take_pending(&self.pending, listener_max) {
                    return Err(BlockReason::ListenerOverloaded);
                }
                e.pending += 1;
                Ok((on_listener, tight))
            },
        );
        let listener = |counted: bool| counted.then(|| Arc::clone(&self.pending));
        match counted {
            None => {
                let on_listener = listener_max != 0;
                if on_listener && !take_pending(&self.pending, listener_max) {
                    return Err(refuse(BlockReason::ListenerOverloaded));
                }
                Ok(PendingGuard::listener_only(listener(on_listener), defended))
            }
            Some((Ok((on_listener, tight)), slot)) => {
                Ok(slot.pending_guard(listener(on_listener), tight))
            }
            Some((Err(reason), _)) => Err(refuse(reason)),
        }
    }

    /// Marks `ip`'s client known-good until `now_ns + knownGoodTtlMs` (rounded up to the
    /// second): call it once a connection of the client completed its TLS handshake and moved
    /// application bytes both ways without a refusal. Returns whether a mark was set (not for an
    /// allowlisted or boxed client, an untracked one, or without a policy).
    pub fn mark_known_good(&self, ip: IpAddr, now_ns: u64) -> bool {
        let inst = self.installed.load();
        let Some(p) = inst.policy.as_deref() else {
            return false;
        };
        let ip = ip.to_canonical();
        if p.allowlist().contains(ip) {
            return false;
        }
        let epoch = self.epoch.load(Ordering::Acquire);
        let ctx = self.ctx(&inst, p, now_ns, epoch, Tier::Client);
        let until_s = now_ns
            .saturating_add(p.known_good_ttl_ns())
            .div_ceil(1_000_000_000)
            .min(u64::from(u32::MAX)) as u32;
        let key = IpKey::new(ip, p.ipv6_prefix_length());
        let half_s = (p.known_good_ttl_ns().div_ceil(2_000_000_000)).max(1) as u32;
        let marked = self.table.with(
            key,
            &ctx,
            || now_ns,
            |e, s, now| {
                if p.penalty_box() && penalty::is_boxed(e.penalty, epoch, now) {
                    return (false, false);
                }
                let fresh = s.marks & MARK_KNOWN_GOOD == 0 || !s.known_good(now);
                if s.marks & MARK_KNOWN_GOOD == 0 {
                    s.marks |= MARK_KNOWN_GOOD;
                    self.table.marked.fetch_add(1, Ordering::Relaxed);
                }
                let before = s.known_good_s;
                s.known_good_s = s.known_good_s.max(until_s);
                s.marks &= !MARK_NEW;
                (true, fresh || before / half_s != s.known_good_s / half_s)
            },
        );
        let (marked, tell) = marked.map(|(m, _)| m).unwrap_or((false, false));
        if tell {
            if let Some(l) = self.known_good_listener.load().as_ref() {
                let deadline = u64::from(until_s.saturating_add(half_s)) * 1_000_000_000;
                (l.0)(key, deadline);
            }
        }
        marked
    }

    /// Every client known-good at `now_ns`, with the deadline the known-good listener would be
    /// told for it (its mark's end plus half a `knownGoodTtlMs`, CLOCK_MONOTONIC ns): what a
    /// newly attached XDP program is given, so a site's regular users pass its SYN budget from
    /// the first packet. O(tracked clients), each shard under its lock in turn; empty without a
    /// policy.
    pub fn known_good_marks(&self, now_ns: u64) -> Vec<(IpKey, u64)> {
        let Some(p) = self.installed.load().policy.clone() else {
            return Vec::new();
        };
        let half_s = u64::from((p.known_good_ttl_ns().div_ceil(2_000_000_000)).max(1) as u32);
        let mut out = Vec::new();
        self.table.for_each(|e, s| {
            if s.marks & MARK_KNOWN_GOOD != 0 && s.known_good(now_ns) {
                out.push((
                    e.key(),
                    (u64::from(s.known_good_s) + half_s) * 1_000_000_000,
                ));
            }
        });
        out
    }

    /// Whether `ip`'s client is known-good at `now_ns`.
    pub fn is_known_good(&self, ip: IpAddr, now_ns: u64) -> bool {
        let inst = self.installed.load();
        let Some(p) = inst.policy.as_deref() else {
            return false;
        };
        let key = IpKey::new(ip.to_canonical(), p.ipv6_prefix_length());
        self.table
            .inspect_standing(key, |s| s.is_some_and(|s| s.known_good(now_ns)))
    }

    /// Clients holding a known-good mark (`metrics().listeners[].knownGoodClients`): counted when
    /// marked, uncounted when the mark is found expired (by the client's next connection or the
    /// eviction sweep), when the client is boxed or its entry evicted — so an expired mark is
    /// counted until the sweep passes it.
    pub fn known_good_clients(&self) -> u64 {
        self.table.marked.load(Ordering::Relaxed)
    }

    /// Closes the finished seconds of the defense-mode measure at `now_ns` and applies
    /// `defense` (see [`super::defense`]): the change to announce as a `'defense'` event, if
    /// any. Call it periodically (the server does every 100 ms; at least every 3 s).
    pub fn defense_tick(&self, now_ns: u64) -> Option<DefenseChange> {
        let inst = self.installed.load();
        let cfg = inst
            .policy
            .as_deref()
            .map(|p| *p.defense())
            .unwrap_or_default();
        let mut st = self.defense.lock().unwrap_or_else(|e| e.into_inner());
        let change = st.tick(&cfg, now_ns, |sec| self.buckets.count(sec));
        self.defended.store(st.active(), Ordering::Release);
        change
    }

    /// Whether defense mode is on.
    pub fn defense_active(&self) -> bool {
        self.defended.load(Ordering::Acquire)
    }

    /// Every boxed client and prefix with its deadline (CLOCK_MONOTONIC ns) and whether it is a
    /// prefix, in O(number boxed): for syncing the XDP ban map when it is attached.
    pub fn boxed(&self, now_ns: u64) -> Vec<(IpKey, u64, bool)> {
        let epoch = self.epoch.load(Ordering::Acquire);
        let mut out = Vec::new();
        for (table, prefix) in [(&self.table, false), (&self.prefixes, true)] {
            for key in table.lists.snapshot(FLAG_BOX) {
                let deadline = table.inspect(key, |e| {
                    let e = e?;
                    penalty::remaining_ms(e.penalty, epoch, now_ns)?;
                    penalty::deadline_ms(e.penalty, epoch).map(ms_to_ns)
                });
                if let Some(d) = deadline {
                    out.push((key, d, prefix));
                }
            }
        }
        out.extend(
            self.offenders
                .boxed(now_ns)
                .into_iter()
                .map(|(k, d)| (k, d, false)),
        );
        out.extend(
            self.prefix_boxes
                .running(now_ns)
                .into_iter()
                .map(|(k, d)| (k, d, true)),
        );
        out
    }

    /// Blocked clients and networks at `now_ns`, in O(number blocked) (see [`super::blocked`]).
    /// Prefixes of the prefix tier are listed as CIDRs (`203.0.113.0/24`): rate-limited ones
    /// with reason `prefix_rate_limited`, concurrency-limited ones `prefix_too_many_connections`,
    /// boxed ones `penalty_boxed` with the note `prefix`.
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
        let client = Side {
            table: &self.table,
            tier: Tier::Client,
            note: None,
        };
        let prefix = Side {
            table: &self.prefixes,
            tier: Tier::Prefix,
            note: Some(PREFIX_NOTE),
        };
        let retry = |gs: [Option<(Gcra, u64)>; 2]| {
            let wait = gs
                .into_iter()
                .flatten()
                .map(|(g, tat)| g.retry_after_ns(tat, now_ns))
                .max()
                .unwrap_or(0);
            (wait > 0).then(|| Some(ns_to_ms_ceil(wait)))
        };
        view.rate_limited = self.collect(&client, FLAG_RATE, BlockReason::RateLimited, |e, lim| {
            p?;
            retry([
                lim.rate.map(|g| (g, e.tat_rate)),
                lim.sustained.map(|g| (g, e.tat_sustained)),
            ])
        });
        view.rate_limited.extend(self.collect(
            &prefix,
            FLAG_RATE,
            BlockReason::PrefixRateLimited,
            |e, lim| {
                p?;
                retry([lim.prefix.map(|g| (g, e.tat_rate)), None])
            },
        ));
        view.concurrency_limited = self.collect(
            &client,
            FLAG_CONC,
            BlockReason::TooManyConnections,
            |e, _| {
                let max = p?.max_concurrent_per_ip();
                (max > 0 && u64::from(e.active) >= max).then_some(None)
            },
        );
        view.concurrency_limited.extend(self.collect(
            &prefix,
            FLAG_CONC,
            BlockReason::PrefixTooManyConnections,
            |e, _| {
                let max = p?.prefix_limit()?.max_concurrent;
                (max > 0 && u64::from(e.active) >= max).then_some(None)
            },
        ));
        for side in [&client, &prefix] {
            view.penalty_boxed.extend(self.collect(
                side,
                FLAG_BOX,
                BlockReason::PenaltyBoxed,
                |e, _| {
                    p?.penalty_duration_ns()?;
                    penalty::remaining_ms(e.penalty, epoch, now_ns).map(Some)
                },
            ));
        }
        for (key, deadline) in self.offenders.boxed(now_ns) {
            view.penalty_boxed.push(BlockedEntry {
                ip: key.to_string(),
                reason: BlockReason::PenaltyBoxed,
                remaining_ms: Some(ns_to_ms_ceil(deadline - now_ns)),
                note: Some(H2_BOX_NOTE.to_string()),
            });
        }
        for (key, deadline) in self.prefix_boxes.running(now_ns) {
            view.penalty_boxed.push(BlockedEntry {
                ip: key.to_string(),
                reason: BlockReason::PenaltyBoxed,
                remaining_ms: Some(ns_to_ms_ceil(deadline - now_ns)),
                note: Some(PREFIX_NOTE.to_string()),
            });
        }
        view.sort();
        view
    }

    /// Walks one side set of one table: `still` says whether an entry is still blocked (and its
    /// remaining ms), given the entry rescaled to the generation in force and that generation;
    /// stale keys are removed and their flag cleared.
    fn collect(
        &self,
        side: &Side<'_>,
        flag: u8,
        reason: BlockReason,
        still: impl Fn(&Entry, &Installed) -> Option<Option<u64>>,
    ) -> Vec<BlockedEntry> {
        let mut out = Vec::new();
        let table = side.table;
        for key in table.lists.snapshot(flag) {
            let hit = table.inspect(key, |mut e| {
                let latest = self.installed.load();
                if let Some(e) = e.as_deref_mut() {
                    latest.rescale(e, side.tier);
                }
                let hit = e.as_deref().and_then(|e| still(e, &latest));
                if hit.is_none() {
                    if let Some(e) = e {
                        e.flags &= !flag;
                    }
                    table.lists.remove(flag, key);
                }
                hit
            });
            if let Some(remaining_ms) = hit {
                out.push(BlockedEntry {
                    ip: key.to_string(),
                    reason,
                    remaining_ms,
                    note: side.note.map(str::to_string),
                });
            }
        }
        out
    }

    /// Number of tracked clients (entries in the per-IP table).
    pub fn tracked_ips(&self) -> usize {
        self.table.len()
    }

    /// Number of tracked prefixes (entries in the prefix table).
    pub fn tracked_prefixes(&self) -> usize {
        self.prefixes.len()
    }

    /// Background eviction: examines at most `budget` slots of each table (bounded work, short
    /// lock holds) and drops expired dynamic blocks. Returns the number of entries evicted. Call
    /// it periodically (e.g. every 100 ms with a budget of 10_000).
    pub fn evict_tick(&self, now_ns: u64, budget: usize) -> usize {
        self.dynamic.purge_expired(now_ns);
        self.offenders.purge(now_ns, H2_VIOLATION_WINDOW_NS);
        self.prefix_boxes.purge(now_ns);
        let inst = self.installed.load();
        let epoch = self.epoch.load(Ordering::Acquire);
        let p = inst.policy.as_deref();
        let ctx = |tier: Tier| Ctx {
            now: now_ns,
            epoch,
            cap: p.map_or(usize::MAX, |p| p.max_tracked_ips()),
            tag: inst.tag(),
            latest: Some(&self.installed),
            tier,
            memory_ns: p.map_or(0, |p| memory_ns(p, epoch)),
            marked: (tier == Tier::Client).then_some(&self.table.marked),
            new_marks: 0,
        };
        let mut n = self.table.evict_tick(&ctx(Tier::Client), budget);
        if self.prefixes.len() > 0 {
            n += self.prefixes.evict_tick(&ctx(Tier::Prefix), budget);
        }
        n
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

    /// Active connections counted on `ip`'s prefix (0 when untracked or without `prefixLimit`).
    pub fn prefix_active(&self, ip: IpAddr) -> u64 {
        let inst = self.installed.load();
        let Some(pl) = inst.policy.as_deref().and_then(|p| p.prefix_limit()) else {
            return 0;
        };
        let key = IpKey::prefix(ip, pl.ipv4_prefix_length, pl.ipv6_prefix_length);
        self.prefixes
            .inspect(key, |e| e.map_or(0, |e| u64::from(e.active)))
    }

    /// Handshakes in progress counted against `listenerLimit.maxPendingHandshakes`.
    pub fn listener_pending(&self) -> u64 {
        self.pending.load(Ordering::Acquire)
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

    /// Whether `ip`'s prefix has an entry in the prefix table.
    pub fn is_prefix_tracked(&self, ip: IpAddr) -> bool {
        let inst = self.installed.load();
        let Some(pl) = inst.policy.as_deref().and_then(|p| p.prefix_limit()) else {
            return false;
        };
        let key = IpKey::prefix(ip, pl.ipv4_prefix_length, pl.ipv6_prefix_length);
        self.prefixes.inspect(key, |e| e.is_some())
    }

    /// Clients admitted without an entry because the table was full of connected clients.
    pub fn untracked_admissions(&self) -> u64 {
        self.untracked.load(Ordering::Relaxed)
    }

    /// Connections whose prefix could not be tracked (prefix table full of connected prefixes).
    pub fn untracked_prefixes(&self) -> u64 {
        self.untracked_prefixes.load(Ordering::Relaxed)
    }

    /// Heap bytes held by the per-IP table (entries, index, free lists).
    pub fn table_memory_bytes(&self) -> usize {
        self.table.memory_bytes()
    }

    /// Heap bytes held by the prefix table.
    pub fn prefix_table_memory_bytes(&self) -> usize {
        self.prefixes.memory_bytes()
    }

    /// The shared dynamic blocks.
    pub fn dynamic(&self) -> &Arc<DynamicBlocks> {
        &self.dynamic
    }
}

/// `note` of a boxed prefix in `blockedIps({ detail: true })`.
pub const PREFIX_NOTE: &str = "prefix";

/// One table of the blocked view.
struct Side<'a> {
    table: &'a Table,
    tier: Tier,
    note: Option<&'static str>,
}

/// What an admission decision needs besides the entry.
struct Decision<'a> {
    p: &'a ProtectionPolicy,
    ip: IpAddr,
    epoch: u32,
    observe: bool,
    defended: bool,
    /// `clusterRateLimit.lease` when the decision takes a lease token.
    lease: Option<u64>,
}

/// Escalation memory in force (ns; 0 without escalation or penalty box).
fn memory_ns(p: &ProtectionPolicy, epoch: u32) -> u64 {
    match p.escalation() {
        Some(e) if epoch != 0 => e.memory_ns,
        _ => 0,
    }
}

/// Takes one pending handshake on the listener if fewer than `max` are counted.
fn take_pending(cell: &AtomicU64, max: u64) -> bool {
    cell.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
        (n < max).then_some(n + 1)
    })
    .is_ok()
}

/// Side effects on one entry to publish after the locks.
#[derive(Default)]
struct Effects {
    /// Side-set flags newly set: add the key to those sets.
    new_flags: u8,
    /// The box deadline moved to this (ns): tell the box listener.
    boxed_ns: Option<u64>,
}

/// What the prefix tier decided.
#[derive(Default)]
struct PrefixOutcome {
    reason: Option<BlockReason>,
    hold: Option<PrefixHold>,
    key: Option<IpKey>,
    effects: Effects,
}

/// What one admission decided, made under the entry's shard lock.
#[derive(Default)]
struct Outcome {
    /// Refusal reason (`None`: admitted).
    reason: Option<BlockReason>,
    /// An active connection was counted (admitted, or observe mode): make a guard.
    counted: bool,
    /// The client's side effects.
    client: Effects,
    /// The prefix's count, for the guard.
    prefix: Option<PrefixHold>,
    /// The prefix's key, when the prefix tier ran.
    prefix_key: Option<IpKey>,
    /// The prefix's side effects.
    prefix_effects: Effects,
    /// The client's cluster lease asks for a refill.
    refill: bool,
}

#[inline]
fn debit(rate: Option<Gcra>, sustained: Option<Gcra>, e: &mut Entry, now: u64) {
    if let Some(g) = rate {
        g.admit(&mut e.tat_rate, now);
    }
    if let Some(g) = sustained {
        g.admit(&mut e.tat_sustained, now);
    }
}

/// A limit is exhausted: list the entry as rate-limited (for the exhausting attempt) and box it
/// (or move its deadline) when the penalty box is on. A box that starts gets its escalation level
/// ([`penalty::next_level`], kept in the standing `s`) and clears a known-good mark (uncounted from
/// `marked`).
#[allow(clippy::too_many_arguments)]
fn exhausted(
    p: &ProtectionPolicy,
    e: &mut Entry,
    s: &mut Standing,
    epoch: u32,
    now: u64,
    fx: &mut Effects,
    list: bool,
    marked: Option<&AtomicU64>,
) {
    if list {
        set_flag(e, FLAG_RATE, fx);
    }
    let (Some(base), true) = (p.penalty_duration_ns(), epoch != 0) else {
        return;
    };
    let mut duration = base;
    if let Some(esc) = p.escalation() {
        if !penalty::is_boxed(e.penalty, epoch, now) {
            s.level = penalty::next_level(e.penalty, epoch, s.level, now, esc.memory_ns);
        }
        duration = penalty::escalated_ns(base, esc.factor, s.level, esc.max_duration_ns);
    }
    let deadline = penalty::deadline_for(now, duration);
    if let Some(ns) = penalty::extend(&mut e.penalty, epoch, deadline) {
        fx.boxed_ns = Some(ns);
        set_flag(e, FLAG_BOX, fx);
        if s.marks & MARK_KNOWN_GOOD != 0 {
            s.marks &= !MARK_KNOWN_GOOD;
            s.known_good_s = 0;
            if let Some(m) = marked {
                m.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
}

fn set_flag(e: &mut Entry, flag: u8, fx: &mut Effects) {
    if e.flags & flag == 0 {
        e.flags |= flag;
        fx.new_flags |= flag;
    }
}

fn refused(reason: BlockReason) -> Admission {
    Admission {
        verdict: Some(Verdict {
            reason,
            observed: false,
        }),
        guard: None,
        refill: false,
    }
}

fn observed(reason: BlockReason) -> Verdict {
    Verdict {
        reason,
        observed: true,
    }
}
