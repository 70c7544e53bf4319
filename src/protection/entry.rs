//! One tracked client's (or prefix's) state: the fixed-size entry the tables hold inline, and its
//! standing, held beside it.
//!
//! **Entry** (48 bytes, asserted at compile time): the key (128 bits + prefix length), the two
//! GCRA TATs (`rateLimit`, `sustained`, CLOCK_MONOTONIC ns; 0 = never), the penalty-box word (see
//! [`super::penalty`]), the active-connection count (released by the table's `ConnGuard`), the
//! pending-handshake count (released by `PendingGuard`, at most [`MAX_PENDING`]) and one flag
//! byte — 3 bits saying which blocked-list side sets hold the key ([`FLAG_RATE`], [`FLAG_CONC`],
//! [`FLAG_BOX`], see [`super::blocked`]), 5 bits ([`TAG_BITS`]) of the rate-limit generation the
//! TATs are written in (see [`super::rescale`]). This is everything an admission decision reads
//! without defense mode or `listenerLimit`: one entry, at most two cache lines.
//!
//! **Standing** (16 bytes, asserted at compile time), in a parallel array of the same shard (same
//! slot index, moved with the entry): the `requestLimit` GCRA TAT (CLOCK_MONOTONIC ns, 0 =
//! never), the known-good deadline (CLOCK_MONOTONIC seconds, rounded up, 0 = never), the
//! penalty-box escalation level (repeat boxes within `escalation.memoryMs`), a mark byte
//! ([`MARK_KNOWN_GOOD`]: counted in the engine's known-good gauge; [`MARK_NEW`]: first seen
//! while defense mode was on) and the known-good mark's age (seconds from its first marking to
//! its deadline, saturating: when the client earned its standing). It is read only by the paths
//! that need it (a request decision, defense mode, the listener budget, a box that starts with
//! escalation, the pending count, known-good marks, eviction), so the connection decision does
//! not touch its cache line. The request TAT lives here rather than in the entry: the entry stays
//! 48 bytes (64 with a cluster lease, one cache line), and a request decision reads the key in
//! the entry and this word, nothing else. An entry and its standing are only read or written
//! under their shard lock ([`super::table`]).
//!
//! A prefix-tier entry ([`super::engine`]'s second table) uses the same layout: `tat_rate` is the
//! prefix's `prefixLimit` TAT, `penalty` and the standing's `level` its box, `active` the
//! connections of all its clients, the standing's `tat_request` its `requestLimit` prefix budget;
//! `tat_sustained`, `pending` and the known-good fields stay 0.

use super::key::IpKey;

/// Bits of the rate-limit generation kept in each entry's flag byte.
pub(crate) const TAG_BITS: u32 = 5;

/// Side-set flag: the key is in the rate-limited list.
pub(crate) const FLAG_RATE: u8 = 1;
/// Side-set flag: the key is in the concurrency-limited list.
pub(crate) const FLAG_CONC: u8 = 2;
/// Side-set flag: the key is in the penalty-boxed list.
pub(crate) const FLAG_BOX: u8 = 4;
/// The side-set bits of [`Entry::flags`]; the bits above hold the generation tag.
pub(crate) const SIDE_FLAGS: u8 = FLAG_RATE | FLAG_CONC | FLAG_BOX;
const TAG_SHIFT: u32 = 3;
const _: () = assert!(SIDE_FLAGS >> TAG_SHIFT == 0 && TAG_SHIFT + TAG_BITS == 8);

/// Mark: the entry holds a known-good deadline counted in the engine's known-good gauge.
pub(crate) const MARK_KNOWN_GOOD: u8 = 1;
/// Mark: the client was first seen while defense mode was on (and has not been known-good since).
pub(crate) const MARK_NEW: u8 = 2;

