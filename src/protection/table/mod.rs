//! The per-IP table: one small fixed-size entry per tracked client, sharded, with a hard cap and
//! incremental eviction. The engine's prefix tier is a second table of the same kind, keyed by
//! network prefix.
//!
//! **Entry**: one fixed-size [`Entry`] per client (48 bytes) and its [`Standing`] (16 bytes) in a
//! parallel array at the same index (see [`super::entry`]): the decision without defense mode or
//! `listenerLimit` reads only the entry. While the policy has `clusterRateLimit`, each shard keeps
//! a [`Lease`] (16 bytes) in every entry's slot — 64-byte, cache-line-aligned slots instead of
//! 48-byte ones ([`slots`]), switched to the first time a decision asks for a lease and back when
//! a policy without it is installed ([`Table::drop_leases`]): the cluster tier's token is taken in
//! the admission's own critical section, from the cache line the lookup already loaded
//! ([`super::lease`]).
//!
//! **Layout** ([`shard`]): 256 shards, each a `Mutex` around an open-addressing table that holds
//! the entries *inline*, plus one control byte per slot (0 = empty, else a 7-bit hash tag): a
//! lookup reads the control bytes (1 byte per slot) and then touches one entry (its standing only
//! when the decision needs it). At a million clients both are memory misses; [`Table::with`]
//! prefetches the key's home control byte and entry before it takes the shard lock (whose atomic
//! exchange would otherwise order both loads after it, one after the other), so the misses
//! overlap each other and the lock. Linear probing from `fastrange(hash, capacity)`, at most 7/8
//! full, growing by 1.25× (so the load stays between 70 % and 88 %), backward-shift deletion (no
//! tombstones). Memory per tracked client: 65 bytes (entry 48, standing 16, control 1) / load =
//! 74–93 bytes, within the 96 B budget (`tests/protection_table.rs` asserts it at 1M clients and
//! after a 2M-address flood against a 1M cap). The growth factor was 1.5 with 48 bytes per slot;
//! with more than 56 (entry and standing) its worst load (58 %) would cost over 96 B.
//!
//! **Why admission and eviction never split a client's state**: an entry and its standing are
//! only read or written with their shard lock held — the lookup, the whole admission decision
//! (penalty box, both limits, concurrency), a guard's release, and eviction are each one critical
//! section. Eviction removes only entries with no active connection and no pending handshake, so
//! the entry an admitted connection counts against is the entry the next connection from that
//! client finds. Guards re-find their entry by key when released (entries move, with their
//! standing, when the table grows or shifts). A critical section is one probe plus a few integer
//! operations on one entry; at the cap an insert adds a victim scan of at most 32 live entries.
//!
//! **Eviction** (lazy projection: nothing is refilled or reset on a timer): every entry an
//! eviction pass looks at is first brought to the current rate-limit generation (rescaled TATs,
//! see [`super::rescale`]), so its worth is judged under the limits in force, and an expired
//! known-good mark is cleared. An entry is *idle* when it is projected to a never-seen client at
//! `now` — every TAT (the request TAT too) ≤ now, no running box, no running known-good mark or escalation memory, no
//! active or pending count — and removing it is then invisible. [`Table::evict_tick`] removes idle
//! entries, a bounded number of slots per call and at most 64 per lock hold. At the
//! `maxTrackedIps` cap an insert replaces a victim found by a scan of at most 32 live entries
//! from its shard's clock hand: idle first, then *limited* (a TAT in the future; the one closest
//! to idle), then *remembered* (a known-good mark or the escalation memory of a past box; the one
//! ending first), *boxed* last (the earliest deadline). Before giving up a remembered or boxed
//! entry — or a limited one from a shard holding fewer than 32 live entries, too small a sample —
//! it looks at up to 8 other non-empty shards (try-lock only) for one ranked lower; a shard with
//! no candidate at all (small tables) looks at every shard. The priority is thus exact for small
//! tables and sampled (at least 32 entries) for large ones. When every candidate holds connections the client is
//! admitted untracked.

mod guard;
mod shard;
mod slots;

pub(crate) use guard::Slot;
pub use guard::{ConnGuard, PendingGuard, PrefixHold};
pub(crate) use shard::{expire_mark, Ctx};

