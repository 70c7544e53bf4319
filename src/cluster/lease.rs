//! Local leases of `clusterRateLimit` tokens: how a node admits without asking Redis.
//!
//! Redis holds each client's GCRA (one atomic Lua script, Redis `TIME` as the clock,
//! [`super::script`]). A node takes tokens from it in leases of `lease` tokens and admits from
//! them on the accept path; when a client's lease runs out the accept path queues a refill
//! request (a bounded channel, `try_send`) and the background task asks Redis. So the accept path
//! never waits for Redis. Per client and node:
//! - tokens left → admit, one token less (the last one queues the next refill);
//! - no token, Redis said no less than `retry_after` ago → refuse (`cluster_rate_limited`);
//! - no token otherwise (a new client, or a refill in flight) → admit *on credit*, up to `lease`
//!   admissions; the credit is charged to the client's GCRA with the next refill (so it is
//!   never lost, only late). A client's first connection is therefore never refused
//!   (fail-open first connection, asynchronous request).
//!
//! Bound: tokens are charged in Redis before they are used, so over any interval starting from a
//! fresh client the admissions of all nodes are at most `burst + rate × t` plus the credit not
//! yet charged: at most `nodes × lease`. Over a sliding window, tokens charged before the window
//! and used in it add up to another `nodes × lease`. A lease is valid for [`LEASE_TTL_NS`]; unused
//! tokens then lapse (under-admission, never over).
//!
//! Table: a fixed array of [`MAX_CLIENTS`] slots (16 MiB, mapped once on huge pages where the
//! kernel allows, never grown), in
//! buckets of [`BUCKET`] slots (one cache line). A client's two candidate buckets (it takes a
//! slot in the second only when the first is full) and its 32-bit tag come from one keyed hash
//! of (port, client); each slot is one 128-bit word (tag, tokens, debt, charging,
//! in-flight mark, last use in s, deadline in ms) updated by compare-and-swap, so the accept path
//! takes no lock, allocates nothing and touches one cache line. Times are kept in whole
//! milliseconds, rounded so that a refusal never ends early (a refusal may last up to 1 ms
//! longer, a lease lapse up to 1 ms sooner: under-admission, never over), idleness in whole
//! seconds (a slot may be freed up to 1 s before [`IDLE_NS`]).
//! - A new client takes a free slot of its bucket, or one unused for [`IDLE_NS`] with nothing
//!   in flight (a slot in flight for [`STALE_NS`] is free too: a refill always ends far sooner).
//! - Both buckets full of live clients → the client is admitted without a lease (counted in
//!   `untracked`), as beyond [`MAX_CLIENTS`]: so an IP-diverse flood costs no memory, and at
//!   worst lets its excess through to the local limits (fail open to local, as with Redis down).
//! - Two clients of one bucket with the same tag (probability 2⁻³¹ per pair of clients in a
//!   bucket) share one lease: tokens charged to one are spent by both (never more than charged).
//! - A count of the `lease` field above 16383 tokens is clamped (the config allows 10000).

use super::pages::{Zeroable, ZeroedPages};
use crate::protection::table::prefetch;
use crate::protection::IpKey;
use portable_atomic::AtomicU128;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// How long leased tokens stay usable, ns.
pub const LEASE_TTL_NS: u64 = 1_000_000_000;
/// A slot unused for this long (and with nothing in flight) is free for another client, ns.
pub const IDLE_NS: u64 = 10_000_000_000;
/// A slot with a refill in flight but unused for this long is free too (its answer was lost), ns.
pub const STALE_NS: u64 = 60_000_000_000;
/// Lease slots per node: most clients with a lease (a power of two; 16 bytes each).
pub const MAX_CLIENTS: usize = 1 << 20;
/// Slots per bucket: 4 × 16 bytes, one cache line.
pub const BUCKET: usize = 4;

const NS_PER_MS: u64 = 1_000_000;
const NS_PER_S: u64 = 1_000_000_000;
const COUNT_MAX: u64 = (1 << 14) - 1;
const SECS_MASK: u64 = (1 << 15) - 1;
const MS_MAX: u64 = (1 << 38) - 1;