/// One tracked client. Only ever accessed under its shard lock.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Entry {
    key_lo: u64,
    key_hi: u64,
    /// GCRA TAT of `rateLimit` (ns; 0 = never).
    pub tat_rate: u64,
    /// GCRA TAT of `sustained` (ns; 0 = never).
    pub tat_sustained: u64,
    /// Penalty-box word (see `penalty`).
    pub penalty: u64,
    /// Admitted connections still open.
    pub active: u32,
    /// Handshakes in progress.
    pub pending: u16,
    len: u8,
    /// Bits 0..3: which side sets hold this key (`FLAG_*`); bits 3..8: the rate-limit generation
    /// tag (read and written through [`Entry::tag`] and [`Entry::set_tag`]).
    pub flags: u8,
}

const _: () = assert!(std::mem::size_of::<Entry>() == 48);

/// What a client's entry remembers of its behaviour, beside the entry (see the module doc).
/// Only ever accessed under its shard lock.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Standing {
    /// GCRA TAT of `requestLimit` (ns; 0 = never); not rescaled by a policy swap (a changed
    /// limit reads the same TAT: at most one old burst of waiting carries over).
    pub tat_request: u64,
    /// Known-good until this CLOCK_MONOTONIC second (0 = never).
    pub known_good_s: u32,
    /// Penalty-box escalation level: boxes in a row, each within `memoryMs` of the last one's
    /// deadline (0 = first box).
    pub level: u8,
    /// `MARK_*` bits.
    pub marks: u8,
    /// Seconds from the running known-good mark's first marking (rounded up) to `known_good_s`,
    /// saturating at `u16::MAX` (18.2 h): a refreshed mark keeps its first-marked time.
    pub known_good_age_s: u16,
}

const _: () = assert!(std::mem::size_of::<Standing>() == 16);

impl Standing {
    /// A standing holding only `marks`.
    #[inline]
    pub(crate) fn with_marks(marks: u8) -> Standing {
        Standing {
            marks,
            ..Standing::default()
        }
    }

    /// Whether the known-good mark runs at `now_ns`.
    #[inline]
    pub(crate) fn known_good(&self, now_ns: u64) -> bool {
        u64::from(self.known_good_s) * crate::clock::NS_PER_SEC > now_ns
    }

    /// The latest the running known-good mark can have been first set (CLOCK_MONOTONIC ns,
    /// rounded up to the second; with a saturated age, 18.2 h before its deadline).
    #[inline]
    pub(crate) fn known_good_since_ns(&self) -> u64 {
        let s = self
            .known_good_s
            .saturating_sub(u32::from(self.known_good_age_s));
        u64::from(s) * crate::clock::NS_PER_SEC
    }
}

/// Largest per-client pending count (`slowHandshake.maxPendingPerIp` is validated below it).
pub(crate) const MAX_PENDING: u64 = u16::MAX as u64;

impl Entry {
    #[inline]
    pub(crate) fn key(&self) -> IpKey {
        IpKey::from_raw(
            (u128::from(self.key_hi) << 64) | u128::from(self.key_lo),
            self.len,
        )
    }

    #[inline]
    pub(crate) fn is(&self, key: IpKey) -> bool {
        let (bits, len) = key.raw();
        self.key_lo == bits as u64 && self.key_hi == (bits >> 64) as u64 && self.len == len
    }

    #[inline]
    pub(crate) fn fresh(key: IpKey, tag: u8) -> Entry {
        let (bits, len) = key.raw();
        let mut e = Entry {
            key_lo: bits as u64,
            key_hi: (bits >> 64) as u64,
            len,
            ..Entry::default()
        };
        e.set_tag(tag);
        e
    }

    /// The rate-limit generation (mod 32) the TATs are written in.
    #[inline]
    pub(crate) fn tag(&self) -> u8 {
        self.flags >> TAG_SHIFT
    }

    /// Records the generation tag (`< 32`), keeping the side-set flags.
    #[inline]
    pub(crate) fn set_tag(&mut self, tag: u8) {
        self.flags = (self.flags & SIDE_FLAGS) | (tag << TAG_SHIFT);
    }
}
