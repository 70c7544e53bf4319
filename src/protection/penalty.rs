//! Penalty box: after a rate-limit exhaustion the client is refused until a deadline.
//!
//! Semantics (docs/protection.md: Rate limits and the penalty box): the attempt that exhausts
//! `rateLimit` or `sustained` is refused as `rate_limited` and boxes the client until `now +
//! durationMs`; later attempts while boxed are `penalty_boxed`. A boxed attempt is still run
//! through both limits: if it would conform it is debited (so a client that keeps knocking does not
//! come out of the box with a full burst), if it would not, the deadline is reset to `now +
//! durationMs`. The deadline only ever moves forward (monotonic, saturating) and a quiet client is
//! readmitted at the deadline.
//!
//! Representation: one `u64` per entry (updated under the entry's shard lock),
//! `epoch:20 | deadline_ms:44`. The deadline is kept in
//! CLOCK_MONOTONIC milliseconds rounded up (2^44 ms ≈ 557 years, saturating there), so a box is
//! never shorter than `durationMs` and at most 1 ms longer. The epoch is the engine's box
//! generation: it changes each time a policy swap turns the penalty box on after it was off, and a
//! deadline from another epoch is void — disabling and re-enabling the box does not resurrect old
//! deadlines, while a swap that keeps the box (any `durationMs`) keeps every deadline. An update
//! only ever raises the deadline within an epoch.

const DEADLINE_BITS: u32 = 44;
const DEADLINE_MASK: u64 = (1 << DEADLINE_BITS) - 1;
/// Epochs are 20-bit, never 0 (0 = the box is off).
pub(crate) const EPOCH_MASK: u32 = (1 << 20) - 1;
use crate::clock::NS_PER_MS;

/// The epoch after `last` (wraps within 20 bits, skipping 0).
pub(crate) fn next_epoch(last: u32) -> u32 {
    (last % EPOCH_MASK) + 1
}

fn pack(epoch: u32, deadline_ms: u64) -> u64 {
    (u64::from(epoch & EPOCH_MASK) << DEADLINE_BITS) | (deadline_ms & DEADLINE_MASK)
}

/// The deadline in ms if `word` belongs to `epoch` (a live box generation), else `None`.
#[inline]
pub(crate) fn deadline_ms(word: u64, epoch: u32) -> Option<u64> {
    if epoch == 0 || word == 0 || (word >> DEADLINE_BITS) as u32 != epoch {
        None
    } else {
        Some(word & DEADLINE_MASK)
    }
}

/// Whether `word` holds a box of `epoch` that is still running at `now_ns`.
#[inline]
pub(crate) fn is_boxed(word: u64, epoch: u32, now_ns: u64) -> bool {
    matches!(deadline_ms(word, epoch), Some(d) if now_ns < d.saturating_mul(NS_PER_MS))
}

/// Ms remaining at `now_ns` (rounded up), if boxed.
pub(crate) fn remaining_ms(word: u64, epoch: u32, now_ns: u64) -> Option<u64> {
    let d = deadline_ms(word, epoch)?.saturating_mul(NS_PER_MS);
    (now_ns < d).then(|| (d - now_ns).div_ceil(NS_PER_MS))
}

/// The deadline (ms, rounded up, saturating at 2^44 − 1) for a box starting at `now_ns`.
pub(crate) fn deadline_for(now_ns: u64, duration_ns: u64) -> u64 {
    now_ns
        .saturating_add(duration_ns)
        .div_ceil(NS_PER_MS)
        .min(DEADLINE_MASK)
}

/// Raises the box in `word` to `deadline_ms_new` in `epoch` (a box of another epoch is replaced).
/// Returns the new deadline in ns when it changed, `None` when the existing one was already later.
pub(crate) fn extend(word: &mut u64, epoch: u32, deadline_ms_new: u64) -> Option<u64> {
    if let Some(d) = deadline_ms(*word, epoch) {
        if d >= deadline_ms_new {
            return None;
        }
    }
    *word = pack(epoch, deadline_ms_new);
    Some(deadline_ms_new.saturating_mul(NS_PER_MS))
}