/// One client's lease, unpacked from its slot's word. Bits (low first): tag 32, tokens 14,
/// debt 14, charging 14, pending 1, last use 15 (s, wrapping), until 38 (ms).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Lease {
    /// Which client holds the slot (top bit set: 0 is a free slot).
    tag: u32,
    tokens: u64,
    /// Admissions on credit, not yet charged in Redis.
    debt: u64,
    /// Debt handed to the refill in flight (given back if it fails).
    charging: u64,
    pending: bool,
    /// Last admission, whole seconds modulo 2¹⁵.
    last_s: u64,
    /// With tokens: when they lapse; without: until when Redis said no (ms).
    until_ms: u64,
}

impl Lease {
    fn pack(&self) -> u128 {
        u128::from(self.tag)
            | u128::from(self.tokens) << 32
            | u128::from(self.debt) << 46
            | u128::from(self.charging) << 60
            | u128::from(self.pending) << 74
            | u128::from(self.last_s & SECS_MASK) << 75
            | u128::from(self.until_ms.min(MS_MAX)) << 90
    }

    fn unpack(w: u128) -> Lease {
        let f = |at: u32, bits: u32| ((w >> at) as u64) & ((1u64 << bits) - 1);
        Lease {
            tag: w as u32,
            tokens: f(32, 14),
            debt: f(46, 14),
            charging: f(60, 14),
            pending: f(74, 1) == 1,
            last_s: f(75, 15),
            until_ms: (w >> 90) as u64,
        }
    }

    /// Free for another client at `now_s`: idle, or in flight far longer than a refill takes.
    fn reclaimable(&self, now_s: u64) -> bool {
        let idle = now_s.wrapping_sub(self.last_s) & SECS_MASK;
        // In whole seconds (so up to 1 s early).
        idle >= if self.pending { STALE_NS } else { IDLE_NS } / NS_PER_S
    }

    fn admit(&mut self, lease: u64, now_ns: u64) -> LeaseDecision {
        let now_ms = now_ns / NS_PER_MS;
        self.last_s = now_ns / NS_PER_S;
        if self.tokens > 0 && now_ms >= self.until_ms {
            self.tokens = 0;
            self.until_ms = 0;
        }
        if self.tokens > 0 {
            self.tokens -= 1;
            if self.tokens == 0 {
                self.until_ms = 0; // no deadline: the next one is on credit
            }
            let refill = self.tokens == 0 && !self.pending;
            self.pending |= refill;
            return LeaseDecision {
                admit: true,
                refill,
            };
        }
        if now_ms < self.until_ms {
            return LeaseDecision {
                admit: false,
                refill: false,
            };
        }
        let refill = !self.pending;
        self.pending = true;
        let admit = self.debt + self.charging < lease.clamp(1, COUNT_MAX);
        if admit {
            self.debt += 1;
        }
        LeaseDecision { admit, refill }
    }
}

/// The accept path's decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseDecision {
    /// Admit (false: refuse `cluster_rate_limited`).
    pub admit: bool,
    /// Queue a refill request for this client (it was marked in flight).
    pub refill: bool,
}

#[repr(align(64))]
struct Bucket([AtomicU128; BUCKET]);

// SAFETY: all-zero bytes are four `AtomicU128::new(0)` (free slots); no drop.
unsafe impl Zeroable for Bucket {}

#[inline]
fn fold(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    (p as u64) ^ ((p >> 64) as u64)
}

/// One node's leases, keyed by (listener port, client): see the module doc.
pub struct Leases {
    /// On huge pages where the kernel allows ([`super::pages`]): one TLB entry per 2 MiB.
    buckets: ZeroedPages<Bucket>,
    seeds: [u64; 4],
    /// Slots in use: counted where a free slot is taken, uncounted where `purge` frees one.
    count: AtomicUsize,
    /// Clients admitted without a lease because their bucket was full.
    pub untracked: AtomicU64,
}

impl Default for Leases {
    fn default() -> Leases {
        Leases::with_slots(MAX_CLIENTS)
    }
}

impl Leases {
    /// A table of `slots` slots (rounded up to whole buckets, a power of two of them).
    fn with_slots(slots: usize) -> Leases {
        let n = slots.div_ceil(BUCKET).next_power_of_two();
        let rs = RandomState::new();
        let mut seeds = [0u64; 4];
        for (i, s) in seeds.iter_mut().enumerate() {
            let mut h = rs.build_hasher();
            h.write_usize(i);
            *s = h.finish() | 1;
        }
        Leases {
            buckets: ZeroedPages::new(n),
            seeds,
            count: AtomicUsize::new(0),
            untracked: AtomicU64::new(0),
        }
    }

