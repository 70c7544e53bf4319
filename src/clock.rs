//! Monotonic time in nanoseconds (`CLOCK_MONOTONIC`, the clock `bpf_ktime_get_ns` reads).
//!
//! Engine logic never reads the clock itself: callers pass `now_ns` so tests can step time.

/// Current `CLOCK_MONOTONIC` time in nanoseconds.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC is always supported on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64).saturating_mul(NS_PER_SEC) + ts.tv_nsec as u64
}

/// Nanoseconds per millisecond.
pub const NS_PER_MS: u64 = 1_000_000;

/// Nanoseconds per second.
pub const NS_PER_SEC: u64 = 1_000_000_000;

/// Nanoseconds per microsecond.
pub const NS_PER_US: u64 = 1_000;

/// Microseconds per millisecond.
pub const US_PER_MS: u64 = 1_000;

/// Microseconds per second.
pub const US_PER_SEC: u64 = 1_000_000;

/// Milliseconds per second.
pub const MS_PER_SEC: u64 = 1_000;

/// Milliseconds to nanoseconds, saturating.
pub const fn ms_to_ns(ms: u64) -> u64 {
    ms.saturating_mul(NS_PER_MS)
}

/// Nanoseconds to milliseconds, rounded up (a remaining time is never shown shorter than it is).
pub const fn ns_to_ms_ceil(ns: u64) -> u64 {
    ns.div_ceil(NS_PER_MS)
}
