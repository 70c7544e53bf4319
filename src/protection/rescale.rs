//! Carrying GCRA usage across policy swaps: rate-limit generations and lazy TAT rescaling.
//!
//! A TAT is usage written in time: at `t` a client has used `u = max(0, TAT − t) / T` connections
//! of a limit with emission interval `T` (a fresh client 0, one that just took a whole burst
//! `burst`), and conforms iff `u ≤ burst − 1` (`TAT − τ ≤ t`). When a swap changes `T`, keeping
//! the TAT would carry the usage over in *time*: raising 0.1/s to 1000/s would still refuse a
//! client for up to 10 s, tightening 100/s to 1/s would leave a client that used 60 connections
//! with a nearly full burst. What carries over is the usage, in connections: at the swap instant
//! `s`, each limit's TAT becomes `s + u × T_new = s + (TAT − s) × T_new / T_old` (a TAT ≤ `s` is a
//! fresh client and stays as it is). The new tolerance then applies to it directly: raising a
//! limit readmits at once a client whose usage is within the new burst, lowering one refuses at
//! once a client that has used the new burst or more, until its usage drains at the new rate.
//! Usage is never capped: a client that used 60 where the new burst is 10 waits until it is back
//! under 10. The new limit is in force from `s` on, so the usage drains at the new rate from `s`,
//! however long after the swap the client comes back. Products are rounded up to the ns and
//! saturate.
//!
//! The prefix tier's `prefixLimit` is a third limit with its own step; its TAT lives in the
//! prefix table's entries (`tat_rate` there), which carry the same generation tag and are
//! rescaled with [`Tier::Prefix`]. A swap that changes only one limit still opens a generation for
//! every entry of both tables; the others' step is *keep*.
//!
//! Per limit, a swap is one of three steps: *keep* (same interval — a burst-only change needs no
//! rescaling, the TAT is already in the right unit — or the limit off before and after), *reset*
//! (the limit is switched on — everybody starts fresh — or off — its state is dropped), *scale*
//! (the interval changed). A swap whose two steps are both *keep* leaves everything as it is;
//! any other opens a new *generation* and is remembered, with its instant `s` (swap instants never
//! go backwards), in a ring of the last `WINDOW` (32) swaps.
//!
//! Lazily, never by walking the table at swap time: each entry carries, in 5 bits of its flag
//! byte, the generation its TATs are written in, modulo 32. The first time an entry is touched
//! (or passed by the background eviction sweep) under a newer generation, the steps of every swap
//! it missed are applied in order, each anchored at its own instant: exactly what rescaling
//! every entry eagerly at each swap would have produced, whatever the number of swaps between.
//! A decision on an entry of the current generation costs one byte compare; the rescaling path
//! runs at most once per entry and generation, with at most 31 steps.
//!
//! Staleness rule: an entry that missed 32 or more generations is read as belonging to the
//! latest generation with its 5-bit tag: only the steps after that one are applied, the older
//! ones act as *keep* (for them the TAT carries over in time, as if the interval had not
//! changed). Since the eviction sweep normalises every entry it passes, this
//! needs 32 limit-changing swaps in less than one sweep of the table (about 35 s at a million
//! clients with the server's budget) and a client that did not connect meanwhile.
//!
//! Consistency: an entry is rescaled under its shard lock, against the generation loaded while
//! that lock is held. The last writer of the entry loaded its generation before releasing the
//! same lock, so the loaded generation is never older than the entry's; a decision made on an
//! older snapshot while a swap is published is redone with the loaded generation's limits
//! (see `Engine::admit`). Penalty-box deadlines are absolute times and are not touched here.

use super::entry::{Entry, TAG_BITS};
use super::policy::ProtectionPolicy;
use crate::gcra::Gcra;
use std::sync::Arc;
/// Number of past swaps remembered (and of distinct entry tags).
pub(crate) const WINDOW: usize = 1 << TAG_BITS;

