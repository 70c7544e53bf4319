//! GCRA (generic cell rate algorithm), the rate limiter behind `rateLimit` and `sustained`, the
//! route limits (`maxConnectionsPerSecond`) and the HTTP/2 guard's per-connection budgets.
//!
//! One limit is an emission interval `T` (ns between conforming arrivals: 1 s / connectionsPerSecond,
//! 60 s / connectionsPerMinute) and a tolerance `τ = T × (burst − 1)`. Its whole per-client state
//! is one theoretical arrival time `TAT` (CLOCK_MONOTONIC ns, 0 for a client never seen), one
//! 64-bit word. An arrival at `now` conforms iff `TAT ≤ now + τ`; a conforming arrival that is
//! admitted sets `TAT ← max(TAT, now) + T`. A refused arrival leaves `TAT` alone, so refusals never
//! consume.
//!
//! Why it is exact: the state is a single word, read and replaced in one atomic step (a
//! compare-and-swap of the value the decision was computed from, or a write under the lock that
//! owns the word), so concurrent decisions are linearisable — there is no separate refill step and
//! therefore no window where two racing arrivals both see a refilled bucket. A
//! fresh client (TAT ≤ now) admits exactly `burst` arrivals at one instant, then one per `T`.
//! `TAT ≤ now` is indistinguishable from a never-seen client, which is what lets the table evict
//! such entries without resetting anybody's limit (lazy projection: nothing is ever refilled on a
//! timer; the state is projected to `now` when read).
//!
//! Two forms of the same rule: [`Gcra::try_debit`] decides on an `AtomicU64` with one CAS (for a
//! limit that lives alone in a word, e.g. a per-route limit), and [`Gcra::admit`] on a plain `u64`
//! for the per-IP table, whose entries are only touched under their shard lock — there the lock
//! that serialises the lookup also makes checking both limits and debiting both one atomic step
//! (no rollback, no CAS retry), and the cost of a decision is a compare and a store on the cache
//! line the lookup already brought in.

use std::sync::atomic::{AtomicU64, Ordering};

pub use crate::clock::NS_PER_SEC;

/// One GCRA limit: emission interval and tolerance, both in ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gcra {
    interval_ns: u64,
    tolerance_ns: u64,
}

impl Gcra {
    /// A limit of one arrival per `interval_ns` (≥ 1) with `burst` (≥ 1) arrivals at once.
    pub fn new(interval_ns: u64, burst: u64) -> Gcra {
        let interval_ns = interval_ns.max(1);
        Gcra {
            interval_ns,
            tolerance_ns: interval_ns.saturating_mul(burst.max(1) - 1),
        }
    }

    /// `rate` arrivals per `period_ns` (e.g. 5 per 1e9 ns), burst `burst`. The interval is
    /// `period_ns / rate` rounded to the nearest ns, at least 1 ns, saturating.
    pub fn per_period(rate: f64, period_ns: u64, burst: u64) -> Gcra {
        let t = (period_ns as f64 / rate).round();
        let interval = if t.is_finite() && t < u64::MAX as f64 {
            t as u64
        } else {
            u64::MAX / 2
        };
        Gcra::new(interval, burst)
    }

    /// The same limit with its rate multiplied by `factor` (0 < factor ≤ 1), for defense mode: the
    /// emission interval becomes `T / factor` and the tolerance `τ` stays the same *time*, so a
    /// connection admitted under it costs `1 / factor` connections of the TAT the normal limit
    /// reads — one word serves both, and nothing is rescaled when defense turns on or off. A
    /// fresh client then gets `⌊factor × (burst − 1)⌋ + 1` at once, then `factor × rate`.
    pub fn tightened(&self, factor: f64) -> Gcra {
        let t = (self.interval_ns as f64 / factor).round();
        Gcra {
            interval_ns: if t.is_finite() && t < (u64::MAX / 2) as f64 {
                (t as u64).max(self.interval_ns)
            } else {
                u64::MAX / 2
            },
            tolerance_ns: self.tolerance_ns,
        }
    }

    /// Emission interval `T` in ns.
    pub fn interval_ns(&self) -> u64 {
        self.interval_ns
    }

    /// Tolerance `τ = T × (burst − 1)` in ns.
    pub fn tolerance_ns(&self) -> u64 {
        self.tolerance_ns
    }

    /// Whether an arrival at `now` conforms given `tat`.
    #[inline]
    pub fn conforms(&self, tat: u64, now: u64) -> bool {
        tat <= now.saturating_add(self.tolerance_ns)
    }