use super::blocked::SideLists;
use super::entry::{Entry, Standing, MARK_KNOWN_GOOD, SIDE_FLAGS};
use super::key::IpKey;
use super::lease::Lease;
use shard::{
    rank, worth, Hasher4, Shard, ShardInner, Worth, ANY, NOT_BOXED, OTHER_SHARDS, SHARDS,
    TICK_BATCH, VICTIM_SCAN,
};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

struct TickState {
    shard: usize,
    pos: usize,
    /// Complete sweeps in a row that ended above the cap: from 1 on, boxed entries may go.
    over_cap_sweeps: u32,
}

/// The sharded per-IP table of one engine.
pub(crate) struct Table {
    shards: Box<[Arc<Shard>]>,
    hasher: Hasher4,
    len: AtomicUsize,
    tick: Mutex<TickState>,
    /// Side sets of the blocked view (keys flagged in their entries).
    pub lists: SideLists,
    /// Entries holding a known-good mark ([`MARK_KNOWN_GOOD`]), not yet found expired.
    pub marked: AtomicU64,
}

impl Table {
    /// An empty table (no entry memory until the first client).
    pub(crate) fn new() -> Table {
        let hasher = Hasher4::random();
        Table {
            shards: (0..SHARDS).map(|_| Arc::new(Shard::new())).collect(),
            hasher,
            len: AtomicUsize::new(0),
            tick: Mutex::new(TickState {
                shard: 0,
                pos: 0,
                over_cap_sweeps: 0,
            }),
            lists: SideLists::default(),
            marked: AtomicU64::new(0),
        }
    }

