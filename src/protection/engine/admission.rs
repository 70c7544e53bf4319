//! Admission at accept and after the ClientHello peek: the decision across the client, prefix and
//! listener tiers (see the parent module for the order), cluster leases, and the box events it
//! publishes.

use super::*;
use crate::protection::shadow::{ShadowClient, ShadowHold};

impl Engine {
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
    /// shard lock ([`crate::protection::lease`]): refused `cluster_rate_limited` (observed in observe mode)
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
                shadow: None,
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
            guard: out
                .counted
                .then(|| slot.conn_guard_with(out.prefix.take(), out.shadow_hold.take())),
            shadow: out.shadow.filter(|_| reason.is_none()),
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
            self.note_ban(|| crate::protection::BanNote {
                key,
                prefix,
                deadline_ns,
                level: fx.level,
                started: fx.started,
                reason: if prefix {
                    BlockReason::PrefixRateLimited.as_str()
                } else {
                    BlockReason::RateLimited.as_str()
                },
                origin: crate::protection::BanOrigin::Local,
            });
        }
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
        let sp = p.shadow();
        // The mark only matters to the budgets and to defense mode: without them the decision
        // does not read the standing (the sweep uncounts expired marks).
        let known_good = (d.defended
            || p.listener_limit().is_some()
            || sp.is_some_and(|sp| sp.listener_rate.is_some()))
            && {
                expire_mark(s, now, Some(&self.table.marked));
                s.known_good(now)
            };
        let shadow = sp.map(|sp| {
            let c = ShadowClient {
                ip: d.ip,
                key: IpKey::new(d.ip, p.ipv6_prefix_length()),
                active: e.active,
                known_good,
            };
            self.shadow.decide(sp, &c, now)
        });
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
        if let Some(sh) = shadow {
            out.shadow = sh.reason;
            if out.counted {
                out.shadow_hold = sh.prefix_way.and_then(|w| self.shadow.hold(w));
            }
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
        let key = pl.key(d.ip);
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

/// Side effects on one entry to publish after the locks.
#[derive(Default)]
struct Effects {
    /// Side-set flags newly set: add the key to those sets.
    new_flags: u8,
    /// The box deadline moved to this (ns): tell the box listener.
    boxed_ns: Option<u64>,
    /// The box started with this change (it was not running before).
    started: bool,
    /// The box's escalation level.
    level: u8,
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
    /// What `protection.shadow` would have refused (reported, never enforced).
    shadow: Option<BlockReason>,
    /// The connection's count on its shadow prefix (`shadow.prefixLimit.maxConcurrent`).
    shadow_hold: Option<ShadowHold>,
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
    let started = !penalty::is_boxed(e.penalty, epoch, now);
    if let Some(esc) = p.escalation() {
        if started {
            s.level = penalty::next_level(e.penalty, epoch, s.level, now, esc.memory_ns);
        }
        duration = penalty::escalated_ns(base, esc.factor, s.level, esc.max_duration_ns);
    }
    let deadline = penalty::deadline_for(now, duration);
    if let Some(ns) = penalty::extend(&mut e.penalty, epoch, deadline) {
        fx.boxed_ns = Some(ns);
        fx.started = started;
        fx.level = s.level;
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
        shadow: None,
        refill: false,
    }
}

fn observed(reason: BlockReason) -> Verdict {
    Verdict {
        reason,
        observed: true,
    }
}
