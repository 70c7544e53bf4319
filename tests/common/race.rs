//! Concurrency tests that exercise their race whatever the scheduling.
//!
//! Starting threads at a barrier is not enough on a busy 2-core machine: one thread can run its
//! whole loop before another is scheduled, and the test then passes without anything having run
//! concurrently. So the tests measure the overlap they are after and keep going until they have
//! seen enough of it:
//!
//! - [`Race`] wraps each operation of interest (an admission, a policy swap, an eviction tick)
//!   and tells whether an operation of a given side was in flight when it started. Of two
//!   operations that really overlap, the later to start sees the other (each announces itself
//!   with a SeqCst increment before it looks), so counting "saw one" counts real overlaps.
//! - [`until_raced`] repeats a whole scenario, fresh state and exact assertions each time, until
//!   the rounds have seen a minimum number of overlaps; if the scheduler never lets the sides
//!   meet within [`RACE_LIMIT`], the test fails saying so, rather than passing untested.
//! - [`StopOnPanic`] keeps a failed assertion in one thread from leaving the others (which run
//!   until told to stop) spinning forever.

#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::time::{Duration, Instant};

/// How long [`until_raced`] may repeat a scenario before it fails.
pub(crate) const RACE_LIMIT: Duration = Duration::from_secs(120);

/// Operations in flight, per side.
#[derive(Debug)]
pub(crate) struct Race {
    in_flight: Vec<AtomicUsize>,
}

/// Which sides had an operation in flight when one started (its own side: another one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Seen(u64);

impl Seen {
    /// Whether an operation of `side` was in flight.
    pub(crate) fn side(self, side: usize) -> bool {
        self.0 & (1 << side) != 0
    }
}

impl Race {
    /// A race between `sides` sides (0..sides), nothing in flight.
    pub(crate) fn new(sides: usize) -> Race {
        assert!((1..=64).contains(&sides));
        Race {
            in_flight: (0..sides).map(|_| AtomicUsize::new(0)).collect(),
        }
    }

    /// Runs `f` as one operation of `side`; returns its result and the sides that had an
    /// operation in flight when it started.
    pub(crate) fn op<T>(&self, side: usize, f: impl FnOnce() -> T) -> (T, Seen) {
        let before = self.in_flight[side].fetch_add(1, SeqCst);
        let mut seen = 0u64;
        for (i, n) in self.in_flight.iter().enumerate() {
            let busy = if i == side {
                before > 0
            } else {
                n.load(SeqCst) > 0
            };
            seen |= u64::from(busy) << i;
        }
        let out = f();
        self.in_flight[side].fetch_sub(1, SeqCst);
        (out, Seen(seen))
    }
}

/// Raises a stop flag when the thread holding it unwinds: a scoped test thread that fails an
/// assertion tells the others to stop, so the scope's join does not wait for them forever and the
/// test fails with that assertion.
pub(crate) struct StopOnPanic<'a>(pub &'a AtomicBool);

impl Drop for StopOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, SeqCst);
        }
    }
}

/// Runs `round` (a whole scenario with its own assertions, returning how many overlaps of each
/// kind in `wanted` it saw) until the rounds have seen, for each kind, its minimum in all;
/// returns the number of rounds. Fails, naming `what` and every count, when that takes longer
/// than [`RACE_LIMIT`].
#[track_caller]
pub(crate) fn until_raced<const N: usize>(
    what: &str,
    wanted: [(&str, usize); N],
    mut round: impl FnMut() -> [usize; N],
) -> usize {
    let started = Instant::now();
    let mut rounds = 0;
    let mut seen = [0usize; N];
    while seen.iter().zip(&wanted).any(|(n, (_, min))| n < min) {
        if started.elapsed() >= RACE_LIMIT {
            let counts: Vec<String> = seen
                .iter()
                .zip(&wanted)
                .map(|(n, (kind, min))| format!("{kind}: {n} of {min}"))
                .collect();
            panic!(
                "{what}: the race was not exercised in {rounds} rounds ({:?}): {}",
                started.elapsed(),
                counts.join(", ")
            );
        }
        for (n, more) in seen.iter_mut().zip(round()) {
            *n += more;
        }
        rounds += 1;
    }
    println!(
        "{what}: {seen:?} overlaps in {rounds} round(s), {:?}",
        started.elapsed()
    );
    rounds
}
