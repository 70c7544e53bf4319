//! Offenders: clients boxed for what they did on an admitted connection rather than for how
//! often they connect — today the HTTP/2 guard's violations.
//!
//! **Rule**: a client whose `threshold`-th violation falls within `window` of its oldest counted
//! one is boxed until `now + duration` (a running box only moves forward). The window slides
//! exactly: each record keeps the times of its violations inside the window (at most
//! `threshold` of them), and a violation first drops those older than `now − window`. A box is
//! checked at accept ([`Offenders::is_boxed`]); it neither reads nor moves the per-client rate
//! limits, so it ends at its deadline whatever the client does meanwhile (a client that keeps
//! flooding on its next admitted connection earns the next box).
//!
//! **Why not the per-client table**: a violation may come from a listener without protection
//! (the guard is on by default everywhere), where admission never touches the table, and a box
//! must hold there too. Violations are rare next to admissions — each one costs the client a TLS
//! handshake and a connection — so a sharded map beside the table is enough.
//!
//! **Cost at accept**: one relaxed load of the number of running boxes; only when it is non-zero
//! one map lookup (a shard read lock). So a listener whose clients never violated pays one load.
//!
//! **Memory**: a record is its key, its box deadline and a queue of at most `threshold`
//! violation times (≤ 8 KB at the largest `boxAfterViolations`, 1000; about 100 bytes at the
//! default 3). At most [`MAX_OFFENDERS`] records: beyond that a new client's violation is not
//! counted (its connection is still closed). Records whose box ended and whose violations all
//! left the window are purged by [`Offenders::purge`] (the engine's background tick).

use super::key::IpKey;
use dashmap::DashMap;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Records kept at most (clients with a recent violation or a running box).
pub(crate) const MAX_OFFENDERS: usize = 65_536;

/// Ns between two purges of expired records.
const PURGE_EVERY_NS: u64 = crate::clock::NS_PER_SEC;

#[derive(Debug, Default)]
struct Record {
    /// Times (ns) of the violations still inside the window, oldest first.
    recent: VecDeque<u64>,
    /// End of the box (ns; 0 = never boxed or purged).
    box_deadline_ns: u64,
}

/// The offenders of one engine.
#[derive(Debug, Default)]
pub(crate) struct Offenders {
    records: DashMap<IpKey, Record>,
    /// Records with a box deadline set (running, or ended but not yet purged).
    boxed: AtomicUsize,
    next_purge_ns: AtomicU64,
}

impl Offenders {
    /// Counts one violation of `key` at `now_ns`; when it is the `threshold`-th within
    /// `window_ns`, boxes the client until `now_ns + duration_ns` and returns that deadline.
    pub(crate) fn violation(
        &self,
        key: IpKey,
        now_ns: u64,
        threshold: u32,
        window_ns: u64,
        duration_ns: u64,
    ) -> Option<u64> {
        if !self.records.contains_key(&key) && self.records.len() >= MAX_OFFENDERS {
            return None;
        }
        let mut r = self.records.entry(key).or_default();
        let since = now_ns.saturating_sub(window_ns);
        while r.recent.front().is_some_and(|&t| t < since) {
            r.recent.pop_front();
        }
        r.recent.push_back(now_ns);
        if r.recent.len() < threshold.max(1) as usize {
            return None;
        }
        r.recent.clear();
        Some(self.extend(&mut r, now_ns.saturating_add(duration_ns)))
    }

    /// Boxes `key` until `deadline_ns` (a later running deadline is kept); returns the deadline
    /// in force.
    pub(crate) fn put_in_box(&self, key: IpKey, deadline_ns: u64) -> u64 {
        let mut r = self.records.entry(key).or_default();
        self.extend(&mut r, deadline_ns)
    }

    fn extend(&self, r: &mut Record, deadline_ns: u64) -> u64 {
        if r.box_deadline_ns == 0 {
            self.boxed.fetch_add(1, Ordering::Relaxed);
        }
        r.box_deadline_ns = r.box_deadline_ns.max(deadline_ns);
        r.box_deadline_ns
    }

    /// The box deadline (ns) recorded for `key`, if it has a record with one.
    pub(crate) fn box_deadline(&self, key: IpKey) -> Option<u64> {
        self.records
            .get(&key)
            .map(|r| r.box_deadline_ns)
            .filter(|d| *d != 0)
    }

    /// Whether `key` is boxed at `now_ns` (one relaxed load when nobody is boxed).
    #[inline]
    pub(crate) fn is_boxed(&self, key: IpKey, now_ns: u64) -> bool {
        if self.boxed.load(Ordering::Relaxed) == 0 {
            return false;
        }
        self.records
            .get(&key)
            .is_some_and(|r| now_ns < r.box_deadline_ns)
    }