    /// Number of tracked clients.
    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    fn reserve(&self, cap: usize) -> bool {
        self.len
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |l| {
                (l < cap).then_some(l + 1)
            })
            .is_ok()
    }

    /// Runs `f` on `key`'s entry under its shard lock, creating the entry if needed (evicting a
    /// victim at the cap). `None` when the table is full of connected clients: the caller admits
    /// untracked. The returned [`Slot`] makes guards for counts `f` added.
    ///
    /// `f` gets the entry, its standing and the decision time: `read_now()` called with the shard
    /// lock held, clamped to the latest time a decision under this lock used. A time read before
    /// the lock could reach it out of order (two workers, one descheduled between its clock read
    /// and the lock), and an older arrival compared against a TAT already advanced by a newer one
    /// refuses a conforming client at the fastest allowed rates; read under the lock, decision
    /// times follow decision order. The clamp keeps that true for injected clocks too.
    #[inline]
    pub(crate) fn with<R>(
        &self,
        key: IpKey,
        ctx: &Ctx,
        read_now: impl FnOnce() -> u64,
        f: impl FnOnce(&mut Entry, &mut Standing, u64) -> R,
    ) -> Option<(R, Slot<'_>)> {
        self.with_lease(key, ctx, read_now, false, |e, s, _, now| f(e, s, now))
    }

    /// [`Table::with`], and with `leased` `f` also gets the entry's cluster lease (the shard
    /// starts keeping leases if it did not: its entries move to 64-byte slots, one allocation of
    /// its capacity × 64 bytes).
    #[inline]
    pub(crate) fn with_lease<R>(
        &self,
        key: IpKey,
        ctx: &Ctx,
        read_now: impl FnOnce() -> u64,
        leased: bool,
        f: impl FnOnce(&mut Entry, &mut Standing, Option<&mut Lease>, u64) -> R,
    ) -> Option<(R, Slot<'_>)> {
        let h = self.hasher.hash(key);
        let si = (h >> 56) as usize % SHARDS;
        let shard = &self.shards[si];
        shard.prefetch(h);
        let mut inner = shard.lock();
        if leased && !inner.leased() {
            inner.enable_leases();
            shard.publish_hint(&mut inner);
        }
        let pos = match inner.find(key, h) {
            Some(pos) => pos,
            None => self.insert(si, &mut inner, key, h, ctx)?,
        };
        let now = read_now().max(inner.now);
        inner.now = now;
        let r = {
            let inner = &mut *inner;
            let (e, lease) = inner.slots.parts(pos);
            match lease.filter(|_| leased) {
                Some(l) => {
                    let held = l.held();
                    let r = f(e, &mut inner.standing[pos], Some(&mut *l), now);
                    if l.held() && !held {
                        inner.lease_count += 1;
                    }
                    r
                }
                None => f(e, &mut inner.standing[pos], None, now),
            }
        };
        drop(inner);
        Some((
            r,
            Slot {
                shard,
                key,
                hash: h,
            },
        ))
    }

    /// Runs `f` on `key`'s entry (or `None`) under its shard lock; no insert.
    pub(crate) fn inspect<R>(&self, key: IpKey, f: impl FnOnce(Option<&mut Entry>) -> R) -> R {
        let h = self.hasher.hash(key);
        let shard = &self.shards[(h >> 56) as usize % SHARDS];
        let mut inner = shard.lock();
        match inner.find(key, h) {
            Some(pos) => f(Some(inner.slots.entry_mut(pos))),
            None => f(None),
        }
    }

    /// Runs `f` on `key`'s cluster lease under its shard lock; no insert. `None` when the key
    /// is not tracked or its shard keeps no leases.
    pub(crate) fn inspect_lease<R>(
        &self,
        key: IpKey,
        f: impl FnOnce(&mut Lease) -> R,
    ) -> Option<R> {
        let h = self.hasher.hash(key);
        let shard = &self.shards[(h >> 56) as usize % SHARDS];
        let mut inner = shard.lock();
        let pos = inner.find(key, h)?;
        inner.slots.parts(pos).1.map(f)
    }

    /// Frees every shard's leases (a policy without `clusterRateLimit` was installed).
    pub(crate) fn drop_leases(&self) {
        for shard in self.shards.iter() {
            let mut inner = shard.lock();
            if inner.leased() {
                inner.drop_leases();
                shard.publish_hint(&mut inner);
            }
        }
    }

    /// Entries holding a cluster lease (one lock per shard: for metrics).
    pub(crate) fn lease_clients(&self) -> usize {
        self.shards.iter().map(|s| s.lock().lease_count).sum()
    }

    /// Runs `f` on `key`'s standing (or `None`) under its shard lock; no insert.
    pub(crate) fn inspect_standing<R>(
        &self,
        key: IpKey,
        f: impl FnOnce(Option<&Standing>) -> R,
    ) -> R {
        let h = self.hasher.hash(key);
        let shard = &self.shards[(h >> 56) as usize % SHARDS];
        let inner = shard.lock();
        match inner.find(key, h) {
            Some(pos) => f(Some(&inner.standing[pos])),
            None => f(None),
        }
    }

    /// Runs `f` on every live entry and its standing, one shard under its lock at a time (not a
    /// snapshot across shards). O(capacity): for rare whole-table reads such as an XDP attach.
    pub(crate) fn for_each(&self, mut f: impl FnMut(&Entry, &Standing)) {
        for shard in self.shards.iter() {
            let inner = shard.lock();
            for (pos, (c, s)) in inner.ctrl.iter().zip(&inner.standing).enumerate() {
                if *c != 0 {
                    f(inner.slots.entry(pos), s);
                }
            }
        }
    }

    #[cold]
    fn insert(
        &self,
        si: usize,
        inner: &mut ShardInner,
        key: IpKey,
        h: u64,
        ctx: &Ctx,
    ) -> Option<usize> {
        if !self.reserve(ctx.cap) {
            // At the cap: replace the least valuable entry (the count stays the same).
            // A shard with fewer than VICTIM_SCAN live entries is too small a sample of the
            // table: its victim is compared with those of a few other shards.
            let sampled = inner.count >= VICTIM_SCAN;
            match inner.scan_victim(ctx, VICTIM_SCAN) {
                Some((pos, Worth::Idle)) => self.evict_at(inner, pos),
                Some((pos, Worth::Limited(_))) if sampled => self.evict_at(inner, pos),
                Some((pos, w)) => {
                    // Keep remembered and boxed clients (and, in a small shard, the closest
                    // to idle) if a few other shards have something less worth keeping.
                    if !(self.evict_elsewhere(si, ctx, OTHER_SHARDS, rank(w))
                        && self.reserve(ctx.cap))
                    {
                        self.evict_at(inner, pos);
                    }
                }
                None => {
                    // Nothing evictable here (small table, or all connected): look everywhere.
                    let found = self.evict_elsewhere(si, ctx, OTHER_SHARDS, NOT_BOXED)
                        || self.evict_elsewhere(si, ctx, SHARDS, ANY);
                    if !(found && self.reserve(ctx.cap)) {
                        return None;
                    }
                }
            }
        }
        let cap = inner.ctrl.len();
        let pos = inner.insert(&self.hasher, key, h, ctx.tag, ctx.new_marks);
        if inner.ctrl.len() != cap {
            self.shards[si].publish_hint(inner);
        }
        Some(pos)
    }

    /// Evicts the least valuable entry found in up to `shards` other non-empty shards (try-lock
    /// only, so it never waits while holding the caller's shard lock) whose [`rank`] is below
    /// `limit` ([`NOT_BOXED`], [`ANY`] or a candidate's rank). Decrements `len` on success.
    fn evict_elsewhere(&self, si: usize, ctx: &Ctx, shards: usize, limit: (u8, u64)) -> bool {
        let mut best: Option<(usize, IpKey, Worth)> = None;
        let mut visited = 0;
        for j in 1..SHARDS {
            if visited == shards {
                break;
            }
            let oi = (si + j) % SHARDS;
            let Ok(mut inner) = self.shards[oi].inner.try_lock() else {
                continue;
            };
            if inner.count == 0 {
                continue;
            }
            visited += 1;
            let Some((pos, w)) = inner.scan_victim(ctx, VICTIM_SCAN) else {
                continue;
            };
            if rank(w) >= limit {
                continue;
            }
            if w == Worth::Idle {
                self.evict_at(&mut inner, pos);
                self.len.fetch_sub(1, Ordering::AcqRel);
                return true;
            }
            if best.is_none_or(|(_, _, b)| rank(w) < rank(b)) {
                best = Some((oi, inner.slots.entry(pos).key(), w));
            }
        }
        let Some((oi, key, _)) = best else {
            return false;
        };
        let Ok(mut inner) = self.shards[oi].inner.try_lock() else {
            return false;
        };
        let Some(pos) = inner.find(key, self.hasher.hash(key)) else {
            return false;
        };
        let inner = &mut *inner;
        let (e, lease) = inner.slots.parts(pos);
        match worth(e, &mut inner.standing[pos], lease.as_deref(), ctx) {
            Some(w) if rank(w) < limit => {
                self.evict_at(inner, pos);
                self.len.fetch_sub(1, Ordering::AcqRel);
                true
            }
            _ => false,
        }
    }

    /// Removes the entry at `pos` (evictable: checked by the caller under the lock). Does not
    /// touch `len`; uncounts a known-good mark from `marked`.
    fn evict_at(&self, inner: &mut ShardInner, pos: usize) {
        let e = *inner.slots.entry(pos);
        let marks = inner.standing[pos].marks;
        inner.remove(&self.hasher, pos);
        if e.flags & SIDE_FLAGS != 0 {
            self.lists.forget(e.key(), e.flags & SIDE_FLAGS);
        }
        if marks & MARK_KNOWN_GOOD != 0 {
            self.marked.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Incremental eviction: examines at most `budget` slots (at most 64 per lock hold) from
    /// where the last call stopped, removing idle entries, and — while the table is above `cap`
    /// (after a swap lowered `maxTrackedIps`) — limited ones, then boxed ones once a whole sweep
    /// ended still above the cap. Returns how many entries it removed.
    pub(crate) fn evict_tick(&self, ctx: &Ctx, budget: usize) -> usize {
        let mut tick = self.tick.lock().unwrap_or_else(|p| p.into_inner());
        let mut left = budget;
        let mut evicted = 0;
        while left > 0 {
            let shard = &self.shards[tick.shard];
            let mut inner = shard.lock();
            let cap = inner.ctrl.len();
            let mut pos = tick.pos.min(cap);
            let mut examined = 0;
            while pos < cap && examined < TICK_BATCH.min(left) {
                examined += 1;
                if inner.ctrl[pos] != 0 {
                    let w = {
                        let inner = &mut *inner;
                        let (e, lease) = inner.slots.parts(pos);
                        worth(e, &mut inner.standing[pos], lease.as_deref(), ctx)
                    };
                    if let Some(w) = w {
                        let over = self.len.load(Ordering::Relaxed) > ctx.cap;
                        let go = match w {
                            Worth::Idle => true,
                            Worth::Limited(_) | Worth::Remembered(_) => over,
                            Worth::Boxed(_) => over && tick.over_cap_sweeps > 0,
                        };
                        if go {
                            self.evict_at(&mut inner, pos);
                            self.len.fetch_sub(1, Ordering::AcqRel);
                            evicted += 1;
                            // The shift may have moved another entry into `pos`: look again.
                            continue;
                        }
                    }
                }
                pos += 1;
            }
            left -= examined.max(1);
            if pos >= cap {
                drop(inner);
                tick.pos = 0;
                tick.shard += 1;
                if tick.shard == SHARDS {
                    tick.shard = 0;
                    tick.over_cap_sweeps = if self.len.load(Ordering::Relaxed) > ctx.cap {
                        tick.over_cap_sweeps.saturating_add(1)
                    } else {
                        0
                    };
                }
            } else {
                tick.pos = pos;
            }
        }
        evicted
    }

    /// Heap bytes held by the table's shards (control bytes, entries, standings and leases; not
    /// the side sets).
    pub(crate) fn memory_bytes(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                let inner = s.lock();
                inner.ctrl.capacity()
                    + inner.slots.bytes()
                    + inner.standing.capacity() * std::mem::size_of::<Standing>()
                    + std::mem::size_of::<Shard>()
            })
            .sum()
    }
}

