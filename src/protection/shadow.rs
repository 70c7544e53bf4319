//! Shadow rules (`protection.shadow`, docs/protection.md: Shadow rules): a second set of limits
//! and lists — `blocklist`, `rateLimit`, `sustained`, `maxConcurrentPerIp`, `prefixLimit`,
//! `listenerLimit.connectionsPerSecond` — evaluated on live traffic beside the enforced policy,
//! reported (`'blocked'` with `shadow: true`, `shadowByReason`, `rampart_shadow_refusals_total`)
//! and never enforced.
//!
//! **Order** (the enforced one): `blocklist` (`cidr_blocked`), the client's rates
//! (`rate_limited`), `maxConcurrentPerIp` (`too_many_connections`), the prefix's rate
//! (`prefix_rate_limited`) and open connections (`prefix_too_many_connections`), the listener
//! rate (`listener_overloaded`, not for known-good clients). The first that refuses is the shadow
//! verdict; only an attempt the whole shadow policy admits is debited from its rates, as the
//! enforced policy debits only what it admits.
//!
//! **State**: `maxConcurrentPerIp` reads the client's real open-connection count (the entry's,
//! under its lock). The client rates and the prefix tier keep their state in two fixed
//! set-associative tables ([`ShadowTable`]): [`SETS`] sets of [`WAYS`] ways, each way a 64-bit
//! fingerprint of the key (SipHash, per-process random key), two TATs and an open-connection
//! count, all atomics — no lock, no allocation after a table is allocated at its first shadow
//! decision (8192 × 4 × 32 bytes = 1 MiB per table and listener, never more). The listener rate
//! is one TAT word. A key not in its set takes an empty way or one whose TATs are at or before now
//! and that holds no open connection (exactly a fresh key); when every way still holds debt, the
//! one with the least (and no open connection) is taken and its key starts over with a full
//! burst. A prefix whose set is all held by open connections is not evaluated for that attempt.
//! Two keys racing for one way (different shards, same set) may mix their state for that
//! instant: a shadow count is a measurement, not a decision.
//!
//! **Open connections on a prefix**: an admitted connection whose prefix has a shadow way holds
//! it with a [`ShadowHold`] inside its `ConnGuard` (one `Arc` clone, no allocation), released when
//! the connection closes. Like the shadow `maxConcurrentPerIp`, it counts every connection really
//! open, including those the shadow would have refused.

use super::key::IpKey;
use super::policy::ShadowPolicy;
use super::BlockReason;
use crate::gcra::Gcra;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// Sets of a table.
pub(crate) const SETS: usize = 8192;
/// Ways per set.
pub(crate) const WAYS: usize = 4;

#[derive(Debug, Default)]
struct Way {
    /// Fingerprint of the key (odd; 0: empty).
    fp: AtomicU64,
    /// TATs: `rateLimit` and `sustained` (client table), the prefix rate (prefix table)
    /// (CLOCK_MONOTONIC ns).
    tat: [AtomicU64; 2],
    /// Open connections holding the way (prefix table).
    active: AtomicU64,
}

impl Way {
    fn latest(&self) -> u64 {
        self.tat[0]
            .load(Ordering::Relaxed)
            .max(self.tat[1].load(Ordering::Relaxed))
    }
}

/// One fixed table of shadow state (see the module doc).
#[derive(Debug, Default)]
pub(crate) struct ShadowTable {
    ways: OnceLock<Box<[Way]>>,
    hasher: RandomState,
    /// Keys whose state was taken over while it still held debt (tests only: no metric
    /// reports it).
    #[cfg(test)]
    evicted: AtomicU64,
}

impl ShadowTable {
    /// Keys whose shadow state was taken over while it still held debt.
    #[cfg(test)]
    pub(crate) fn evicted(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }

    fn fp_and_set(&self, key: IpKey) -> (u64, usize) {
        let h = self.hasher.hash_one(key);
        (h | 1, ((h >> 40) as usize % SETS) * WAYS)
    }