    /// Keyed folded-multiply hash of (port, client): picks the buckets and, folded once more, the
    /// tag.
    #[inline]
    fn hash(&self, port: u16, key: IpKey) -> u64 {
        let (bits, len) = key.raw();
        let s = &self.seeds;
        let h = fold((bits as u64) ^ s[0], ((bits >> 64) as u64) ^ s[1]);
        fold(h ^ s[2], (u64::from(len) | u64::from(port) << 8) ^ s[3])
    }

    /// The client's two candidate buckets: bits 0.. of the hash pick the first, bits 24.. the
    /// second (taken when the first is full).
    fn buckets_of(&self, h: u64) -> [&[AtomicU128; BUCKET]; 2] {
        let mask = self.buckets.len() - 1;
        [
            &self.buckets[h as usize & mask].0,
            &self.buckets[(h >> 24) as usize & mask].0,
        ]
    }

    /// Applies `f` to the lease of (`port`, `key`) by compare-and-swap (so `f` may run more than
    /// once, on fresh copies); `create`: a client without a slot takes a free one of its bucket.
    /// `None`: no slot (none held, or the bucket is full).
    #[inline]
    fn with<R>(
        &self,
        port: u16,
        key: IpKey,
        create: bool,
        now_ns: u64,
        mut f: impl FnMut(&mut Lease) -> R,
    ) -> Option<R> {
        let h = self.hash(port, key);
        // Its own fold: bucket bits are shared by all clients of a bucket, the tag's must not be.
        let tag = 0x8000_0000 | fold(h, self.seeds[1] ^ self.seeds[2]) as u32;
        let bs = self.buckets_of(h);
        let now_s = now_ns / NS_PER_S;
        'scan: loop {
            let mut free = None;
            for slot in bs.iter().flat_map(|b| b.iter()) {
                let mut w = slot.load(Ordering::Acquire);
                let e = Lease::unpack(w);
                if e.tag == tag {
                    loop {
                        let mut e = Lease::unpack(w);
                        if e.tag != tag {
                            continue 'scan; // taken by another client meanwhile
                        }
                        let r = f(&mut e);
                        match slot.compare_exchange_weak(
                            w,
                            e.pack(),
                            Ordering::AcqRel,
                            Ordering::Acquire,
                        ) {
                            Ok(_) => return Some(r),
                            Err(now) => w = now,
                        }
                    }
                }
                if free.is_none() && (w == 0 || e.reclaimable(now_s)) {
                    free = Some((slot, w));
                }
            }
            let (slot, w) = free.filter(|_| create)?;
            let mut e = Lease {
                tag,
                last_s: now_s,
                ..Lease::default()
            };
            let r = f(&mut e);
            if slot
                .compare_exchange(w, e.pack(), Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                if w == 0 {
                    self.count.fetch_add(1, Ordering::Relaxed);
                }
                return Some(r);
            }
        }
    }

    /// Starts loading the first candidate bucket of (`port`, `key`) into the cache (a hint, no
    /// effect on any decision): called before the engine's own lookup, the two cache misses of a
    /// decision overlap instead of following each other.
    #[inline]
    pub fn prefetch(&self, port: u16, key: IpKey) {
        let [first, _] = self.buckets_of(self.hash(port, key));
        prefetch(first.as_ptr());
    }

    /// Decides one connection of `key` on `port` at `now_ns` with leases of `lease` tokens.
    pub fn admit(&self, port: u16, key: IpKey, lease: u64, now_ns: u64) -> LeaseDecision {
        self.with(port, key, true, now_ns, |e| e.admit(lease, now_ns))
            .unwrap_or_else(|| {
                self.untracked.fetch_add(1, Ordering::Relaxed);
                LeaseDecision {
                    admit: true,
                    refill: false,
                }
            })
    }

    /// A refill request could not be queued: clears the in-flight mark (the next connection
    /// tries again).
    pub fn not_sent(&self, port: u16, key: IpKey) {
        self.with(port, key, false, 0, |e| e.pending = false);
    }

    /// The refill task takes the credit to charge with this request.
    pub fn take_debt(&self, port: u16, key: IpKey) -> u64 {
        self.with(port, key, false, 0, |e| {
            let d = e.debt;
            e.debt = 0;
            e.charging += d;
            d
        })
        .unwrap_or(0)
    }

    /// Redis answered at `now_ns`: `granted` tokens, and when none, `retry_after_ns` until one
    /// conforms.
    pub fn refilled(&self, port: u16, key: IpKey, granted: u64, retry_after_ns: u64, now_ns: u64) {
        self.with(port, key, true, now_ns, |e| {
            e.pending = false;
            e.charging = 0;
            e.tokens = granted.min(COUNT_MAX);
            e.until_ms = if granted > 0 {
                // Rounded down: lapses up to 1 ms early.
                now_ns.saturating_add(LEASE_TTL_NS) / NS_PER_MS
            } else {
                // Rounded up: a refusal never ends early.
                now_ns
                    .saturating_add(retry_after_ns.max(1))
                    .div_ceil(NS_PER_MS)
            };
        });
    }

    /// The refill failed (Redis unreachable): the credit it carried is owed again.
    pub fn failed(&self, port: u16, key: IpKey) {
        self.with(port, key, false, 0, |e| {
            e.pending = false;
            e.debt += e.charging;
            e.charging = 0;
        });
    }

    /// Frees slots idle for [`IDLE_NS`] with nothing in flight (or in flight for
    /// [`STALE_NS`]); returns how many remain in use.
    pub fn purge(&self, now_ns: u64) -> usize {
        let now_s = now_ns / NS_PER_S;
        let mut freed = 0;
        for slot in self.buckets.iter().flat_map(|b| b.0.iter()) {
            let mut w = slot.load(Ordering::Acquire);
            while w != 0 && Lease::unpack(w).reclaimable(now_s) {
                match slot.compare_exchange(w, 0, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => {
                        freed += 1;
                        break;
                    }
                    Err(now) => w = now,
                }
            }
        }
        self.count.fetch_sub(freed, Ordering::Relaxed) - freed
    }

    /// Clients with a slot.
    pub fn len(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    /// True when no client has a slot.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    const MS: u64 = 1_000_000;

    fn key(n: u8) -> IpKey {
        IpKey::v4(Ipv4Addr::new(10, 0, 0, n))
    }

    fn d(admit: bool, refill: bool) -> LeaseDecision {
        LeaseDecision { admit, refill }
    }

    #[test]
    fn a_new_client_is_admitted_on_credit_and_asks_once() {
        let l = Leases::default();
        assert_eq!(l.admit(1, key(1), 2, 0), d(true, true));
        assert_eq!(
            l.admit(1, key(1), 2, 1),
            d(true, false),
            "credit up to the lease"
        );
        assert_eq!(l.admit(1, key(1), 2, 2), d(false, false), "credit spent");
        assert_eq!(l.take_debt(1, key(1)), 2);
        l.refilled(1, key(1), 2, 0, 3 * MS);
        assert_eq!(l.admit(1, key(1), 2, 4 * MS), d(true, false));
        assert_eq!(
            l.admit(1, key(1), 2, 5 * MS),
            d(true, true),
            "the last token asks"
        );
        assert_eq!(
            l.admit(1, key(1), 2, 6 * MS),
            d(true, false),
            "credit while in flight"
        );
    }

    #[test]
    fn a_refusal_from_redis_holds_until_retry_after() {
        let l = Leases::default();
        assert!(l.admit(1, key(2), 1, 0).refill);
        l.take_debt(1, key(2));
        l.refilled(1, key(2), 0, 100 * MS, MS);
        assert_eq!(l.admit(1, key(2), 1, 50 * MS), d(false, false));
        assert_eq!(l.admit(1, key(2), 1, 100 * MS), d(false, false));
        assert_eq!(l.admit(1, key(2), 1, 101 * MS), d(true, true));
    }

    #[test]
    fn leased_tokens_lapse_and_failed_credit_is_owed_again() {
        let l = Leases::default();
        l.admit(1, key(3), 3, 0);
        assert_eq!(l.take_debt(1, key(3)), 1);
        l.failed(1, key(3));
        assert_eq!(l.take_debt(1, key(3)), 1, "the credit is charged later");
        l.refilled(1, key(3), 3, 0, 0);
        assert_eq!(
            l.admit(1, key(3), 3, LEASE_TTL_NS),
            d(true, true),
            "lapsed: credit"
        );
        assert_eq!(l.take_debt(1, key(3)), 1);
        // Ports are separate clients.
        assert_eq!(l.admit(2, key(3), 3, 0), d(true, true));
        assert_eq!(l.purge(IDLE_NS + LEASE_TTL_NS), 2, "in flight: kept");
        l.refilled(1, key(3), 1, 0, 0);
        l.refilled(2, key(3), 1, 0, 0);
        assert_eq!(l.purge(IDLE_NS + LEASE_TTL_NS), 0);
    }
}

