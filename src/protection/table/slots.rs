//! A shard's entry array in one of two layouts: plain 48-byte [`Entry`]s, or — while the policy
//! has `clusterRateLimit` — each entry with its cluster [`Lease`] in one 64-byte, 64-aligned
//! [`Leased`] slot, so the clustered admission reads the entry and takes its token from one cache
//! line (a parallel lease array costs a second line per decision: 1.15× the plain admission's
//! time at 100,000 clients, against one line here; BENCHMARKS.md, Cluster tier). Listeners
//! without the cluster limit keep the 48-byte layout (74–93 bytes per tracked client with the
//! standing and control byte); a leased one costs 81 bytes per slot, what the parallel array did.
//! A shard switches layout under its lock ([`Slots::keep_leases`], [`Slots::drop_leases`]).

use crate::protection::entry::Entry;
use crate::protection::lease::Lease;

/// An entry and its cluster lease, one cache line.
#[repr(C, align(64))]
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Leased {
    entry: Entry,
    lease: Lease,
}

const _: () = assert!(std::mem::size_of::<Leased>() == 64);

/// What a slot of either layout holds: an entry.
pub(super) trait HasEntry {
    fn entry(&self) -> &Entry;
}

impl HasEntry for Entry {
    #[inline(always)]
    fn entry(&self) -> &Entry {
        self
    }
}

impl HasEntry for Leased {
    #[inline(always)]
    fn entry(&self) -> &Entry {
        &self.entry
    }
}

/// The entries of one shard, indexed like its control bytes.
pub(super) enum Slots {
    Plain(Vec<Entry>),
    Leased(Vec<Leased>),
}

impl Slots {
    /// `cap` empty slots of the same layout as `self`.
    pub(super) fn empty_like(&self, cap: usize) -> Slots {
        match self {
            Slots::Plain(_) => Slots::Plain(vec![Entry::default(); cap]),
            Slots::Leased(_) => Slots::Leased(vec![Leased::default(); cap]),
        }
    }

    /// Whether the slots keep leases.
    #[inline]
    pub(super) fn leased(&self) -> bool {
        matches!(self, Slots::Leased(_))
    }

    #[inline]
    pub(super) fn entry(&self, pos: usize) -> &Entry {
        match self {
            Slots::Plain(v) => &v[pos],
            Slots::Leased(v) => &v[pos].entry,
        }
    }

    #[inline]
    pub(super) fn entry_mut(&mut self, pos: usize) -> &mut Entry {
        match self {
            Slots::Plain(v) => &mut v[pos],
            Slots::Leased(v) => &mut v[pos].entry,
        }
    }

    /// The lease at `pos` (`None` in the plain layout).
    #[inline]
    pub(super) fn lease(&self, pos: usize) -> Option<&Lease> {
        match self {
            Slots::Plain(_) => None,
            Slots::Leased(v) => Some(&v[pos].lease),
        }
    }

    /// The entry and (leased layout) the lease at `pos`.
    #[inline]
    pub(super) fn parts(&mut self, pos: usize) -> (&mut Entry, Option<&mut Lease>) {
        match self {
            Slots::Plain(v) => (&mut v[pos], None),
            Slots::Leased(v) => {
                let s = &mut v[pos];
                (&mut s.entry, Some(&mut s.lease))
            }
        }
    }

    /// Puts `e` (with a fresh lease) at `pos`.
    #[inline]
    pub(super) fn put(&mut self, pos: usize, e: Entry) {
        match self {
            Slots::Plain(v) => v[pos] = e,
            Slots::Leased(v) => {
                v[pos] = Leased {
                    entry: e,
                    lease: Lease::default(),
                }
            }
        }
    }

    /// Copies slot `from` (entry and lease) to `to`.
    #[inline]
    pub(super) fn copy_within(&mut self, from: usize, to: usize) {
        match self {
            Slots::Plain(v) => v[to] = v[from],
            Slots::Leased(v) => v[to] = v[from],
        }
    }