impl Default for Table {
    fn default() -> Self {
        Table::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::net::{IpAddr, Ipv4Addr};

    fn key(i: u32) -> IpKey {
        IpKey::new(IpAddr::V4(Ipv4Addr::from(i)), 64)
    }

    fn ctx(now: u64, cap: usize) -> Ctx<'static> {
        Ctx {
            now,
            epoch: 0,
            cap,
            tag: 0,
            latest: None,
            tier: crate::protection::rescale::Tier::Client,
            memory_ns: 0,
            marked: None,
            new_marks: 0,
        }
    }

    #[test]
    fn insert_find_remove_many() {
        let t = Table::new();
        for i in 0..20_000 {
            t.with(key(i), &ctx(0, 1_000_000), || 0, |e, _, _| e.tat_rate = 5)
                .unwrap();
        }
        assert_eq!(t.len(), 20_000);
        assert_eq!(t.evict_tick(&ctx(4, 1_000_000), 1_000_000), 0);
        assert_eq!(t.evict_tick(&ctx(5, 1_000_000), 1_000_000), 20_000);
        assert_eq!(t.len(), 0);
        for i in 0..20_000 {
            assert!(t.inspect(key(i), |e| e.is_none()));
        }
    }

    #[test]
    fn guards_block_eviction() {
        let t = Table::new();
        let (_, slot) = t
            .with(key(1), &ctx(0, 10), || 0, |e, _, _| e.active += 1)
            .unwrap();
        let g = slot.conn_guard();
        assert_eq!(t.evict_tick(&ctx(0, 10), 1_000), 0);
        drop(g);
        assert_eq!(t.evict_tick(&ctx(0, 10), 1_000), 1);
    }

    /// Random inserts, evictions at the cap and ticks keep every live entry findable.
    #[test]
    fn index_stays_consistent() {
        let t = Table::new();
        let mut x: u64 = 12345;
        for step in 0..200_000u64 {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let i = ((x >> 33) % 5000) as u32;
            let c = ctx(step, 3000);
            t.with(
                key(i),
                &c,
                || c.now,
                |e, _, _| e.tat_rate = step + 1 + (x % 50),
            )
            .unwrap();
            if step % 1000 == 0 {
                t.evict_tick(&c, 500);
                let mut live = 0;
                let mut seen = HashSet::new();
                for s in t.shards.iter() {
                    let inner = s.lock();
                    assert_eq!(inner.count, inner.ctrl.iter().filter(|&&c| c != 0).count());
                    for pos in 0..inner.ctrl.len() {
                        if inner.ctrl[pos] != 0 {
                            live += 1;
                            let k = inner.slots.entry(pos).key();
                            assert!(seen.insert(k));
                            assert_eq!(inner.find(k, t.hasher.hash(k)), Some(pos), "step {step}");
                        }
                    }
                }
                assert_eq!(live, t.len(), "step {step}");
                assert!(live <= 3000);
            }
        }
    }
}