#[cfg(test)]
mod table_tests {
    use super::*;
    use std::net::Ipv4Addr;

    const S: u64 = 1_000_000_000;

    fn key(n: u32) -> IpKey {
        IpKey::v4(Ipv4Addr::from(0x0a00_0000 | n))
    }

    /// `n` distinct clients whose (port 1) candidate buckets are both those of `key(0)`.
    fn same_bucket(l: &Leases, n: usize) -> Vec<IpKey> {
        let home = |k| l.buckets_of(l.hash(1, k)).map(|b| b.as_ptr());
        (0..)
            .map(key)
            .filter(|&k| home(k) == home(key(0)))
            .take(n)
            .collect()
    }

    #[test]
    fn a_slot_is_one_lock_free_word_and_packs_every_field() {
        assert!(AtomicU128::is_lock_free(), "the accept path takes no lock");
        assert_eq!(std::mem::size_of::<Bucket>(), 64, "one cache line");
        let e = Lease {
            tag: 0x8000_0001,
            tokens: COUNT_MAX,
            debt: 9999,
            charging: 1,
            pending: true,
            last_s: SECS_MASK,
            until_ms: MS_MAX,
        };
        assert_eq!(Lease::unpack(e.pack()), e);
        assert_eq!(Lease::unpack(Lease::default().pack()), Lease::default());
        assert_eq!(Leases::default().buckets.len() * BUCKET, MAX_CLIENTS);
    }

