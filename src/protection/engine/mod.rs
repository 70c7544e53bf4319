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

mod admission;
mod boxes;
pub(crate) mod explain;
mod h2_budget;
mod known_good;
mod listing;
mod pending;
mod requests;

use super::blocked::{BlockedEntry, BlockedView};
use super::defense::{Buckets, DefenseChange, DefenseState};
use super::dynamic::DynamicBlocks;
use super::entry::{Entry, Standing, FLAG_BOX, FLAG_CONC, FLAG_RATE, MARK_KNOWN_GOOD, MARK_NEW};
use super::h2_budget::H2Budgets;
pub use super::h2_budget::{client_limits, H2ClientBudget};
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

/// Which budget a request exceeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestScope {
    /// The client's own (`requestsPerSecond`, `burst`).
    Client,
    /// Its prefix's (`prefixRequestsPerSecond`, `prefixBurst`).
    Prefix,
}

/// A request over `requestLimit` ([`Engine::request`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RequestLimited {
    /// Ns from the decision until a request of this client would conform again.
    pub retry_after_ns: u64,
    /// The budget that refused it.
    pub scope: RequestScope,
    /// That budget's rate, requests per second.
    pub limit: f64,
    /// That budget's burst, requests.
    pub burst: u64,
    /// Observe mode: report it, but let the request go on.
    pub observed: bool,
}

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
    /// What `protection.shadow` would have refused this connection as (reported, never
    /// enforced); `None` without a shadow policy, when it admits, or when the enforced policy
    /// refused the connection already.
    pub shadow: Option<BlockReason>,
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
            shadow: None,
            refill: false,
        }
    }
}

/// Called with the key, its new deadline (CLOCK_MONOTONIC ns) and whether the key is a prefix of
/// the prefix tier, whenever a client or a prefix is boxed or its deadline moves forward (XDP
/// ban-map sync). Runs on the admission path: keep it cheap (e.g. push to a channel).
pub type BoxListener = dyn Fn(IpKey, u64, bool) + Send + Sync;

struct ListenerCell(Arc<BoxListener>);

struct BanSinkCell(Arc<crate::protection::BanSink>);

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
    /// Told of every box start and extension (`'ban'` events).
    ban_sink: ArcSwapOption<BanSinkCell>,
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
    /// A route this listener serves is overloaded ([`Engine::set_upstream_overloaded`]).
    upstream_overloaded: AtomicBool,
    /// Per-client HTTP/2 budgets (`http2.clientFactor`).
    h2_budgets: H2Budgets,
    /// Shadow state (`protection.shadow`): client and prefix tables, the listener TAT.
    shadow: crate::protection::shadow::Shadow,
}

/// `note` of a box earned by HTTP/2 guard violations in `blockedIps({ detail: true })`.
pub const H2_BOX_NOTE: &str = "boxed by protection.http2.boxAfterViolations";

/// `note` of a boxed prefix in `blockedIps({ detail: true })`.
pub const PREFIX_NOTE: &str = "prefix";

/// The longest wait, in ms rounded up, until every limit of `gs` (each a GCRA and its TAT)
/// admits a connection at `now_ns`; `None` when they all admit now.
fn retry_after_ms(gs: [Option<(Gcra, u64)>; 2], now_ns: u64) -> Option<u64> {
    let wait = gs
        .into_iter()
        .flatten()
        .map(|(g, tat)| g.retry_after_ns(tat, now_ns))
        .max()
        .unwrap_or(0);
    (wait > 0).then(|| ns_to_ms_ceil(wait))
}

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
            ban_sink: ArcSwapOption::empty(),
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
            upstream_overloaded: AtomicBool::new(false),
            h2_budgets: H2Budgets::default(),
            shadow: Default::default(),
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

    /// Sets (or clears) the ban sink: told of every box that starts or moves forward, with its
    /// origin, level and reason (`'ban'` events).
    pub fn set_ban_sink(&self, f: Option<Arc<crate::protection::BanSink>>) {
        self.ban_sink.store(f.map(|f| Arc::new(BanSinkCell(f))));
    }

    /// Tells the ban sink (if any) of `note`.
    pub(super) fn note_ban(&self, note: impl FnOnce() -> crate::protection::BanNote) {
        if let Some(s) = self.ban_sink.load().as_ref() {
            (s.0)(&note());
        }
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
        let overloaded = self.upstream_overloaded.load(Ordering::Relaxed);
        let change = st.tick(&cfg, now_ns, overloaded, |sec| self.buckets.count(sec));
        self.defended.store(st.active(), Ordering::Release);
        change
    }

    /// Whether a route's upstream is overloaded (`routes[].concurrency`): with `defense.mode:
    /// 'auto'`, defense mode is on while it is, whatever the connection rate (the server sets it
    /// every ~100 ms, before [`Engine::defense_tick`]).
    pub fn set_upstream_overloaded(&self, on: bool) {
        self.upstream_overloaded.store(on, Ordering::Relaxed);
    }

    /// Whether defense mode is on.
    pub fn defense_active(&self) -> bool {
        self.defended.load(Ordering::Acquire)
    }
}

/// Escalation memory in force (ns; 0 without escalation or penalty box).
fn memory_ns(p: &ProtectionPolicy, epoch: u32) -> u64 {
    match p.escalation() {
        Some(e) if epoch != 0 => e.memory_ns,
        _ => 0,
    }
}
