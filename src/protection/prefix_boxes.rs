//! Prefix boxes received from another node (the cluster tier, docs/cluster.md):
//! a prefix of another node's prefix tier in the penalty box, held here until its deadline.
//!
//! **Why not the prefix table**: a boxed prefix in the table lives in an entry whose box word
//! belongs to this node's penalty-box epoch and is read only by the prefix tier, so it would not
//! hold on a listener without `prefixLimit` or `penaltyBox`. A received box must hold whatever the
//! local policy is, exactly for its remaining time, as a received client box does (`offenders`).
//!
//! **Rule**: a client whose address lies in a running received prefix box is refused
//! `penalty_boxed` at accept (observed in observe mode), listed under `penaltyBoxed` as the
//! prefix (CIDR, note [`super::PREFIX_NOTE`]) like a local prefix box, and handed to the box
//! listener as a prefix (the XDP prefix-ban trie). A deadline only moves forward.
//!
//! **Cost at accept**: one relaxed load of the number of running boxes; only when it is non-zero,
//! one lock-free load of the prefix lengths present and one map lookup per length (usually one).
//!
//! **Memory**: one map entry per received prefix, at most [`MAX_PREFIX_BOXES`]; ended ones are
//! dropped by [`PrefixBoxes::purge`] (the engine's background tick).

use super::key::IpKey;
use arc_swap::ArcSwap;
use dashmap::DashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Received prefix boxes kept at most per engine (beyond: a new one is not held here; the
/// sending node and the kernel, through the box listener, still enforce it).
pub(crate) const MAX_PREFIX_BOXES: usize = 65_536;

/// The received prefix boxes of one engine.
#[derive(Default)]
pub(crate) struct PrefixBoxes {
    boxes: DashMap<IpKey, u64>,
    /// Entries in `boxes` (running or ended, not yet purged).
    count: AtomicUsize,
    /// The distinct (IPv4?, prefix length) pairs present, for the lookup.
    lens: ArcSwap<Vec<(bool, u8)>>,
}

impl PrefixBoxes {
    /// Boxes the prefix `key` until `deadline_ns` (a later running deadline is kept); returns
    /// the deadline in force, or `None` when the set is full.
    pub(crate) fn put(&self, key: IpKey, deadline_ns: u64) -> Option<u64> {
        if !self.boxes.contains_key(&key) && self.count.load(Ordering::Relaxed) >= MAX_PREFIX_BOXES
        {
            return None;
        }
        let mut e = self.boxes.entry(key).or_insert_with(|| {
            self.count.fetch_add(1, Ordering::Relaxed);
            0
        });
        *e = (*e).max(deadline_ns);
        let d = *e;
        drop(e);
        let len = (key.is_ipv4(), key.prefix_len());
        if !self.lens.load().contains(&len) {
            self.lens.rcu(|l| {
                let mut l = (**l).clone();
                if !l.contains(&len) {
                    l.push(len);
                }
                l
            });
        }
        Some(d)
    }

    /// Whether the prefix `key` itself is boxed at `now_ns`.
    pub(crate) fn is_running(&self, key: IpKey, now_ns: u64) -> bool {
        self.boxes.get(&key).is_some_and(|d| now_ns < *d)
    }

    /// The running box holding `ip` at `now_ns`, if any (one relaxed load when none).
    #[inline]
    pub(crate) fn holding(&self, ip: IpAddr, now_ns: u64) -> Option<(IpKey, u64)> {
        if self.count.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let v4 = ip.to_canonical().is_ipv4();
        self.lens
            .load()
            .iter()
            .filter(|(f, _)| *f == v4)
            .find_map(|&(_, len)| {
                let key = IpKey::prefix(ip, len, len);
                self.boxes
                    .get(&key)
                    .map(|d| *d)
                    .filter(|d| now_ns < *d)
                    .map(|d| (key, d))
            })
    }

    /// Every running box with its deadline (ns), in O(boxes).
    pub(crate) fn running(&self, now_ns: u64) -> Vec<(IpKey, u64)> {
        if self.count.load(Ordering::Relaxed) == 0 {
            return Vec::new();
        }
        let mut out: Vec<(IpKey, u64)> = self
            .boxes
            .iter()
            .filter(|e| now_ns < *e.value())
            .map(|e| (*e.key(), *e.value()))
            .collect();
        out.sort_unstable();
        out
    }

    /// Drops ended boxes (and the lengths no box uses any more).
    pub(crate) fn purge(&self, now_ns: u64) {
        if self.count.load(Ordering::Relaxed) == 0 {
            return;
        }
        self.boxes.retain(|_, d| now_ns < *d);
        self.count.store(self.boxes.len(), Ordering::Relaxed);
        let mut lens: Vec<(bool, u8)> = Vec::new();
        for e in self.boxes.iter() {
            let l = (e.key().is_ipv4(), e.key().prefix_len());
            if !lens.contains(&l) {
                lens.push(l);
            }
        }
        self.lens.store(Arc::new(lens));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_prefix_holds_its_addresses_until_its_deadline() {
        let b = PrefixBoxes::default();
        assert_eq!(b.holding(ip("203.0.113.9"), 0), None);
        let k = IpKey::prefix(ip("203.0.113.0"), 24, 24);
        assert_eq!(b.put(k, 1_000), Some(1_000));
        assert_eq!(b.put(k, 500), Some(1_000), "a deadline only moves forward");
        assert_eq!(b.holding(ip("203.0.113.9"), 999), Some((k, 1_000)));
        assert_eq!(b.holding(ip("::ffff:203.0.113.9"), 999), Some((k, 1_000)));
        assert_eq!(b.holding(ip("203.0.114.9"), 999), None);
        assert_eq!(b.holding(ip("203.0.113.9"), 1_000), None, "ended");
        let k6 = IpKey::prefix(ip("2001:db8:1::"), 24, 48);
        b.put(k6, 2_000);
        assert_eq!(b.holding(ip("2001:db8:1:2::7"), 1_500), Some((k6, 2_000)));
        assert_eq!(b.holding(ip("2001:db8:2::7"), 1_500), None);
        assert_eq!(b.running(1_500), vec![(k6, 2_000)]);
        b.purge(1_500);
        assert_eq!(b.count.load(Ordering::Relaxed), 1);
        assert_eq!(**b.lens.load(), vec![(false, 48)]);
        b.purge(2_000);
        assert_eq!(b.holding(ip("2001:db8:1:2::7"), 0), None);
    }
}
