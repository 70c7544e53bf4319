//! One shard of the per-client table: an open-addressing table holding entries inline behind
//! one control byte per slot (0 = empty, else a 7-bit hash tag), with each entry's standing in a
//! parallel array (same index, moved with it) and, while the policy has `clusterRateLimit`, each
//! entry's cluster lease in the entry's own 64-byte slot ([`super::slots`]), the keyed hash that
//! places a key, and what an entry is worth to eviction. Linear probing from
//! `fastrange(hash, capacity)`, at most 7/8 full, growing by 1.25x, backward-shift deletion (no
//! tombstones). Every method runs with the shard's lock held (see the table's module doc).

use super::slots::{HasEntry, Slots};
use crate::protection::entry::{Entry, Standing, MARK_KNOWN_GOOD};
use crate::protection::key::IpKey;
use crate::protection::lease::Lease;
use crate::protection::penalty;
use crate::protection::rescale::{Installed, Tier};
use arc_swap::ArcSwap;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

/// What an entry is worth keeping, at `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Worth {
    /// Projected to a never-seen client: evicting it changes nothing.
    Idle,
    /// A TAT in the future (ns): it remembers recent arrivals.
    Limited(u64),
    /// A running known-good mark or escalation memory, until this time (ns): it remembers how the
    /// client behaved.
    Remembered(u64),
    /// A running penalty box (deadline word).
    Boxed(u64),
}

/// What eviction needs to project an entry to `now`.
#[derive(Clone, Copy)]
pub(crate) struct Ctx<'a> {
    /// CLOCK_MONOTONIC ns.
    pub now: u64,
    /// Current penalty-box epoch (0 = box off).
    pub epoch: u32,
    /// `maxTrackedIps`.
    pub cap: usize,
    /// Generation tag of the caller's snapshot: new entries get it.
    pub tag: u8,
    /// Where the generation in force is published: entries of another generation are rescaled
    /// before eviction judges them (`None`: no rescaling, for table-only tests).
    pub latest: Option<&'a ArcSwap<Installed>>,
    /// Which limits the table's TATs are written in.
    pub tier: Tier,
    /// `penaltyBox.escalation.memoryMs` in ns (0 = no escalation): how long after its deadline a
    /// box is remembered.
    pub memory_ns: u64,
    /// The known-good gauge the table's marks are counted in (a mark found expired is cleared
    /// and uncounted; `None`: the table holds no marks).
    pub marked: Option<&'a AtomicU64>,
    /// `MARK_*` bits a newly inserted entry starts with.
    pub new_marks: u8,
}

/// Brings `e` to the generation in force (loaded under the shard lock the caller holds).
#[inline]
pub(super) fn normalize(e: &mut Entry, ctx: &Ctx) {
    if let Some(latest) = ctx.latest {
        if e.tag() != ctx.tag {
            latest.load().rescale(e, ctx.tier);
        }
    }
}