    /// The way of `key` (its index too), claiming one (see the module doc) when its set has
    /// none; `None` when every way of the set holds open connections.
    fn way(&self, key: IpKey, now_ns: u64) -> Option<(usize, &Way)> {
        let ways = self
            .ways
            .get_or_init(|| (0..SETS * WAYS).map(|_| Way::default()).collect());
        let (fp, first) = self.fp_and_set(key);
        let set = &ways[first..first + WAYS];
        if let Some(i) = set.iter().position(|w| w.fp.load(Ordering::Relaxed) == fp) {
            return Some((first + i, &set[i]));
        }
        let free = |w: &Way| w.active.load(Ordering::Relaxed) == 0;
        let i = match set
            .iter()
            .position(|w| w.fp.load(Ordering::Relaxed) == 0 || (free(w) && w.latest() <= now_ns))
        {
            Some(i) => i,
            None => {
                let (i, _) = set
                    .iter()
                    .enumerate()
                    .filter(|(_, w)| free(w))
                    .min_by_key(|(_, w)| w.latest())?;
                #[cfg(test)]
                self.evicted.fetch_add(1, Ordering::Relaxed);
                i
            }
        };
        let w = &set[i];
        w.fp.store(fp, Ordering::Relaxed);
        w.tat[0].store(0, Ordering::Relaxed);
        w.tat[1].store(0, Ordering::Relaxed);
        Some((first + i, w))
    }

    /// The way `key` holds, if any (read-only: for `explain`).
    fn peek(&self, key: IpKey) -> Option<&Way> {
        let ways = self.ways.get()?;
        let (fp, first) = self.fp_and_set(key);
        ways[first..first + WAYS]
            .iter()
            .find(|w| w.fp.load(Ordering::Relaxed) == fp)
    }
}

/// The client a shadow decision is about.
pub(crate) struct ShadowClient {
    /// Its address (canonical).
    pub ip: IpAddr,
    /// Its key in the client table (`ipv6PrefixLength`).
    pub key: IpKey,
    /// Its open connections (the entry's count).
    pub active: u32,
    /// It is known-good (not counted on the listener rate).
    pub known_good: bool,
}

/// The shadow state of one engine: the client table, the prefix table and the listener TAT.
#[derive(Debug, Default)]
pub(crate) struct Shadow {
    clients: ShadowTable,
    prefixes: Arc<ShadowTable>,
    listener_tat: AtomicU64,
}

/// The shadow verdict of one attempt, and the prefix way its connection holds if admitted.
#[derive(Debug, Default)]
pub(crate) struct ShadowOutcome {
    /// What the shadow policy would have refused the attempt as (`None`: it admits).
    pub reason: Option<BlockReason>,
    /// The prefix's way, when `shadow.prefixLimit.maxConcurrent` counts open connections.
    pub prefix_way: Option<(usize, u64)>,
}

/// One open connection counted on a shadow prefix (see the module doc), released when dropped.
/// 16 bytes (kept in every connection's guard): the table and the way's index. The release is
/// by index, whatever key the way holds then: a way is taken only when no hold counts on it, so
/// the count on a way is exactly its live holds, even when a racing claim took it over.
pub(crate) struct ShadowHold {
    table: Arc<ShadowTable>,
    index: u32,
}

const _: () = assert!(size_of::<Option<ShadowHold>>() == 16);

/// One open connection off `w`'s count (never below zero).
fn release(w: &Way) {
    let _ = w
        .active
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
}

impl Drop for ShadowHold {
    fn drop(&mut self) {
        if let Some(w) = self
            .table
            .ways
            .get()
            .and_then(|w| w.get(self.index as usize))
        {
            release(w);
        }
    }
}

impl std::fmt::Debug for ShadowHold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ShadowHold({})", self.index)
    }
}

fn conforms(g: Option<Gcra>, tat: &AtomicU64, now: u64) -> bool {
    g.is_none_or(|g| g.conforms(tat.load(Ordering::Relaxed), now))
}

fn debit(g: Option<Gcra>, tat: &AtomicU64, now: u64) {
    if let Some(g) = g {
        tat.store(
            g.next_tat(tat.load(Ordering::Relaxed), now),
            Ordering::Relaxed,
        );
    }
}