    /// Empties slot `pos`.
    #[inline]
    pub(super) fn clear(&mut self, pos: usize) {
        match self {
            Slots::Plain(v) => v[pos] = Entry::default(),
            Slots::Leased(v) => v[pos] = Leased::default(),
        }
    }

    /// Copies slot `from` of `old` (same layout) to `to`.
    #[inline]
    pub(super) fn copy_from(&mut self, old: &Slots, from: usize, to: usize) {
        match (self, old) {
            (Slots::Plain(v), Slots::Plain(o)) => v[to] = o[from],
            (Slots::Leased(v), Slots::Leased(o)) => v[to] = o[from],
            _ => unreachable!("a shard's arrays share one layout"),
        }
    }

    /// From now on every slot keeps a lease (fresh ones for the entries held): one allocation of
    /// `len × 64` bytes, the plain array freed. No-op when already leased.
    pub(super) fn keep_leases(&mut self) {
        if let Slots::Plain(v) = self {
            let leased = v
                .iter()
                .map(|&entry| Leased {
                    entry,
                    lease: Lease::default(),
                })
                .collect();
            *self = Slots::Leased(leased);
        }
    }

    /// Back to the plain layout (the leases are dropped). No-op when plain.
    pub(super) fn drop_leases(&mut self) {
        if let Slots::Leased(v) = self {
            let plain = v.iter().map(|s| s.entry).collect();
            *self = Slots::Plain(plain);
        }
    }

    /// The array's address and slot size in bytes (for prefetch hints).
    pub(super) fn base(&mut self) -> (*mut u8, usize) {
        match self {
            Slots::Plain(v) => (v.as_mut_ptr().cast(), std::mem::size_of::<Entry>()),
            Slots::Leased(v) => (v.as_mut_ptr().cast(), std::mem::size_of::<Leased>()),
        }
    }

    /// Heap bytes held.
    pub(super) fn bytes(&self) -> usize {
        match self {
            Slots::Plain(v) => v.capacity() * std::mem::size_of::<Entry>(),
            Slots::Leased(v) => v.capacity() * std::mem::size_of::<Leased>(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protection::key::IpKey;
    use std::net::{IpAddr, Ipv4Addr};

    fn entry(i: u32) -> Entry {
        Entry::fresh(IpKey::new(IpAddr::V4(Ipv4Addr::from(i)), 64), 3)
    }

    /// Leased slots are one aligned cache line each; switching layout keeps every entry, gives
    /// each a fresh lease, and switching back drops them.
    #[test]
    fn layouts_switch_keeping_entries() {
        let mut s = Slots::Plain(vec![Entry::default(); 1000]);
        for i in 0..1000 {
            s.put(i, entry(i as u32));
        }
        s.keep_leases();
        assert!(s.leased());
        let (base, stride) = s.base();
        assert_eq!((base as usize % 64, stride), (0, 64));
        for i in 0..1000 {
            assert!(s.entry(i).is(entry(i as u32).key()));
            assert_eq!(s.lease(i), Some(&Lease::default()));
        }
        s.parts(7).1.expect("a lease").admit(10, 0);
        assert!(s.lease(7).is_some_and(|l| l.held()));
        s.copy_within(7, 8);
        assert!(s.entry(8).is(entry(7).key()) && s.lease(8).is_some_and(|l| l.held()));
        s.put(8, entry(8));
        assert_eq!(s.lease(8), Some(&Lease::default()));
        let grown = {
            let mut g = s.empty_like(2000);
            g.copy_from(&s, 7, 1500);
            g
        };
        assert!(grown.leased() && grown.lease(1500).is_some_and(|l| l.held()));
        s.drop_leases();
        assert!(!s.leased() && s.lease(7).is_none());
        assert_eq!(s.bytes(), 1000 * 48);
        for i in 0..1000 {
            assert!(s.entry(i).is(entry(i as u32).key()));
        }
        s.clear(3);
        assert!(!s.entry(3).is(entry(3).key()));
    }
}