    #[test]
    fn clients_sharing_a_bucket_keep_separate_leases() {
        let l = Leases::with_slots(BUCKET);
        let ks = same_bucket(&l, BUCKET);
        for (i, &k) in ks.iter().enumerate() {
            assert_eq!(
                l.admit(1, k, 3, 0),
                LeaseDecision {
                    admit: true,
                    refill: true
                }
            );
            assert_eq!(l.take_debt(1, k), 1);
            l.refilled(1, k, i as u64 + 1, 0, 0);
        }
        assert_eq!(l.len(), BUCKET);
        for (i, &k) in ks.iter().enumerate() {
            for t in 0..=i {
                assert_eq!(
                    l.admit(1, k, 3, S / 2),
                    LeaseDecision {
                        admit: true,
                        refill: t == i
                    },
                    "client {i}, token {t}"
                );
            }
        }
        // The same client on another port is another client.
        assert_eq!(l.take_debt(2, ks[0]), 0);
    }

    #[test]
    fn a_full_bucket_admits_untracked_until_a_slot_is_idle() {
        let l = Leases::with_slots(BUCKET);
        let ks = same_bucket(&l, BUCKET + 1);
        for &k in &ks[..BUCKET] {
            assert!(l.admit(1, k, 1, 0).refill);
            l.refilled(1, k, 1, 0, 0); // nothing in flight
        }
        let late = ks[BUCKET];
        assert_eq!(
            l.admit(1, late, 1, S),
            LeaseDecision {
                admit: true,
                refill: false
            }
        );
        assert_eq!(
            l.admit(1, late, 1, S),
            LeaseDecision {
                admit: true,
                refill: false
            }
        );
        assert_eq!(l.untracked.load(Ordering::Relaxed), 2);
        assert_eq!(l.len(), BUCKET, "no memory for the newcomer");
        // After IDLE_NS unused, a slot is the newcomer's (no purge needed).
        let t = IDLE_NS + S;
        assert_eq!(
            l.admit(1, late, 1, t),
            LeaseDecision {
                admit: true,
                refill: true
            }
        );
        assert_eq!(l.len(), BUCKET);
        assert_eq!(l.take_debt(1, late), 1);
        let held = |k| l.with(1, k, false, 0, |_| ()).is_some();
        let kept = ks[..BUCKET].iter().filter(|&&k| held(k)).count();
        assert_eq!(kept, BUCKET - 1, "exactly one old client gave up its slot");
        assert_eq!(
            l.purge(t),
            1,
            "the old ones are idle; the newcomer is in flight"
        );
    }