impl Shadow {
    /// The shadow verdict for client `c` at `now_ns` under `p` (see the module doc for the
    /// order), debiting the shadow rates when the whole shadow policy admits the attempt.
    pub(crate) fn decide(&self, p: &ShadowPolicy, c: &ShadowClient, now_ns: u64) -> ShadowOutcome {
        let mut out = ShadowOutcome::default();
        if p.blocklist.contains(c.ip) {
            out.reason = Some(BlockReason::CidrBlocked);
            return out;
        }
        let cg = [p.rate_limit.map(|r| r.gcra), p.sustained.map(|r| r.gcra)];
        let client = cg
            .iter()
            .any(Option::is_some)
            .then(|| self.clients.way(c.key, now_ns))
            .flatten();
        if let Some((_, w)) = client {
            if !(0..2).all(|i| conforms(cg[i], &w.tat[i], now_ns)) {
                out.reason = Some(BlockReason::RateLimited);
                return out;
            }
        }
        let max = p.max_concurrent_per_ip;
        if max != 0 && u64::from(c.active) >= max {
            out.reason = Some(BlockReason::TooManyConnections);
            return out;
        }
        let pg = p.prefix_limit.and_then(|pl| pl.rate.map(|r| r.gcra));
        let prefix = p
            .prefix_limit
            .and_then(|pl| Some((pl, self.prefixes.way(pl.key(c.ip), now_ns)?)));
        if let Some((pl, (index, w))) = prefix {
            if !conforms(pg, &w.tat[0], now_ns) {
                out.reason = Some(BlockReason::PrefixRateLimited);
                return out;
            }
            if pl.max_concurrent != 0 {
                if w.active.load(Ordering::Relaxed) >= pl.max_concurrent {
                    out.reason = Some(BlockReason::PrefixTooManyConnections);
                    return out;
                }
                out.prefix_way = Some((index, w.fp.load(Ordering::Relaxed)));
            }
        }
        if let (Some(r), false) = (p.listener_rate, c.known_good) {
            if r.gcra.try_debit(&self.listener_tat, now_ns).is_err() {
                out.reason = Some(BlockReason::ListenerOverloaded);
                return out;
            }
        }
        if let Some((_, w)) = client {
            (0..2).for_each(|i| debit(cg[i], &w.tat[i], now_ns));
        }
        if let Some((_, (_, w))) = prefix {
            debit(pg, &w.tat[0], now_ns);
        }
        out
    }

    /// Counts one admitted connection on the shadow prefix way `(index, fp)` of a
    /// [`ShadowOutcome`]; the hold releases it. `None` (nothing counted) when the way was taken
    /// by another prefix since the decision: the count would have landed on that prefix.
    pub(crate) fn hold(&self, (index, fp): (usize, u64)) -> Option<ShadowHold> {
        let w = self.prefixes.ways.get()?.get(index)?;
        let index = u32::try_from(index).ok()?;
        w.active.fetch_add(1, Ordering::Relaxed);
        // Counted first, checked after: a way holding a count is not taken. A claim that read
        // the count before this increment and writes its fingerprint after this check still
        // can (the race of the module doc): the connection then counts on the new key until it
        // closes, and its release, by index, leaves the count exact.
        if w.fp.load(Ordering::Relaxed) != fp {
            release(w);
            return None;
        }
        Some(ShadowHold {
            table: Arc::clone(&self.prefixes),
            index,
        })
    }

    /// The shadow verdict `c`'s next attempt would get at `now_ns`, read-only (`explain`):
    /// nothing is claimed or debited.
    pub(crate) fn verdict(
        &self,
        p: &ShadowPolicy,
        c: &ShadowClient,
        now_ns: u64,
    ) -> Option<BlockReason> {
        if p.blocklist.contains(c.ip) {
            return Some(BlockReason::CidrBlocked);
        }
        let cg = [p.rate_limit.map(|r| r.gcra), p.sustained.map(|r| r.gcra)];
        if let Some(w) = self.clients.peek(c.key) {
            if !(0..2).all(|i| conforms(cg[i], &w.tat[i], now_ns)) {
                return Some(BlockReason::RateLimited);
            }
        }
        let max = p.max_concurrent_per_ip;
        if max != 0 && u64::from(c.active) >= max {
            return Some(BlockReason::TooManyConnections);
        }
        if let Some(pl) = p.prefix_limit {
            if let Some(w) = self.prefixes.peek(pl.key(c.ip)) {
                if !conforms(pl.rate.map(|r| r.gcra), &w.tat[0], now_ns) {
                    return Some(BlockReason::PrefixRateLimited);
                }
                let max = pl.max_concurrent;
                if max != 0 && w.active.load(Ordering::Relaxed) >= max {
                    return Some(BlockReason::PrefixTooManyConnections);
                }
            }
        }
        match (p.listener_rate, c.known_good) {
            (Some(r), false) if !conforms(Some(r.gcra), &self.listener_tat, now_ns) => {
                Some(BlockReason::ListenerOverloaded)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
#[path = "shadow_tests.rs"]
mod tests;