    /// The TAT after admitting an arrival at `now`.
    #[inline]
    pub fn next_tat(&self, tat: u64, now: u64) -> u64 {
        tat.max(now).saturating_add(self.interval_ns)
    }

    /// Ns from `now` until an arrival would conform again (0 if it conforms now).
    pub fn retry_after_ns(&self, tat: u64, now: u64) -> u64 {
        tat.saturating_sub(self.tolerance_ns).saturating_sub(now)
    }

    /// One decision on `cell` at `now`: admit and debit (one CAS; retried only when another
    /// thread changed the word meanwhile) or refuse without consuming. `Ok(previous TAT)` on
    /// admission, `Err(ns until an arrival would conform)` on refusal.
    #[inline]
    pub fn try_debit(&self, cell: &AtomicU64, now: u64) -> Result<u64, u64> {
        let mut tat = cell.load(Ordering::Acquire);
        loop {
            if !self.conforms(tat, now) {
                return Err(self.retry_after_ns(tat, now));
            }
            match cell.compare_exchange_weak(
                tat,
                self.next_tat(tat, now),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Ok(tat),
                Err(current) => tat = current,
            }
        }
    }

    /// One decision on a plain TAT (caller holds the lock that owns it): admit and debit, or
    /// refuse without consuming.
    #[inline]
    pub fn admit(&self, tat: &mut u64, now: u64) -> bool {
        if self.conforms(*tat, now) {
            *tat = self.next_tat(*tat, now);
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: u64 = 100_000_000; // 10/s

    #[test]
    fn burst_edge_is_exact() {
        let g = Gcra::new(T, 3);
        let cell = AtomicU64::new(0);
        let now = 5 * NS_PER_SEC;
        assert!(g.try_debit(&cell, now).is_ok());
        assert!(g.try_debit(&cell, now).is_ok());
        assert!(g.try_debit(&cell, now).is_ok());
        assert_eq!(g.try_debit(&cell, now), Err(T));
        assert_eq!(g.try_debit(&cell, now + T - 1), Err(1));
        assert!(g.try_debit(&cell, now + T).is_ok());
        assert!(g.try_debit(&cell, now + T).is_err());
        assert_eq!(g.retry_after_ns(cell.load(Ordering::Relaxed), now + T), T);
    }

    #[test]
    fn refusal_does_not_consume() {
        let g = Gcra::new(T, 1);
        let cell = AtomicU64::new(0);
        assert!(g.try_debit(&cell, 0).is_ok());
        let before = cell.load(Ordering::Relaxed);
        for _ in 0..10 {
            assert!(g.try_debit(&cell, 1).is_err());
        }
        assert_eq!(cell.load(Ordering::Relaxed), before);
    }

    #[test]
    fn plain_word_matches_atomic() {
        let g = Gcra::new(T, 2);
        let cell = AtomicU64::new(0);
        let mut tat = 0;
        for now in [0, 0, 0, T / 2, T, T, 3 * T] {
            assert_eq!(g.try_debit(&cell, now).is_ok(), g.admit(&mut tat, now));
            assert_eq!(cell.load(Ordering::Relaxed), tat);
        }
    }

    #[test]
    fn tightened_costs_one_over_factor_of_the_same_word() {
        // 10/s burst 9 (τ = 800 ms) at factor 0.25: 2.5/s, ⌊0.25 × 8⌋ + 1 = 3 at once.
        let g = Gcra::new(T, 9);
        let t = g.tightened(0.25);
        assert_eq!((t.interval_ns(), t.tolerance_ns()), (4 * T, 8 * T));
        let mut tat = 0;
        let now = 10 * NS_PER_SEC;
        for _ in 0..3 {
            assert!(t.admit(&mut tat, now));
        }
        assert!(!t.admit(&mut tat, now));
        // The normal limit reads the same word: 12 connections' worth used, so it waits until
        // 8 are left (400 ms) for the next.
        assert!(!g.conforms(tat, now + 4 * T - 1));
        assert!(g.conforms(tat, now + 4 * T));
        assert_eq!(g.tightened(1.0), g);
    }

    #[test]
    fn per_period_rounds_interval() {
        assert_eq!(
            Gcra::per_period(5.0, NS_PER_SEC, 5).interval_ns(),
            200_000_000
        );
        assert_eq!(
            Gcra::per_period(0.5, NS_PER_SEC, 1).interval_ns(),
            2 * NS_PER_SEC
        );
        assert_eq!(
            Gcra::per_period(30.0, 60 * NS_PER_SEC, 30).tolerance_ns(),
            29 * 2 * NS_PER_SEC
        );
    }
}