/// What one swap does to one limit's TAT.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Step {
    /// Same interval, or off before and after.
    #[default]
    Keep,
    /// Switched on or off: back to a fresh client.
    Reset,
    /// Interval `from_ns` → `to_ns`: usage kept in connections.
    Scale { from_ns: u64, to_ns: u64 },
}

impl Step {
    fn between(old: Option<Gcra>, new: Option<Gcra>) -> Step {
        match (old, new) {
            (None, None) => Step::Keep,
            (Some(o), Some(n)) if o.interval_ns() == n.interval_ns() => Step::Keep,
            (Some(o), Some(n)) => Step::Scale {
                from_ns: o.interval_ns(),
                to_ns: n.interval_ns(),
            },
            _ => Step::Reset,
        }
    }

    /// Applies the step taken at `at_ns` to `tat`.
    fn apply(self, tat: &mut u64, at_ns: u64) {
        match self {
            Step::Keep => {}
            Step::Reset => *tat = 0,
            Step::Scale { from_ns, to_ns } => {
                if *tat > at_ns {
                    let ahead = u128::from(*tat - at_ns) * u128::from(to_ns);
                    let ahead = u64::try_from(ahead.div_ceil(u128::from(from_ns)));
                    *tat = at_ns.saturating_add(ahead.unwrap_or(u64::MAX));
                }
            }
        }
    }
}

/// Carries one free-standing TAT (the listener budget's word) over a swap at `at_ns` from limit
/// `old` to `new`, with the same rule as the table's entries, eagerly.
pub(crate) fn carry_over(old: Option<Gcra>, new: Option<Gcra>, tat: &mut u64, at_ns: u64) {
    Step::between(old, new).apply(tat, at_ns);
}

/// Which table an entry belongs to: which limits its TATs are written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tier {
    /// Per-client entry: `tat_rate` is `rateLimit`, `tat_sustained` is `sustained`.
    Client,
    /// Prefix entry: `tat_rate` is `prefixLimit`.
    Prefix,
}

/// One remembered swap: its instant (CLOCK_MONOTONIC ns) and its step for each limit.
#[derive(Debug, Clone, Copy, Default)]
struct Swap {
    at_ns: u64,
    rate: Step,
    sustained: Step,
    prefix: Step,
}

/// The policy in force together with its rate-limit generation: what an engine publishes with
/// one atomic pointer store, so a decision always sees limits and generation that belong together.
#[derive(Debug)]
pub(crate) struct Installed {
    /// The policy (`None`: no protection on the listener).
    pub policy: Option<Arc<ProtectionPolicy>>,
    /// `rateLimit` in force (the TATs of the current generation are in its interval).
    pub rate: Option<Gcra>,
    /// `sustained` in force.
    pub sustained: Option<Gcra>,
    /// `prefixLimit`'s rate in force (the prefix table's TATs).
    pub prefix: Option<Gcra>,
    /// `rate`, `sustained` and `prefix` × `defense.factor` (see [`Gcra::tightened`]): what a
    /// client that is not known-good is debited while defense mode is on.
    pub tight: [Option<Gcra>; 3],
    tag: u8,
    generation: u64,
    /// `swaps[g % WINDOW]` opened generation `g` (for the last `WINDOW` generations).
    swaps: Box<[Swap; WINDOW]>,
}

impl Installed {
    /// No policy, generation 0.
    pub(crate) fn initial() -> Installed {
        Installed {
            policy: None,
            rate: None,
            sustained: None,
            prefix: None,
            tight: [None; 3],
            tag: 0,
            generation: 0,
            swaps: Box::new([Swap::default(); WINDOW]),
        }
    }