    #[test]
    fn a_client_whose_first_bucket_is_full_takes_its_second() {
        let l = Leases::with_slots(BUCKET * 2);
        let b = |i: usize| l.buckets[i].0.as_ptr();
        let ks: Vec<IpKey> = (0..)
            .map(key)
            .filter(|&k| l.buckets_of(l.hash(1, k)).map(|x| x.as_ptr()) == [b(0), b(1)])
            .take(2 * BUCKET + 1)
            .collect();
        for &k in &ks[..2 * BUCKET] {
            assert_eq!(
                l.admit(1, k, 1, 0),
                LeaseDecision {
                    admit: true,
                    refill: true
                }
            );
        }
        assert_eq!(l.len(), 2 * BUCKET);
        assert_eq!(l.untracked.load(Ordering::Relaxed), 0);
        for &k in &ks[..2 * BUCKET] {
            assert_eq!(l.take_debt(1, k), 1, "each found again in its bucket");
        }
        assert!(
            !l.admit(1, ks[2 * BUCKET], 1, 0).refill,
            "both full: untracked"
        );
        assert_eq!(l.untracked.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_slot_in_flight_is_kept_until_stale() {
        let l = Leases::with_slots(BUCKET);
        let ks = same_bucket(&l, BUCKET + 1);
        for &k in &ks[..BUCKET] {
            assert!(l.admit(1, k, 1, 0).refill); // refills never answered
        }
        let late = ks[BUCKET];
        assert!(!l.admit(1, late, 1, IDLE_NS + S).refill, "in flight: kept");
        assert_eq!(l.purge(IDLE_NS + S), BUCKET);
        assert!(
            l.admit(1, late, 1, STALE_NS + S).refill,
            "a lost answer frees it"
        );
        assert_eq!(l.purge(STALE_NS + S), 1);
        assert_eq!(l.len(), 1);
    }

    #[test]
    fn an_ip_diverse_flood_stays_within_max_clients() {
        let l = Leases::default();
        let n = MAX_CLIENTS as u32 + MAX_CLIENTS as u32 / 2;
        let mut admitted = 0u64;
        for i in 0..n {
            // Lease 2: two clients sharing a tag (2⁻³¹ a pair) still get their first one each.
            admitted += u64::from(l.admit(1, key(i), 2, 0).admit);
        }
        assert_eq!(
            admitted,
            u64::from(n),
            "fail-open: the first connection is admitted"
        );
        let held = l.len();
        assert!(held <= MAX_CLIENTS, "{held} slots");
        assert!(
            held > MAX_CLIENTS * 17 / 20,
            "{held} slots: buckets fill up"
        );
        let untracked = l.untracked.load(Ordering::Relaxed);
        assert!(
            untracked >= u64::from(n) - MAX_CLIENTS as u64,
            "{untracked} untracked"
        );
    }

    #[test]
    fn threads_never_lose_an_admission() {
        let l = std::sync::Arc::new(Leases::with_slots(64));
        let k = key(7);
        l.admit(1, k, 1, 0);
        l.take_debt(1, k);
        l.refilled(1, k, 10_000, 0, 0);
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let l = l.clone();
                std::thread::spawn(move || {
                    (0..2_000)
                        .filter(|_| l.admit(1, k, 10_000, 1).admit)
                        .count()
                })
            })
            .collect();
        let n: usize = hs.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(n, 8_000);
        // 10 000 tokens − 8 000 spent: 2 000 left, then credit.
        for _ in 0..1_999 {
            assert!(!l.admit(1, k, 10_000, 1).refill);
        }
        assert!(l.admit(1, k, 10_000, 1).refill, "the last token asks");
    }
}
