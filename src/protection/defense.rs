//! Defense mode: telling a surge of new connections from the listener's normal traffic.
//!
//! **Measure**: the admission path counts every new connection of the listener (allowlisted ones
//! too) in 1-second buckets of CLOCK_MONOTONIC time ([`Buckets`]: four slots, each one word
//! `second:32 | count:32`, so recording is one relaxed load and one atomic add; the slot of second
//! `s` is reused at `s + 4`). The background tick ([`DefenseState::tick`], every 100 ms in the
//! server) closes each finished second, in order.
//!
//! **Baseline**: the counts of the last 300 closed seconds in which defense was off, in a ring,
//! with their exact integer sum and sum of squares (so the mean and the population deviation are
//! exact over the window, with no drift: this is the sliding-window form, not an EWMA). Once the
//! window is full, seconds in which defense is on are not added: a long attack never becomes the
//! new normal, and the threshold stays where it was when the attack began. While the window is
//! still filling (the first 5 minutes of a listener), every second is added, on or off: a
//! listener that starts busier than `minConnectionsPerSecond` would otherwise compare its normal
//! traffic with an empty baseline, turn defense on and never learn its way out. The cost is that
//! a surge in those first minutes is learned as normal within seconds; `mode: 'on'` covers an
//! attack at startup. A lasting rise of legitimate traffic after that keeps defense on (the
//! frozen threshold stays below it): `'off'` then `'auto'` again relearns it, since seconds are
//! always added while defense is off.
//!
//! **Rule** (`mode: 'auto'`): a closed second whose count is above
//! `threshold = max(minConnectionsPerSecond, mean + sigma × deviation)` turns defense on (or keeps
//! it on); it turns off at the end of the first closed second that ends `holdMs` or more after the
//! end of the last second above the threshold. `'on'` and `'off'` force it. Each change is
//! reported once by `tick` ([`DefenseChange`]: the `'defense'` event), with the last closed
//! second's count as `rate` and the threshold it was compared with.
//!
//! Cost: recording is O(1) on the hot path; a tick is O(seconds closed), at most 300 even after a
//! long pause (older seconds are known to be 0 for the baseline's purpose and are skipped). The
//! ring is 1.2 KB per listener.

use super::policy::{Defense, DefenseMode};
use std::sync::atomic::{AtomicU64, Ordering};

/// Seconds of the baseline window (5 minutes).
pub(crate) const WINDOW_S: usize = 300;
const SLOTS: usize = 4;
const NS: u64 = crate::clock::NS_PER_SEC;

/// Per-second new-connection counts written by the admission path.
#[derive(Debug, Default)]
pub(crate) struct Buckets {
    slots: [AtomicU64; SLOTS],
}

impl Buckets {
    /// Counts one new connection at `now_ns`.
    #[inline]
    pub(crate) fn record(&self, now_ns: u64) {
        let sec = (now_ns / NS) as u32;
        let slot = &self.slots[sec as usize % SLOTS];
        let mut v = slot.load(Ordering::Relaxed);
        loop {
            if (v >> 32) as u32 == sec {
                slot.fetch_add(1, Ordering::Relaxed);
                return;
            }
            let fresh = (u64::from(sec) << 32) | 1;
            match slot.compare_exchange_weak(v, fresh, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return,
                Err(cur) => v = cur,
            }
        }
    }

    /// The count of second `sec` (0 when its slot already holds another second).
    pub(crate) fn count(&self, sec: u64) -> u64 {
        let v = self.slots[sec as usize % SLOTS].load(Ordering::Relaxed);
        if (v >> 32) as u32 == sec as u32 {
            v & 0xffff_ffff
        } else {
            0
        }
    }
}

/// The last [`WINDOW_S`] per-second counts with their exact sum and sum of squares.
#[derive(Debug, Clone)]
pub(crate) struct Baseline {
    ring: Box<[u32; WINDOW_S]>,
    len: usize,
    head: usize,
    sum: u64,
    sumsq: u128,
}

impl Default for Baseline {
    fn default() -> Self {
        Baseline {
            ring: Box::new([0; WINDOW_S]),
            len: 0,
            head: 0,
            sum: 0,
            sumsq: 0,
        }
    }
}

impl Baseline {
    /// Adds one second's count (the oldest leaves once the window is full).
    pub(crate) fn push(&mut self, count: u64) {
        let c = count.min(u64::from(u32::MAX)) as u32;
        if self.len == WINDOW_S {
            let old = self.ring[self.head];
            self.sum -= u64::from(old);
            self.sumsq -= u128::from(old) * u128::from(old);
        } else {
            self.len += 1;
        }
        self.ring[self.head] = c;
        self.head = (self.head + 1) % WINDOW_S;
        self.sum += u64::from(c);
        self.sumsq += u128::from(c) * u128::from(c);
    }