    /// Every running box with its deadline (ns), in O(records).
    pub(crate) fn boxed(&self, now_ns: u64) -> Vec<(IpKey, u64)> {
        if self.boxed.load(Ordering::Relaxed) == 0 {
            return Vec::new();
        }
        self.records
            .iter()
            .filter(|r| now_ns < r.box_deadline_ns)
            .map(|r| (*r.key(), r.box_deadline_ns))
            .collect()
    }

    /// Drops records with no running box and no violation inside `window_ns`; at most once per
    /// second (O(records) when it runs).
    pub(crate) fn purge(&self, now_ns: u64, window_ns: u64) {
        let next = self.next_purge_ns.load(Ordering::Relaxed);
        if now_ns < next || self.records.is_empty() {
            return;
        }
        self.next_purge_ns
            .store(now_ns.saturating_add(PURGE_EVERY_NS), Ordering::Relaxed);
        let since = now_ns.saturating_sub(window_ns);
        self.records.retain(|_, r| {
            if r.box_deadline_ns != 0 && now_ns >= r.box_deadline_ns {
                r.box_deadline_ns = 0;
                self.boxed.fetch_sub(1, Ordering::Relaxed);
            }
            while r.recent.front().is_some_and(|&t| t < since) {
                r.recent.pop_front();
            }
            r.box_deadline_ns != 0 || !r.recent.is_empty()
        });
    }

    /// Records held (clients with a recent violation or a box not yet purged).
    pub(crate) fn len(&self) -> usize {
        self.records.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    const S: u64 = crate::clock::NS_PER_SEC;

    fn key(n: u8) -> IpKey {
        IpKey::v4(Ipv4Addr::new(192, 0, 2, n))
    }

    #[test]
    fn the_threshold_th_violation_within_the_window_boxes() {
        let o = Offenders::default();
        let k = key(1);
        assert_eq!(o.violation(k, 10 * S, 3, 60 * S, 600 * S), None);
        assert_eq!(o.violation(k, 20 * S, 3, 60 * S, 600 * S), None);
        assert!(!o.is_boxed(k, 20 * S));
        assert_eq!(o.violation(k, 69 * S, 3, 60 * S, 600 * S), Some(669 * S));
        assert!(o.is_boxed(k, 69 * S) && o.is_boxed(k, 669 * S - 1));
        assert!(!o.is_boxed(k, 669 * S));
        assert!(!o.is_boxed(key(2), 100 * S));
    }

    #[test]
    fn violations_older_than_the_window_do_not_count() {
        let o = Offenders::default();
        let k = key(1);
        o.violation(k, 0, 3, 60 * S, 600 * S);
        o.violation(k, 30 * S, 3, 60 * S, 600 * S);
        // 0 s left the window at 60 s + 1 ns: only 30 s and this one count.
        assert_eq!(o.violation(k, 60 * S + 1, 3, 60 * S, 600 * S), None);
        assert_eq!(
            o.violation(k, 61 * S, 3, 60 * S, 600 * S),
            Some(661 * S),
            "30 s, 60 s and 61 s are within 60 s"
        );
    }

    #[test]
    fn purge_forgets_ended_boxes_and_quiet_clients() {
        let o = Offenders::default();
        o.violation(key(1), 0, 1, 60 * S, 10 * S);
        o.violation(key(2), 0, 3, 60 * S, 10 * S);
        assert_eq!((o.len(), o.boxed.load(Ordering::Relaxed)), (2, 1));
        o.purge(5 * S, 60 * S);
        assert_eq!(o.len(), 2);
        o.purge(61 * S, 60 * S);
        assert_eq!((o.len(), o.boxed.load(Ordering::Relaxed)), (0, 0));
        assert!(!o.is_boxed(key(1), 61 * S));
    }

    #[test]
    fn a_box_only_moves_forward_and_records_are_capped() {
        let o = Offenders::default();
        assert_eq!(o.put_in_box(key(1), 100), 100);
        assert_eq!(o.put_in_box(key(1), 50), 100);
        assert_eq!(o.boxed(0), vec![(key(1), 100)]);
        assert_eq!(o.boxed(100), vec![]);
        let o = Offenders::default();
        for i in 0..MAX_OFFENDERS as u32 {
            let k = IpKey::v4(Ipv4Addr::from(0x0a00_0000 + i));
            o.violation(k, 0, 3, 60 * S, S);
        }
        assert_eq!(o.len(), MAX_OFFENDERS);
        assert_eq!(o.violation(key(9), 0, 1, 60 * S, S), None);
        assert!(!o.is_boxed(key(9), 0));
    }
}
