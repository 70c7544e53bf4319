//! CPU-weighted least connections (`upstreams[].pid` / `tid`, as Symphony balances its workers):
//! each sampled upstream's CPU use, read from procfs by the background task every
//! [`SAMPLE_PERIOD_MS`] and never on the connection path, breaks ties between upstreams with the
//! same number of open connections.
//!
//! The score of an upstream is `open connections × 1000 + CPU use in permille` (0..=1000, one
//! core = 1000): connections dominate, CPU decides among equals, an upstream that is not sampled
//! counts 0. CPU use is the utime + stime ticks (proc(5) `stat` fields 14 and 15) gained since the
//! last sample over the wall time since it, in `sysconf(_SC_CLK_TCK)` ticks per second.

use crate::config::proxy::CpuSource;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;

/// How often sampled upstreams are read, ms (Symphony's period).
pub(crate) const SAMPLE_PERIOD_MS: u64 = 250;

/// Weight of one open connection in the score: a whole core's CPU use (1000 ‰) equals one
/// connection.
pub(crate) const CONNECTION_WEIGHT: u64 = 1000;

/// One upstream's CPU sampling state.
#[derive(Debug, Default)]
pub(crate) struct CpuSlot {
    /// The worker sampled (`None`: not sampled, counts 0).
    pub source: Option<CpuSource>,
    /// CPU use at the last sample, ‰ of one core (0..=1000).
    permille: AtomicU32,
    /// Whether a use was measured (two samples taken).
    measured: AtomicU32,
    /// utime + stime at the last sample, in clock ticks.
    last_ticks: AtomicU64,
    /// CLOCK_MONOTONIC ns of the last sample (0: none yet).
    last_ns: AtomicU64,
}

impl CpuSlot {
    /// A slot for `source`.
    pub(crate) fn new(source: Option<CpuSource>) -> Self {
        CpuSlot {
            source,
            ..CpuSlot::default()
        }
    }

    /// The CPU use in ‰ (0 when not sampled or not measured yet): one relaxed load.
    #[inline]
    pub(crate) fn permille(&self) -> u32 {
        self.permille.load(Ordering::Relaxed)
    }

    /// Sets the CPU use as if measured (tests).
    #[cfg(test)]
    pub(crate) fn set_measured(&self, permille: u32) {
        self.permille.store(permille, Ordering::Relaxed);
        self.measured.store(1, Ordering::Relaxed);
    }

    /// The measured CPU use, `None` before two samples were taken or without a source.
    pub(crate) fn measured(&self) -> Option<u32> {
        (self.measured.load(Ordering::Relaxed) != 0).then(|| self.permille())
    }

    /// Reads the source's ticks at `now_ns` and updates the use from the last sample. A worker
    /// that is gone (or procfs unreadable) keeps its last value.
    pub(crate) fn sample(&self, now_ns: u64) {
        let Some(src) = self.source else { return };
        let Some(ticks) = read_ticks(src) else { return };
        let last_ns = self.last_ns.swap(now_ns, Ordering::Relaxed);
        let last_ticks = self.last_ticks.swap(ticks, Ordering::Relaxed);
        if last_ns == 0 || now_ns <= last_ns {
            return;
        }
        let secs = (now_ns - last_ns) as f64 / crate::clock::NS_PER_SEC as f64;
        let used = ticks.saturating_sub(last_ticks) as f64 / clock_ticks_per_second() as f64;
        let permille = (used / secs * 1000.0).clamp(0.0, 1000.0) as u32;
        self.permille.store(permille, Ordering::Relaxed);
        self.measured.store(1, Ordering::Relaxed);
    }
}

/// `sysconf(_SC_CLK_TCK)`, read once (100 on Linux when it cannot be read).
fn clock_ticks_per_second() -> u64 {
    static HZ: OnceLock<u64> = OnceLock::new();
    *HZ.get_or_init(|| {
        // SAFETY: sysconf reads a constant of the running system; no pointer is involved.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        u64::try_from(hz).ok().filter(|&h| h > 0).unwrap_or(100)
    })
}

/// utime + stime of `src` in clock ticks, from `/proc/<pid>/task/<tid>/stat` (or
/// `/proc/<pid>/stat`); `None` when it cannot be read or parsed.
pub(crate) fn read_ticks(src: CpuSource) -> Option<u64> {
    let path = match src.tid {
        Some(tid) => format!("/proc/{}/task/{tid}/stat", src.pid),
        None => format!("/proc/{}/stat", src.pid),
    };
    parse_stat_ticks(&std::fs::read_to_string(path).ok()?)
}

/// utime + stime from the text of a proc(5) `stat` file: the fields after the command name (in
/// parentheses, which may itself hold `)`), so the last `)` ends it; utime and stime are the
/// 12th and 13th fields after it.
pub(crate) fn parse_stat_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_after_the_command_name() {
        let stat = "4242 (node (w) 1) R 1 4242 4242 0 -1 4194304 100 0 0 0 731 69 0 0 20 0 11 0";
        assert_eq!(parse_stat_ticks(stat), Some(800));
        assert_eq!(parse_stat_ticks("4242 (x) R 1"), None);
        assert_eq!(parse_stat_ticks("garbage"), None);
    }

    #[test]
    fn this_thread_is_sampled() {
        let pid = std::process::id();
        // SAFETY: gettid has no arguments and cannot fail.
        let tid = unsafe { libc::gettid() } as u32;
        let slot = CpuSlot::new(Some(CpuSource {
            pid,
            tid: Some(tid),
        }));
        slot.sample(crate::clock::now_ns());
        assert_eq!(slot.measured(), None, "one sample measures nothing");
        let until = std::time::Instant::now() + std::time::Duration::from_millis(300);
        let mut x = 0u64;
        while std::time::Instant::now() < until {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        slot.sample(crate::clock::now_ns());
        let used = slot.measured().unwrap();
        assert!(
            used >= 100,
            "a busy thread uses a good part of a core, got {used}"
        );
        assert!(read_ticks(CpuSource { pid, tid: None }).is_some());
        assert!(read_ticks(CpuSource {
            pid: u32::MAX,
            tid: None
        })
        .is_none());
    }
}