    /// Seconds in the window.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Mean and population standard deviation of the window (0, 0 when empty).
    pub(crate) fn mean_deviation(&self) -> (f64, f64) {
        if self.len == 0 {
            return (0.0, 0.0);
        }
        let n = self.len as u128;
        let sum = u128::from(self.sum);
        // n² var = n Σx² − (Σx)², exact in integers.
        let num = (n * self.sumsq).saturating_sub(sum * sum);
        let mean = sum as f64 / n as f64;
        (mean, (num as f64).sqrt() / n as f64)
    }

    /// `max(min, mean + sigma × deviation)`.
    pub(crate) fn threshold(&self, sigma: f64, min: u64) -> f64 {
        let (mean, dev) = self.mean_deviation();
        (mean + sigma * dev).max(min as f64)
    }
}

/// A change of defense mode, to announce as a `'defense'` event.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DefenseChange {
    /// On or off now.
    pub active: bool,
    /// New connections in the last closed second.
    pub rate: u64,
    /// The threshold that second was compared with.
    pub threshold: f64,
}

/// One listener's defense-mode state (behind a mutex the background tick takes).
#[derive(Debug, Clone, Default)]
pub(crate) struct DefenseState {
    baseline: Baseline,
    /// The first second not yet closed.
    next_sec: Option<u64>,
    active: bool,
    reported: bool,
    /// End (ns) of the last closed second above the threshold.
    last_above_end_ns: u64,
    last_rate: u64,
    last_threshold: f64,
}

impl DefenseState {
    /// Whether defense mode is on (as of the last tick).
    pub(crate) fn active(&self) -> bool {
        self.active
    }

    /// Closes every second before the one `now_ns` is in (its count from `count`), applies `cfg`,
    /// and returns the change to announce, if the state differs from the last one announced.
    /// `overloaded` (a route's upstream is overloaded) holds `auto` mode on while it lasts; once
    /// it ends, the next closed second under the threshold turns it off.
    pub(crate) fn tick(
        &mut self,
        cfg: &Defense,
        now_ns: u64,
        overloaded: bool,
        count: impl Fn(u64) -> u64,
    ) -> Option<DefenseChange> {
        let cur = now_ns / NS;
        let start = self.next_sec.unwrap_or(cur);
        // After a pause longer than the window only its last WINDOW_S seconds can matter.
        let first = start.max(cur.saturating_sub(WINDOW_S as u64));
        for sec in first..cur {
            self.close(cfg, sec, count(sec));
        }
        self.next_sec = Some(cur.max(start));
        match cfg.mode {
            DefenseMode::Off => self.active = false,
            DefenseMode::On => self.active = true,
            DefenseMode::Auto => self.active |= overloaded,
        }
        if self.active == self.reported {
            return None;
        }
        self.reported = self.active;
        if self.last_threshold == 0.0 {
            self.last_threshold = self
                .baseline
                .threshold(cfg.sigma, cfg.min_connections_per_second);
        }
        Some(DefenseChange {
            active: self.active,
            rate: self.last_rate,
            threshold: self.last_threshold,
        })
    }

    fn close(&mut self, cfg: &Defense, sec: u64, count: u64) {
        let threshold = self
            .baseline
            .threshold(cfg.sigma, cfg.min_connections_per_second);
        let end = (sec + 1).saturating_mul(NS);
        let above = count as f64 > threshold;
        self.last_rate = count;
        self.last_threshold = threshold;
        match cfg.mode {
            DefenseMode::Off => self.active = false,
            DefenseMode::On => self.active = true,
            DefenseMode::Auto => {
                if above {
                    self.active = true;
                    self.last_above_end_ns = end;
                } else if self.active && end.saturating_sub(self.last_above_end_ns) >= cfg.hold_ns {
                    self.active = false;
                }
            }
        }
        if !self.active || self.baseline.len() < WINDOW_S {
            self.baseline.push(count);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn baseline_is_exact_over_a_sliding_window() {
        let mut b = Baseline::default();
        for c in [2, 4, 4, 4, 5, 5, 7, 9] {
            b.push(c);
        }
        assert_eq!(b.mean_deviation(), (5.0, 2.0));
        assert_eq!(b.threshold(3.0, 1), 11.0);
        assert_eq!(b.threshold(3.0, 100), 100.0);
        for _ in 0..WINDOW_S {
            b.push(10);
        }
        assert_eq!(b.len(), WINDOW_S);
        assert_eq!(b.mean_deviation(), (10.0, 0.0));
    }

    #[test]
    fn buckets_count_per_second_and_reuse_slots() {
        let b = Buckets::default();
        for _ in 0..3 {
            b.record(10 * NS);
        }
        b.record(11 * NS + 5);
        assert_eq!((b.count(10), b.count(11), b.count(12)), (3, 1, 0));
        b.record(14 * NS); // slot of second 10
        assert_eq!((b.count(10), b.count(14)), (0, 1));
    }
}
