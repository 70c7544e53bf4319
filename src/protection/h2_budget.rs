//! Per-client HTTP/2 budgets over all of a client's connections (docs/protection.md: HTTP/2 guard,
//! `clientFactor`): the guard's stream, reset and control-frame rates, counted per connection by
//! the guard itself, are counted here per client too, so opening more connections buys no more
//! budget. A client's rate is the per-connection rate × `http2.clientFactor` (default 2), its
//! burst the per-connection burst × the factor (GCRA, [`crate::gcra`]).
//!
//! **Where the state lives, and why**: a side table beside the per-client table, like
//! `offenders`. Not in the table's entries: the guard runs on listeners without protection too
//! (where admission never touches the table), its entries are the admission path's cache line
//! (a field there would grow every tracked client for what only h2 clients use), and their
//! spare bytes are taken by other limits.
//!
//! **Shape**: a set-associative cache, [`SETS`] sets of [`WAYS`] ways, each set behind its own
//! mutex (held for a scan of 8 words and one GCRA step; h2 events are per stream, not per
//! byte, and two clients share a lock only when they hash to the same set). A way is a 64-bit
//! fingerprint of the client key (SipHash with a per-process random key, so the set a client
//! lands in cannot be chosen from outside) and the three GCRA TATs: 32 bytes. The table is
//! allocated once, at the first HTTP/2 event of the listener: 4096 × 8 ways × 32 bytes ≈ 1 MiB,
//! never more; no allocation after that.
//!
//! **Eviction** (memory bounded under an IP-diverse flood): a client not in its set takes a way
//! that is empty or whose three TATs are all at or before now — such a way is exactly a fresh
//! client (GCRA's lazy projection), so reusing it forgets nothing. When every way of the set
//! still holds debt, the way with the least (the earliest latest TAT) is evicted and counted
//! ([`Engine::h2_budget_evictions`]): its client gets a fresh budget. Debt lasts at most the
//! burst's tolerance (2 s for resets at the defaults), so that takes more than 32768 clients
//! spending their HTTP/2 budgets at the same moment; each of them still has its per-connection
//! limits, and a violation still boxes it.

use super::key::IpKey;
use crate::gcra::{Gcra, NS_PER_SEC};
use crate::http2::{Budget, ClientBudget, H2GuardConfig};
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::sync::OnceLock;

/// Sets of the table.
pub(crate) const SETS: usize = 4096;
/// Ways per set.
pub(crate) const WAYS: usize = 8;

#[derive(Debug, Default, Clone, Copy)]
struct Way {
    /// Fingerprint of the client key (odd; 0: empty).
    fp: u64,
    /// TATs (CLOCK_MONOTONIC ns) indexed by [`Budget`].
    tat: [u64; 3],
}

#[derive(Debug, Default)]
struct Set {
    ways: [Way; WAYS],
}

impl Set {
    /// The way of `fp`, claiming one (see the module doc) when it has none.
    fn way(&mut self, fp: u64, now_ns: u64, evicted: &AtomicU64) -> &mut Way {
        let i = match self.ways.iter().position(|w| w.fp == fp) {
            Some(i) => i,
            None => {
                let latest = |w: &Way| w.tat.iter().copied().max().unwrap_or(0);
                let free = self
                    .ways
                    .iter()
                    .position(|w| w.fp == 0 || latest(w) <= now_ns);
                let i = free.unwrap_or_else(|| {
                    evicted.fetch_add(1, Ordering::Relaxed);
                    (0..WAYS)
                        .min_by_key(|&i| latest(&self.ways[i]))
                        .unwrap_or(0)
                });
                self.ways[i] = Way { fp, tat: [0; 3] };
                i
            }
        };
        &mut self.ways[i]
    }
}

/// The per-client HTTP/2 budgets of one engine.
#[derive(Debug, Default)]
pub(crate) struct H2Budgets {
    sets: OnceLock<Box<[Mutex<Set>]>>,
    hasher: RandomState,
    evicted: AtomicU64,
}

impl H2Budgets {
    /// Clients evicted with debt left (`Engine::h2_budget_evictions`).
    pub(crate) fn evictions(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }

    /// The sets (allocated at the first use).
    fn sets(&self) -> &[Mutex<Set>] {
        self.sets
            .get_or_init(|| (0..SETS).map(|_| Mutex::new(Set::default())).collect())
    }

    /// How many sets are allocated (0 before the first use, then always [`SETS`]).
    #[cfg(test)]
    pub(crate) fn allocated_sets(&self) -> usize {
        self.sets.get().map_or(0, |s| s.len())
    }

    /// The budget handle of client `key` (`None`: an allowlisted client, never counted) under
    /// `limits` ([`client_limits`]).
    pub(crate) fn client(&self, key: Option<IpKey>, limits: [Gcra; 3]) -> H2ClientBudget<'_> {
        H2ClientBudget {
            budgets: self,
            slot: key.map(|k| self.slot(k)),
            limits,
        }
    }

    /// `(fingerprint, set)` of `key`.
    fn slot(&self, key: IpKey) -> (u64, usize) {
        let h = self.hasher.hash_one(key);
        (h | 1, (h >> 40) as usize % SETS)
    }
}

/// One connection's handle on its client's budgets ([`Engine::h2_client_budget`]): the client's
/// place in the table and the three per-client limits in force when the connection began.
#[derive(Debug, Clone, Copy)]
pub struct H2ClientBudget<'a> {
    budgets: &'a H2Budgets,
    /// `None`: an allowlisted client, never counted.
    slot: Option<(u64, usize)>,
    limits: [Gcra; 3],
}

impl ClientBudget for H2ClientBudget<'_> {
    fn admit(&self, kind: Budget, now_ns: u64) -> bool {
        let Some((fp, set)) = self.slot else {
            return true;
        };
        let g = self.limits[kind as usize];
        let mut s = self.budgets.sets()[set]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let w = s.way(fp, now_ns, &self.budgets.evicted);
        let tat = &mut w.tat[kind as usize];
        if !g.conforms(*tat, now_ns) {
            return false;
        }
        *tat = g.next_tat(*tat, now_ns);
        true
    }

    fn conforms(&self, kind: Budget, now_ns: u64) -> bool {
        let Some((fp, set)) = self.slot else {
            return true;
        };
        let s = self.budgets.sets()[set]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        s.ways
            .iter()
            .find(|w| w.fp == fp)
            .is_none_or(|w| self.limits[kind as usize].conforms(w.tat[kind as usize], now_ns))
    }
}

/// The per-client limits for the per-connection `guard` limits × `factor`, indexed by
/// [`Budget`]: rate × factor, burst (the connection's: `maxConcurrentStreams` for streams,
/// 2 × rate for resets and control frames) × factor, rounded up.
pub fn client_limits(guard: &H2GuardConfig, factor: f64) -> [Gcra; 3] {
    let burst = |b: f64| (b * factor).ceil().max(1.0) as u64;
    let limit = |rate: f64, b: f64| Gcra::per_period(rate * factor, NS_PER_SEC, burst(b));
    let twice = |rate: f64| (2.0 * rate).ceil().max(1.0);
    [
        limit(
            guard.max_streams_per_second,
            f64::from(guard.max_concurrent_streams.max(1)),
        ),
        limit(
            guard.max_resets_per_second,
            twice(guard.max_resets_per_second),
        ),
        limit(
            guard.max_control_frames_per_second,
            twice(guard.max_control_frames_per_second),
        ),
    ]
}