    /// What installing `policy` at `now_ns` after `self` publishes: the same generation when
    /// neither limit changed interval or was switched on or off, else the next one.
    pub(crate) fn next(&self, policy: Option<Arc<ProtectionPolicy>>, now_ns: u64) -> Installed {
        let rate = policy
            .as_deref()
            .and_then(|p| p.rate_limit())
            .map(|r| r.gcra);
        let sustained = policy
            .as_deref()
            .and_then(|p| p.sustained())
            .map(|r| r.gcra);
        let prefix = policy
            .as_deref()
            .and_then(|p| p.prefix_limit())
            .and_then(|l| l.rate)
            .map(|r| r.gcra);
        let factor = policy.as_deref().map_or(1.0, |p| p.defense().factor);
        let tight = [rate, sustained, prefix].map(|g| g.map(|g| g.tightened(factor)));
        let swap = Swap {
            at_ns: now_ns.max(self.swaps[slot(self.generation)].at_ns),
            rate: Step::between(self.rate, rate),
            sustained: Step::between(self.sustained, sustained),
            prefix: Step::between(self.prefix, prefix),
        };
        let mut next = Installed {
            policy,
            rate,
            sustained,
            prefix,
            tight,
            tag: self.tag,
            generation: self.generation,
            swaps: self.swaps.clone(),
        };
        if swap.rate != Step::Keep || swap.sustained != Step::Keep || swap.prefix != Step::Keep {
            next.generation += 1;
            next.tag = slot(next.generation) as u8;
            next.swaps[slot(next.generation)] = swap;
        }
        next
    }

    /// The generation's tag, as entries carry it (`generation % 32`).
    #[inline]
    pub(crate) fn tag(&self) -> u8 {
        self.tag
    }

    /// Brings `e`'s TATs from its generation to this one (no-op when already there). Call with
    /// the entry's shard lock held and `self` loaded while holding it.
    #[cold]
    pub(crate) fn rescale(&self, e: &mut Entry, tier: Tier) {
        let missed = u64::from(self.tag.wrapping_sub(e.tag()) & (WINDOW as u8 - 1));
        let missed = missed.min(self.generation);
        for g in self.generation - missed + 1..=self.generation {
            let s = &self.swaps[slot(g)];
            match tier {
                Tier::Client => {
                    s.rate.apply(&mut e.tat_rate, s.at_ns);
                    s.sustained.apply(&mut e.tat_sustained, s.at_ns);
                }
                Tier::Prefix => s.prefix.apply(&mut e.tat_rate, s.at_ns),
            }
        }
        e.set_tag(self.tag);
    }
}

