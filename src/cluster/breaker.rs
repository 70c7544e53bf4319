//! The circuit breaker in front of Redis (`cluster.breaker: { failures, openMs }`).
//!
//! Closed: every command is sent. After `failures` consecutive failed or timed-out commands it
//! opens: for `openMs` no command is sent (callers fall back to local limits at once, never
//! wait). Then one probe is let through (half-open): success closes it, failure re-opens it for
//! another `openMs`. An *outage* runs from the first opening to the next success; it is reported
//! once ([`Failure::outage_began`]), however many times the breaker re-opens meanwhile, and its
//! end asks the caller to reconcile ([`Breaker::success`] returns true).
//!
//! Plain state, no clock of its own: every call takes `now_ns` (CLOCK_MONOTONIC ns).

/// What one failure did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Failure {
    /// The breaker is open now.
    pub open: bool,
    /// This failure began an outage (emit `cluster_unavailable` once).
    pub outage_began: bool,
}

/// Breaker state (callers keep it under a mutex off the hot path).
#[derive(Debug, Clone)]
pub(crate) struct Breaker {
    failures: u32,
    open_ns: u64,
    consecutive: u32,
    open_until: Option<u64>,
    probing: bool,
    outage: bool,
}

impl Breaker {
    /// A closed breaker opening after `failures` consecutive failures, for `open_ns`.
    pub(crate) fn new(failures: u32, open_ns: u64) -> Breaker {
        Breaker {
            failures: failures.max(1),
            open_ns,
            consecutive: 0,
            open_until: None,
            probing: false,
            outage: false,
        }
    }

    /// Whether a command may be sent at `now_ns`. While open: false until `openMs` passed, then
    /// true once (the probe) until that probe's outcome is recorded.
    pub(crate) fn allow(&mut self, now_ns: u64) -> bool {
        match self.open_until {
            None => true,
            Some(t) if now_ns >= t && !self.probing => {
                self.probing = true;
                true
            }
            Some(_) => false,
        }
    }

    /// Whether the breaker is open (half-open counts as open) at `now_ns`.
    #[cfg(test)]
    fn is_open(&self) -> bool {
        self.open_until.is_some()
    }

    /// Records a successful command: closes the breaker. Returns true when this ended an
    /// outage (the caller reconciles: replays its own bans, reloads everyone's).
    pub(crate) fn success(&mut self) -> bool {
        self.consecutive = 0;
        self.open_until = None;
        self.probing = false;
        std::mem::replace(&mut self.outage, false)
    }

    /// Records a failed or timed-out command at `now_ns`.
    pub(crate) fn failure(&mut self, now_ns: u64) -> Failure {
        self.consecutive = self.consecutive.saturating_add(1);
        let reopen = self.probing || self.consecutive >= self.failures;
        self.probing = false;
        if reopen {
            self.open_until = Some(now_ns.saturating_add(self.open_ns));
        }
        let began = reopen && !self.outage;
        if reopen {
            self.outage = true;
        }
        Failure {
            open: self.open_until.is_some(),
            outage_began: began,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = crate::clock::NS_PER_MS;

    #[test]
    fn opens_after_failures_and_reports_one_outage() {
        let mut b = Breaker::new(3, 1000 * MS);
        assert!(b.allow(0));
        assert_eq!(
            b.failure(0),
            Failure {
                open: false,
                outage_began: false
            }
        );
        assert_eq!(
            b.failure(1),
            Failure {
                open: false,
                outage_began: false
            }
        );
        assert_eq!(
            b.failure(2),
            Failure {
                open: true,
                outage_began: true
            }
        );
        assert!(!b.allow(3));
        assert!(!b.allow(999 * MS));
        // openMs passed: one probe, then nothing until it is answered.
        assert!(b.allow(1002 * MS));
        assert!(!b.allow(1003 * MS));
        // The probe fails: open again, same outage (no second event).
        assert_eq!(
            b.failure(1004 * MS),
            Failure {
                open: true,
                outage_began: false
            }
        );
        assert!(!b.allow(1500 * MS));
        assert!(b.allow(2004 * MS));
        assert!(b.success(), "the outage ended: reconcile");
        assert!(!b.is_open());
        assert!(b.allow(2005 * MS));
        assert!(!b.success(), "no outage to end");
    }

    #[test]
    fn a_success_resets_the_count() {
        let mut b = Breaker::new(3, 1000 * MS);
        b.failure(0);
        b.failure(0);
        b.success();
        assert!(!b.failure(0).open);
        assert!(!b.failure(0).open);
        let f = b.failure(0);
        assert!(f.open && f.outage_began);
        // A later outage is reported again.
        assert!(b.allow(1000 * MS));
        assert!(b.success());
        for _ in 0..2 {
            b.failure(2000 * MS);
        }
        assert!(b.failure(2000 * MS).outage_began);
    }
}