/// The box duration (ns) at escalation `level`: `base_ns × factor^level`, capped at `max_ns`,
/// saturating, never below `base_ns.min(max_ns)`.
pub(crate) fn escalated_ns(base_ns: u64, factor: f64, level: u8, max_ns: u64) -> u64 {
    let floor = base_ns.min(max_ns);
    if level == 0 {
        return floor;
    }
    let d = base_ns as f64 * factor.powi(i32::from(level));
    if !d.is_finite() || d >= max_ns as f64 {
        max_ns.max(floor)
    } else {
        (d.ceil() as u64).clamp(floor, max_ns)
    }
}

/// The escalation level of a box starting at `now_ns`: `level + 1` (saturating) when the previous
/// box in `word` (of `epoch`) ended at most `memory_ns` before `now_ns`, else 0.
pub(crate) fn next_level(word: u64, epoch: u32, level: u8, now_ns: u64, memory_ns: u64) -> u8 {
    match deadline_ms(word, epoch) {
        Some(d) if now_ns <= d.saturating_mul(NS_PER_MS).saturating_add(memory_ns) => {
            level.saturating_add(1)
        }
        _ => 0,
    }
}

/// Until when (ns) the escalation memory of the last box in `word` runs, if it is of `epoch`.
pub(crate) fn memory_until_ns(word: u64, epoch: u32, memory_ns: u64) -> Option<u64> {
    deadline_ms(word, epoch).map(|d| d.saturating_mul(NS_PER_MS).saturating_add(memory_ns))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_and_epoch_scoped() {
        let mut word = 0;
        assert_eq!(extend(&mut word, 1, 1_000), Some(1_000_000_000));
        assert_eq!(extend(&mut word, 1, 900), None);
        assert!(is_boxed(word, 1, 999_999_999));
        assert!(!is_boxed(word, 1, 1_000_000_000));
        assert!(!is_boxed(word, 2, 0));
        assert_eq!(extend(&mut word, 2, 10), Some(10_000_000));
        assert_eq!(remaining_ms(word, 2, 1), Some(10));
    }

    #[test]
    fn escalation_multiplies_caps_and_saturates() {
        const MIN: u64 = 60 * crate::clock::NS_PER_SEC;
        let (base, max) = (10 * MIN, 1_440 * MIN);
        let got: Vec<u64> = (0..10)
            .map(|l| escalated_ns(base, 2.0, l, max) / MIN)
            .collect();
        assert_eq!(got, [10, 20, 40, 80, 160, 320, 640, 1280, 1440, 1440]);
        assert_eq!(escalated_ns(base, 2.0, u8::MAX, max), max);
        assert_eq!(escalated_ns(base, 1e6, 200, max), max);
        assert_eq!(escalated_ns(base, 1.0, 200, max), base);
        assert_eq!(escalated_ns(u64::MAX, 2.0, 3, u64::MAX), u64::MAX);
        assert_eq!(escalated_ns(3, 1.5, 1, 100), 5); // 4.5 rounded up
        assert_eq!(escalated_ns(base, 2.0, 1, base), base);
    }

    #[test]
    fn a_repeat_within_memory_raises_the_level() {
        let mut word = 0;
        assert_eq!(next_level(word, 1, 0, 5_000_000, 1_000_000), 0);
        extend(&mut word, 1, 10); // deadline 10 ms
        assert_eq!(next_level(word, 1, 0, 11_000_000, 1_000_000), 1);
        assert_eq!(next_level(word, 1, 3, 11_000_000, 1_000_000), 4);
        assert_eq!(next_level(word, 1, u8::MAX, 11_000_000, 1_000_000), u8::MAX);
        assert_eq!(next_level(word, 1, 3, 11_000_001, 1_000_000), 0);
        // Another epoch (the box was switched off and on) forgets.
        assert_eq!(next_level(word, 2, 3, 10_500_000, 1_000_000), 0);
        assert_eq!(memory_until_ns(word, 1, 1_000_000), Some(11_000_000));
    }

    #[test]
    fn deadline_rounds_up_and_saturates() {
        assert_eq!(deadline_for(1, 1_000_000), 2);
        assert_eq!(deadline_for(0, 1_000_000), 1);
        assert_eq!(deadline_for(u64::MAX - 5, u64::MAX), DEADLINE_MASK);
        assert_eq!(next_epoch(EPOCH_MASK), 1);
    }
}