#[inline]
fn slot(generation: u64) -> usize {
    (generation % WINDOW as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gcra::NS_PER_SEC;
    use crate::protection::policy::RateLimit;

    const S: u64 = NS_PER_SEC;

    fn limits(
        rate: Option<(u64, u64)>,
        sustained: Option<(u64, u64)>,
        require_sni: bool,
    ) -> Option<Arc<ProtectionPolicy>> {
        Some(Arc::new(ProtectionPolicy {
            rate_limit: rate.map(|(r, b)| RateLimit::per_second(r as f64, b)),
            sustained: sustained.map(|(r, b)| RateLimit::per_minute(r as f64, b)),
            require_sni,
            ..ProtectionPolicy::default()
        }))
    }

    fn policy(per_sec: Option<u64>, per_min: Option<u64>) -> Option<Arc<ProtectionPolicy>> {
        limits(per_sec.map(|r| (r, 1)), per_min.map(|r| (r, 1)), false)
    }

    fn entry(inst: &Installed, tat_rate: u64, tat_sustained: u64) -> Entry {
        let mut e = Entry::default();
        e.tat_rate = tat_rate;
        e.tat_sustained = tat_sustained;
        e.set_tag(inst.tag());
        e
    }

    #[test]
    fn scale_keeps_usage_in_connections_anchored_at_the_swap() {
        let g1 = Installed::initial().next(policy(Some(10), None), 0);
        let mut e = entry(&g1, 100 * S + 600_000_000, 0); // 6 used at 100 s
        let g2 = g1.next(policy(Some(1), None), 100 * S);
        assert_eq!(g2.generation, g1.generation + 1);
        g2.rescale(&mut e, Tier::Client);
        assert_eq!(e.tat_rate, 106 * S);
        assert_eq!(e.tag(), g2.tag());
        // Idempotent once normalised.
        g2.rescale(&mut e, Tier::Client);
        assert_eq!(e.tat_rate, 106 * S);
        // A fresh TAT (≤ the swap instant) is untouched.
        let mut idle = entry(&g1, 99 * S, 0);
        g2.rescale(&mut idle, Tier::Client);
        assert_eq!(idle.tat_rate, 99 * S);
    }

    #[test]
    fn burst_only_and_unrelated_changes_keep_the_generation() {
        let g1 = Installed::initial().next(policy(Some(10), Some(60)), 0);
        let g2 = g1.next(limits(Some((10, 3)), Some((60, 9)), true), 5 * S);
        assert_eq!(g2.generation, g1.generation);
        // `sustained` without a burst: the burst defaults to the rate.
        let g3 = g2.next(limits(Some((10, 3)), Some((30, 30)), true), 6 * S);
        assert_eq!(g3.generation, g1.generation + 1);
    }

    #[test]
    fn missed_swaps_compose_in_order_and_on_off_resets() {
        let g1 = Installed::initial().next(policy(Some(10), Some(60)), 0);
        // rate: 5 used at 10 s (TAT 10.5 s); sustained: 3 used (TAT 13 s).
        let mut e = entry(&g1, 10 * S + 500_000_000, 13 * S);
        // 10/s → 20/s at 10 s: 5 used = 250 ms; sustained off.
        let g2 = g1.next(policy(Some(20), None), 10 * S);
        // 20/s → 1/s at 10.1 s: 150 ms left at 50 ms = 3 used → 3 s; sustained back on: fresh.
        let g3 = g2.next(policy(Some(1), Some(60)), 10 * S + 100_000_000);
        g3.rescale(&mut e, Tier::Client);
        assert_eq!(e.tat_rate, 10 * S + 100_000_000 + 3 * S);
        assert_eq!(e.tat_sustained, 0);
    }

    #[test]
    fn tags_wrap_and_entries_older_than_the_window_read_as_the_latest_same_tag() {
        let mut g = Installed::initial().next(policy(Some(1), None), 0);
        let mut e = entry(&g, 10 * S, 0);
        let first_tag = g.tag();
        for i in 0..WINDOW as u64 {
            let rate = if i.is_multiple_of(2) { 2 } else { 1 };
            g = g.next(policy(Some(rate), None), S);
        }
        // 32 swaps later the tag has come round: the entry reads as current (staleness rule).
        assert_eq!(g.tag(), first_tag);
        g.rescale(&mut e, Tier::Client);
        assert_eq!(e.tat_rate, 10 * S);
        // 31 swaps later, 16 halvings and 15 doublings of the interval: 9 s ahead → 4.5 s.
        let mut g = Installed::initial().next(policy(Some(1), None), 0);
        let mut e = entry(&g, 10 * S, 0);
        for i in 0..WINDOW as u64 - 1 {
            let rate = if i.is_multiple_of(2) { 2 } else { 1 };
            g = g.next(policy(Some(rate), None), S);
        }
        g.rescale(&mut e, Tier::Client);
        assert_eq!(e.tat_rate, S + 4_500_000_000);
    }

    #[test]
    fn products_round_up_and_saturate() {
        let mut tat = 10;
        Step::Scale {
            from_ns: 3,
            to_ns: 1,
        }
        .apply(&mut tat, 0);
        assert_eq!(tat, 4);
        let mut tat = u64::MAX - 1;
        Step::Scale {
            from_ns: 1,
            to_ns: u64::MAX,
        }
        .apply(&mut tat, 5);
        assert_eq!(tat, u64::MAX);
    }
}