/// Clears `s`'s known-good mark if it expired at `now`, uncounting it from `marked`.
#[inline]
pub(crate) fn expire_mark(s: &mut Standing, now: u64, marked: Option<&AtomicU64>) {
    if s.marks & MARK_KNOWN_GOOD != 0 && !s.known_good(now) {
        s.marks &= !MARK_KNOWN_GOOD;
        s.known_good_s = 0;
        if let Some(m) = marked {
            m.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// `None` when the entry holds connections or handshakes (never evictable). Rescales the entry
/// to the current generation and clears an expired known-good mark first. A cluster lease that
/// would lose something ([`Lease::live_until`]) counts as a TAT in the future (limited).
pub(super) fn worth(
    e: &mut Entry,
    s: &mut Standing,
    lease: Option<&Lease>,
    ctx: &Ctx,
) -> Option<Worth> {
    normalize(e, ctx);
    expire_mark(s, ctx.now, ctx.marked);
    if e.active != 0 || e.pending != 0 {
        return None;
    }
    if penalty::is_boxed(e.penalty, ctx.epoch, ctx.now) {
        return Some(Worth::Boxed(e.penalty));
    }
    let mut remembered = 0;
    if s.known_good(ctx.now) {
        remembered = u64::from(s.known_good_s) * crate::clock::NS_PER_SEC;
    }
    if ctx.memory_ns > 0 {
        if let Some(t) = penalty::memory_until_ns(e.penalty, ctx.epoch, ctx.memory_ns) {
            remembered = remembered.max(t);
        }
    }
    if remembered > ctx.now {
        return Some(Worth::Remembered(remembered));
    }
    let leased = lease.and_then(|l| l.live_until(ctx.now)).unwrap_or(0);
    let tat = e
        .tat_rate
        .max(e.tat_sustained)
        .max(s.tat_request)
        .max(leased);
    Some(if tat > ctx.now {
        Worth::Limited(tat)
    } else {
        Worth::Idle
    })
}

/// A [`rank`] limit below which every entry but a boxed one falls.
pub(super) const NOT_BOXED: (u8, u64) = (3, 0);
/// A [`rank`] limit below which every entry falls.
pub(super) const ANY: (u8, u64) = (4, 0);

/// Lower is evicted first: limited by TAT (closest to idle first), then remembered ones (the
/// memory closest to its end first), then boxed by deadline.
pub(super) fn rank(w: Worth) -> (u8, u64) {
    match w {
        Worth::Idle => (0, 0),
        Worth::Limited(tat) => (1, tat),
        Worth::Remembered(until) => (2, until),
        Worth::Boxed(word) => (3, word & ((1 << 44) - 1)),
    }
}

// ---- hashing

#[derive(Clone, Copy)]
pub(super) struct Hasher4([u64; 4]);

#[inline]
fn fold(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    (p as u64) ^ ((p >> 64) as u64)
}

impl Hasher4 {
    pub(super) fn random() -> Hasher4 {
        let rs = RandomState::new();
        let mut seeds = [0u64; 4];
        for (i, s) in seeds.iter_mut().enumerate() {
            let mut h = rs.build_hasher();
            h.write_usize(i);
            *s = h.finish() | 1;
        }
        Hasher4(seeds)
    }

    /// Keyed folded-multiply hash (wyhash-style) of a key: bits 56.. pick the shard, bits 0..32
    /// the home slot, bits 32..39 the control tag.
    #[inline]
    pub(super) fn hash(&self, key: IpKey) -> u64 {
        let (bits, len) = key.raw();
        let h = fold((bits as u64) ^ self.0[0], ((bits >> 64) as u64) ^ self.0[1]);
        fold(h ^ self.0[2], u64::from(len) ^ self.0[3])
    }
}

#[inline]
pub(super) fn tag(h: u64) -> u8 {
    0x80 | ((h >> 32) as u8 & 0x7f)
}

#[inline]
pub(super) fn home(h: u64, cap: usize) -> usize {
    ((u64::from(h as u32) * cap as u64) >> 32) as usize
}

// ---- shard

pub(super) const SHARDS: usize = 256;
pub(super) const MIN_CAP: usize = 16;
pub(super) const VICTIM_SCAN: usize = 32;
pub(super) const OTHER_SHARDS: usize = 8;
pub(super) const TICK_BATCH: usize = 64;

/// One shard. Guards hold an `Arc<Shard>` so they can be released after the engine is gone.
pub(crate) struct Shard {
    pub(super) inner: Mutex<ShardInner>,
    /// Where the shard's arrays were when last resized, for [`Shard::prefetch`] only: read
    /// without the lock, so possibly stale (a prefetch of a stale address is harmless: it never
    /// faults and is never dereferenced).
    hint: Hint,
}

#[derive(Default)]
struct Hint {
    ctrl: AtomicPtr<u8>,
    slots: AtomicPtr<u8>,
    /// Bytes per slot (48 plain, 64 with leases).
    stride: AtomicUsize,
    cap: AtomicUsize,
}

/// Asks the CPU to start loading the cache line at `p` (no-op off x86_64). Never dereferences
/// `p`: any address is allowed.
#[inline(always)]
pub(crate) fn prefetch<T>(p: *const T) {
    // SAFETY: PREFETCHT0 is a hint: it reads no memory the program can observe, never faults
    // (an invalid address is dropped), and SSE is part of the x86_64 baseline.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast::<i8>())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

pub(super) struct ShardInner {
    pub(super) ctrl: Vec<u8>,
    /// Entries (with their leases while the shard keeps them), indexed like `ctrl`.
    pub(super) slots: Slots,
    /// `standing[i]` belongs to slot `i` (same length).
    pub(super) standing: Vec<Standing>,
    /// Entries whose lease was ever asked for ([`Lease::held`]).
    pub(super) lease_count: usize,
    pub(super) count: usize,
    pub(super) hand: usize,
    /// The latest decision time made under this lock (CLOCK_MONOTONIC ns): see [`Table::with`].
    pub(super) now: u64,
}

impl Shard {
    /// An empty shard.
    pub(super) fn new() -> Shard {
        Shard {
            inner: Mutex::new(ShardInner::new()),
            hint: Hint::default(),
        }
    }

    /// Starts loading the control byte and the entry (with its lease, same line) at `h`'s home
    /// slot before the lock is taken. At a million clients both are memory misses, and the
    /// lock's atomic exchange orders every later load after it: prefetched first, the two misses
    /// overlap each other and the lock instead of following it one after the other.
    #[inline(always)]
    pub(super) fn prefetch(&self, h: u64) {
        let cap = self.hint.cap.load(Ordering::Relaxed);
        if cap == 0 {
            return;
        }
        let pos = home(h, cap);
        prefetch(self.hint.ctrl.load(Ordering::Relaxed).wrapping_add(pos));
        let stride = self.hint.stride.load(Ordering::Relaxed);
        prefetch(
            self.hint
                .slots
                .load(Ordering::Relaxed)
                .wrapping_add(pos * stride),
        );
    }

    /// Records where `inner`'s arrays are now (called under the lock after they moved).
    pub(super) fn publish_hint(&self, inner: &mut ShardInner) {
        self.hint
            .ctrl
            .store(inner.ctrl.as_mut_ptr(), Ordering::Relaxed);
        let (slots, stride) = inner.slots.base();
        self.hint.slots.store(slots, Ordering::Relaxed);
        self.hint.stride.store(stride, Ordering::Relaxed);
        self.hint.cap.store(inner.ctrl.len(), Ordering::Relaxed);
    }

    #[inline]
    pub(super) fn lock(&self) -> MutexGuard<'_, ShardInner> {
        // Every mutation leaves the table consistent between statements that can panic, so a
        // poisoned lock is safe to keep using.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl ShardInner {
    pub(super) fn new() -> ShardInner {
        ShardInner {
            ctrl: Vec::new(),
            slots: Slots::Plain(Vec::new()),
            standing: Vec::new(),
            lease_count: 0,
            count: 0,
            hand: 0,
            now: 0,
        }
    }

    #[inline]
    pub(super) fn find(&self, key: IpKey, h: u64) -> Option<usize> {
        match &self.slots {
            Slots::Plain(v) => probe(&self.ctrl, v, key, h),
            Slots::Leased(v) => probe(&self.ctrl, v, key, h),
        }
    }

    /// Whether the shard keeps cluster leases ([`ShardInner::enable_leases`]).
    #[inline]
    pub(super) fn leased(&self) -> bool {
        self.slots.leased()
    }

    /// Inserts a fresh entry for `key` (absent) with `marks` and returns its slot.
    pub(super) fn insert(
        &mut self,
        hasher: &Hasher4,
        key: IpKey,
        h: u64,
        generation_tag: u8,
        marks: u8,
    ) -> usize {
        if (self.count + 1) * 8 > self.ctrl.len() * 7 {
            self.grow(hasher);
        }
        let cap = self.ctrl.len();
        let mut pos = home(h, cap);
        while self.ctrl[pos] != 0 {
            pos += 1;
            if pos == cap {
                pos = 0;
            }
        }
        self.ctrl[pos] = tag(h);
        self.slots.put(pos, Entry::fresh(key, generation_tag));
        self.standing[pos] = Standing::with_marks(marks);
        self.count += 1;
        pos
    }

    /// From now on the shard keeps a lease in every entry's slot (fresh ones for the entries it
    /// holds): its entries move to 64-byte slots, one allocation of `capacity × 64` bytes.
    pub(super) fn enable_leases(&mut self) {
        self.slots.keep_leases();
        self.lease_count = 0;
    }

    /// The shard no longer keeps leases (its entries move back to 48-byte slots).
    pub(super) fn drop_leases(&mut self) {
        self.slots.drop_leases();
        self.lease_count = 0;
    }

    pub(super) fn grow(&mut self, hasher: &Hasher4) {
        let cap = (self.ctrl.len() * 5 / 4).max(MIN_CAP);
        let ctrl = std::mem::replace(&mut self.ctrl, vec![0; cap]);
        let fresh = self.slots.empty_like(cap);
        let slots = std::mem::replace(&mut self.slots, fresh);
        let standing = std::mem::replace(&mut self.standing, vec![Standing::default(); cap]);
        for (i, (c, s)) in ctrl.into_iter().zip(standing).enumerate() {
            if c != 0 {
                let h = hasher.hash(slots.entry(i).key());
                let mut pos = home(h, cap);
                while self.ctrl[pos] != 0 {
                    pos += 1;
                    if pos == cap {
                        pos = 0;
                    }
                }
                self.ctrl[pos] = c;
                self.slots.copy_from(&slots, i, pos);
                self.standing[pos] = s;
            }
        }
        self.hand = 0;
    }

    /// Backward-shift deletion of slot `pos`.
    pub(super) fn remove(&mut self, hasher: &Hasher4, pos: usize) {
        let cap = self.ctrl.len();
        if self.slots.lease(pos).is_some_and(|l| l.held()) {
            self.lease_count -= 1;
        }
        let mut hole = pos;
        let mut j = pos;
        loop {
            j = if j + 1 == cap { 0 } else { j + 1 };
            if self.ctrl[j] == 0 {
                break;
            }
            let k = home(hasher.hash(self.slots.entry(j).key()), cap);
            // The entry at j may fill the hole unless its home lies cyclically in (hole, j].
            let stays = if hole <= j {
                hole < k && k <= j
            } else {
                hole < k || k <= j
            };
            if !stays {
                self.ctrl[hole] = self.ctrl[j];
                self.slots.copy_within(j, hole);
                self.standing[hole] = self.standing[j];
                hole = j;
            }
        }
        self.ctrl[hole] = 0;
        self.slots.clear(hole);
        self.standing[hole] = Standing::default();
        self.count -= 1;
    }

    /// Scans from the clock hand for the least valuable evictable entry, looking at up to `n`
    /// live entries (empty slots are skipped). An idle entry is returned at once.
    pub(super) fn scan_victim(&mut self, ctx: &Ctx, n: usize) -> Option<(usize, Worth)> {
        let cap = self.ctrl.len();
        if self.count == 0 {
            return None;
        }
        let mut best: Option<(usize, Worth)> = None;
        let mut live = 0;
        for _ in 0..cap {
            let pos = self.hand % cap;
            self.hand = pos + 1;
            if self.ctrl[pos] == 0 {
                continue;
            }
            live += 1;
            let (e, lease) = self.slots.parts(pos);
            if let Some(w) = worth(e, &mut self.standing[pos], lease.as_deref(), ctx) {
                if w == Worth::Idle {
                    return Some((pos, w));
                }
                if best.is_none_or(|(_, b)| rank(w) < rank(b)) {
                    best = Some((pos, w));
                }
            }
            if live == n {
                break;
            }
        }
        best
    }
}

/// Linear probe for `key` from `h`'s home slot over `ctrl` and its `slots`.
#[inline(always)]
fn probe<T: HasEntry>(ctrl: &[u8], slots: &[T], key: IpKey, h: u64) -> Option<usize> {
    let cap = ctrl.len();
    if cap == 0 {
        return None;
    }
    let t = tag(h);
    let mut pos = home(h, cap);
    loop {
        let c = ctrl[pos];
        if c == 0 {
            return None;
        }
        if c == t && slots[pos].entry().is(key) {
            return Some(pos);
        }
        pos += 1;
        if pos == cap {
            pos = 0;
        }
    }
}
