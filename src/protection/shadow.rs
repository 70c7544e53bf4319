//! Shadow limits (`protection.shadow`, docs/protection.md: Shadow rules): a second set of
//! connection limits — `rateLimit`, `sustained`, `maxConcurrentPerIp` — evaluated on live traffic
//! beside the enforced policy, reported (`'blocked'` with `shadow: true`, `shadowByReason`,
//! `rampart_shadow_refusals_total`) and never enforced.
//!
//! **State**: `maxConcurrentPerIp` reads the client's real open-connection count (the entry's,
//! under its lock): no state of its own. The two rates keep their GCRA TATs in a fixed
//! set-associative table beside the client table: [`SETS`] sets of [`WAYS`] ways, each way a
//! 64-bit fingerprint of the client key (SipHash, per-process random key) and two TATs, all
//! atomics — no lock, no allocation after the table is allocated at the first shadow decision
//! (8192 × 4 × 24 bytes = 768 KiB per listener, never more). A client not in its set takes an
//! empty way or one whose TATs are both at or before now (exactly a fresh client); when every
//! way still holds debt, the one with the least is taken (counted in [`ShadowTable::evicted`]),
//! and its client starts over with a full burst. Two clients racing for one way (different
//! shards, same set) may mix their TATs for that instant: a shadow count is a measurement, not a
//! decision.

use super::key::IpKey;
use super::policy::ShadowPolicy;
use super::BlockReason;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// Sets of the table.
pub const SETS: usize = 8192;
/// Ways per set.
pub const WAYS: usize = 4;

#[derive(Debug, Default)]
struct Way {
    /// Fingerprint of the client key (odd; 0: empty).
    fp: AtomicU64,
    /// TATs of `rateLimit` and `sustained` (CLOCK_MONOTONIC ns).
    tat: [AtomicU64; 2],
}

/// The shadow rate state of one engine.
#[derive(Debug, Default)]
pub(crate) struct ShadowTable {
    ways: OnceLock<Box<[Way]>>,
    hasher: RandomState,
    evicted: AtomicU64,
}

impl ShadowTable {
    /// Clients whose shadow state was taken over while it still held debt.
    #[cfg(test)]
    pub(crate) fn evicted(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }

    /// The verdict `p` would give client `key` at `now_ns` with `active` connections open, its
    /// rates debited when they admit: `rate_limited` (either rate) before `too_many_connections`,
    /// as the enforced check orders them; `None` when the shadow limits admit it.
    pub(crate) fn check(
        &self,
        key: IpKey,
        p: &ShadowPolicy,
        active: u32,
        now_ns: u64,
    ) -> Option<BlockReason> {
        let gs = [
            p.rate_limit.as_ref().map(|r| r.gcra),
            p.sustained.as_ref().map(|r| r.gcra),
        ];
        if gs.iter().any(Option::is_some) {
            let way = self.way(key, now_ns);
            let tats = [0, 1].map(|i| way.tat[i].load(Ordering::Relaxed));
            let conforms = (0..2).all(|i| gs[i].is_none_or(|g| g.conforms(tats[i], now_ns)));
            if !conforms {
                return Some(BlockReason::RateLimited);
            }
            for i in 0..2 {
                if let Some(g) = gs[i] {
                    way.tat[i].store(g.next_tat(tats[i], now_ns), Ordering::Relaxed);
                }
            }
        }
        let max = p.max_concurrent_per_ip;
        (max != 0 && u64::from(active) >= max).then_some(BlockReason::TooManyConnections)
    }

    /// The way of `key`, claiming one (see the module doc) when its set has none.
    fn way(&self, key: IpKey, now_ns: u64) -> &Way {
        let ways = self
            .ways
            .get_or_init(|| (0..SETS * WAYS).map(|_| Way::default()).collect());
        let h = self.hasher.hash_one(key);
        let fp = h | 1;
        let set = &ways[((h >> 40) as usize % SETS) * WAYS..][..WAYS];
        if let Some(w) = set.iter().find(|w| w.fp.load(Ordering::Relaxed) == fp) {
            return w;
        }
        let latest = |w: &Way| {
            w.tat[0]
                .load(Ordering::Relaxed)
                .max(w.tat[1].load(Ordering::Relaxed))
        };
        let w = set
            .iter()
            .find(|w| w.fp.load(Ordering::Relaxed) == 0 || latest(w) <= now_ns)
            .unwrap_or_else(|| {
                self.evicted.fetch_add(1, Ordering::Relaxed);
                set.iter().min_by_key(|w| latest(w)).unwrap_or(&set[0])
            });
        w.fp.store(fp, Ordering::Relaxed);
        w.tat[0].store(0, Ordering::Relaxed);
        w.tat[1].store(0, Ordering::Relaxed);
        w
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protection::policy::RateLimit;

    const S: u64 = crate::clock::NS_PER_SEC;

    fn key(n: u32) -> IpKey {
        IpKey::new(std::net::Ipv4Addr::from(0x0a00_0000 + n).into(), 64)
    }

    #[test]
    fn rates_then_concurrency_with_injected_time() {
        let t = ShadowTable::default();
        let p = ShadowPolicy {
            rate_limit: Some(RateLimit::new(1.0, S, 2)),
            sustained: None,
            max_concurrent_per_ip: 3,
        };
        let t0 = 100 * S;
        assert_eq!(t.check(key(1), &p, 0, t0), None);
        assert_eq!(t.check(key(1), &p, 1, t0), None);
        assert_eq!(t.check(key(1), &p, 2, t0), Some(BlockReason::RateLimited));
        // Another client has its own budget.
        assert_eq!(t.check(key(2), &p, 0, t0), None);
        // One more a second later; the concurrency limit reads the open count.
        assert_eq!(
            t.check(key(1), &p, 3, t0 + S),
            Some(BlockReason::TooManyConnections)
        );
        assert_eq!(
            t.check(key(1), &p, 0, t0 + S),
            Some(BlockReason::RateLimited)
        );
        assert_eq!(t.evicted(), 0);
    }

    #[test]
    fn the_table_is_bounded_and_evicts_the_least_debt() {
        let t = ShadowTable::default();
        let p = ShadowPolicy {
            rate_limit: Some(RateLimit::new(1.0, S, 1)),
            ..ShadowPolicy::default()
        };
        let n = (SETS * WAYS * 2) as u32;
        for i in 0..n {
            t.check(key(i), &p, 0, S);
        }
        assert_eq!(t.ways.get().map(|w| w.len()), Some(SETS * WAYS));
        assert!(t.evicted() >= u64::from(n) - (SETS * WAYS) as u64);
    }
}
