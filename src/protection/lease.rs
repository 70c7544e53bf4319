//! A client's local lease of `clusterRateLimit` tokens: how a node admits without asking Redis.
//!
//! Redis holds each client's GCRA (one atomic Lua script, Redis `TIME` as the clock,
//! `crate::cluster`). A node takes tokens from it in leases of `lease` tokens and admits from
//! them on the accept path; when a client's lease runs out the accept path asks for a refill
//! ([`Admission::refill`](super::Admission), queued by the cluster tier with a `try_send`) and the
//! background task asks Redis. So the accept path never waits for Redis. Per client and node:
//! - tokens left → admit, one token less (the last one asks for the next refill);
//! - no token, Redis said no less than `retry_after` ago → refuse (`cluster_rate_limited`);
//! - no token otherwise (a new client, or a refill in flight) → admit *on credit*, up to `lease`
//!   admissions; the credit is charged to the client's GCRA with the next refill (so it is
//!   never lost, only late). A client's first connection is therefore never refused
//!   (fail-open first connection, asynchronous request).
//!
//! Bound: tokens are charged in Redis before they are used, so over any interval starting from a
//! fresh client the admissions of all nodes are at most `burst + rate × t` plus the credit not
//! yet charged: at most `nodes × lease`. Over a sliding window, tokens charged before the window
//! and used in it add up to another `nodes × lease`. A lease is valid for [`LEASE_TTL_NS`]; unused
//! tokens then lapse (under-admission, never over).
//!
//! **Where a lease lives**: in the engine's per-client table, in the client's entry's own slot
//! (64-byte, cache-line-aligned slots of entry and lease, used only while the policy in force
//! has `clusterRateLimit`, 48-byte entry-only slots otherwise: [`super::table`]). So the token
//! is taken inside the admission's own critical section: no second hash, no second table, no
//! compare-and-swap, and the same `maxTrackedIps` bound as every other per-client state (an
//! IP-diverse flood costs no lease memory beyond the cap; an untracked client is admitted without
//! a lease, to the local limits, as with Redis down). An entry whose lease holds live tokens, runs a refusal, waits for
//! a refill (for up to [`STALE_NS`] after the client's last connection) or owes credit (for up
//! to [`IDLE_NS`] after it) is not idle for eviction, and at the cap it ranks as a rate-limited
//! client does (the one closest to idle first; [`Lease::live_until`]); after those times credit
//! is given up (at most `lease` admissions never charged), so a client that left never pins its
//! entry. The refill task reaches the lease by key under the same shard lock
//! ([`super::Engine::update_lease`]); a lease whose entry was evicted meanwhile is gone and the
//! answer is dropped (its tokens lapse: under-admission).

/// How long leased tokens stay usable, ns.
pub const LEASE_TTL_NS: u64 = crate::clock::NS_PER_SEC;
/// Credit owed by a client unseen for this long no longer keeps its entry, ns.
pub(crate) const IDLE_NS: u64 = 10_000_000_000;
/// A refill unanswered while the client was unseen this long no longer keeps its entry, ns.
pub(crate) const STALE_NS: u64 = 60_000_000_000;
const NS_PER_S: u64 = crate::clock::NS_PER_SEC;
const PENDING: u8 = 1;
const HELD: u8 = 2;
/// Largest `tokens`, `debt` or `charging` count (the config allows a lease of 10000).
const COUNT_MAX: u64 = u16::MAX as u64;

/// One client's lease (16 bytes, asserted). Only ever accessed under its shard lock.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Lease {
    /// With tokens: when they lapse; without: until when Redis said no (CLOCK_MONOTONIC ns).
    until_ns: u64,
    tokens: u16,
    /// Admissions on credit, not yet charged in Redis.
    debt: u16,
    /// Debt handed to the refill in flight (owed again if it fails).
    charging: u16,
    /// [`PENDING`]: a refill request is in flight; [`HELD`]: the client has asked for a lease
    /// (counted in the shard's lease count until removed).
    flags: u8,
    /// The client's last connection, whole CLOCK_MONOTONIC seconds modulo 256 (so credit and
    /// an unanswered refill are given up between 0 and 1 s early, and a client unseen for a
    /// multiple of 256 s looks recent once more for up to [`STALE_NS`]).
    last_s: u8,
}

const _: () = assert!(std::mem::size_of::<Lease>() == 16);

/// The accept path's lease decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LeaseDecision {
    /// Admit (false: refuse `cluster_rate_limited`).
    pub admit: bool,
    /// Ask for a refill for this client (it was marked in flight).
    pub refill: bool,
}

/// What the refill task does to a client's lease ([`super::Engine::update_lease`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LeaseUpdate {
    /// The refill request could not be queued: clear the in-flight mark (the next connection
    /// asks again). Returns 0.
    NotSent,
    /// The refill task takes the credit to charge with its request. Returns the credit.
    TakeDebt,
    /// Redis answered at `now_ns`: `granted` tokens, and when none, `retry_after_ns` until one
    /// conforms. Returns 0.
    Refilled {
        /// Tokens granted.
        granted: u64,
        /// Without tokens: how long until one conforms, ns.
        retry_after_ns: u64,
        /// When the answer arrived (CLOCK_MONOTONIC ns).
        now_ns: u64,
    },
    /// The refill failed (Redis unreachable): the credit it carried is owed again. Returns 0.
    Failed,
}

#[inline]
fn count(n: u64) -> u16 {
    n.min(COUNT_MAX) as u16
}

impl Lease {
    /// Whether the client has asked for a lease.
    #[inline]
    pub(crate) fn held(&self) -> bool {
        self.flags & HELD != 0
    }

    #[inline]
    fn pending(&self) -> bool {
        self.flags & PENDING != 0
    }

    #[inline]
    fn set_pending(&mut self, on: bool) {
        self.flags = if on {
            self.flags | PENDING
        } else {
            self.flags & !PENDING
        };
    }

    /// Decides one connection at `now` with leases of `lease` tokens.
    #[inline]
    pub(crate) fn admit(&mut self, lease: u64, now: u64) -> LeaseDecision {
        self.flags |= HELD;
        self.last_s = (now / NS_PER_S) as u8;
        if self.tokens > 0 && now >= self.until_ns {
            self.tokens = 0;
            self.until_ns = 0;
        }
        if self.tokens > 0 {
            self.tokens -= 1;
            if self.tokens == 0 {
                self.until_ns = 0; // no deadline: the next one is on credit
            }
            let refill = self.tokens == 0 && !self.pending();
            if refill {
                self.set_pending(true);
            }
            return LeaseDecision {
                admit: true,
                refill,
            };
        }
        if now < self.until_ns {
            return LeaseDecision {
                admit: false,
                refill: false,
            };
        }
        let refill = !self.pending();
        self.set_pending(true);
        let admit = u64::from(self.debt) + u64::from(self.charging) < lease.clamp(1, COUNT_MAX);
        if admit {
            self.debt += 1;
        }
        LeaseDecision { admit, refill }
    }

    /// Applies the refill task's `u` (see [`LeaseUpdate`] for what it returns).
    pub(crate) fn update(&mut self, u: LeaseUpdate) -> u64 {
        match u {
            LeaseUpdate::NotSent => self.set_pending(false),
            LeaseUpdate::TakeDebt => {
                let d = self.debt;
                self.debt = 0;
                self.charging = count(u64::from(self.charging) + u64::from(d));
                return u64::from(d);
            }
            LeaseUpdate::Refilled {
                granted,
                retry_after_ns,
                now_ns,
            } => {
                self.set_pending(false);
                self.charging = 0;
                self.tokens = count(granted);
                self.until_ns = if granted > 0 {
                    now_ns.saturating_add(LEASE_TTL_NS)
                } else {
                    now_ns.saturating_add(retry_after_ns.max(1))
                };
            }
            LeaseUpdate::Failed => {
                self.set_pending(false);
                self.debt = count(u64::from(self.debt) + u64::from(self.charging));
                self.charging = 0;
            }
        }
        0
    }

    /// Until when (CLOCK_MONOTONIC ns) the lease holds something an eviction would lose at
    /// `now`: live tokens or a running refusal (a fresh lease would admit on credit again), a
    /// refill in flight (until [`STALE_NS`] after the client's last connection) or credit owed
    /// (until [`IDLE_NS`] after it); `None`: nothing (evicting the entry changes no decision).
    /// The table ranks this like a TAT in the future (a limited client, not a remembered one).
    #[inline]
    pub(crate) fn live_until(&self, now: u64) -> Option<u64> {
        let now_s = now / NS_PER_S;
        let idle_ns = u64::from((now_s as u8).wrapping_sub(self.last_s)) * NS_PER_S;
        let mut until = self.until_ns;
        let mut keep = |owed: bool, for_ns: u64| {
            if owed && idle_ns < for_ns {
                until = until.max((now_s * NS_PER_S).saturating_sub(idle_ns) + for_ns);
            }
        };
        keep(self.pending(), STALE_NS);
        keep(self.debt > 0 || self.charging > 0, IDLE_NS);
        (until > now).then_some(until)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = crate::clock::NS_PER_MS;

    fn d(admit: bool, refill: bool) -> LeaseDecision {
        LeaseDecision { admit, refill }
    }

    fn refilled(granted: u64, retry_after_ns: u64, now_ns: u64) -> LeaseUpdate {
        LeaseUpdate::Refilled {
            granted,
            retry_after_ns,
            now_ns,
        }
    }

    #[test]
    fn a_new_client_is_admitted_on_credit_and_asks_once() {
        let mut l = Lease::default();
        assert_eq!(l.admit(2, 0), d(true, true));
        assert_eq!(l.admit(2, 1), d(true, false), "credit up to the lease");
        assert_eq!(l.admit(2, 2), d(false, false), "credit spent");
        assert_eq!(l.update(LeaseUpdate::TakeDebt), 2);
        l.update(refilled(2, 0, 3 * MS));
        assert_eq!(l.admit(2, 4 * MS), d(true, false));
        assert_eq!(l.admit(2, 5 * MS), d(true, true), "the last token asks");
        assert_eq!(l.admit(2, 6 * MS), d(true, false), "credit while in flight");
    }

    #[test]
    fn a_refusal_from_redis_holds_until_retry_after() {
        let mut l = Lease::default();
        assert!(l.admit(1, 0).refill);
        l.update(LeaseUpdate::TakeDebt);
        l.update(refilled(0, 100 * MS, MS));
        assert_eq!(l.admit(1, 50 * MS), d(false, false));
        assert_eq!(l.admit(1, 101 * MS - 1), d(false, false));
        assert_eq!(l.admit(1, 101 * MS), d(true, true));
    }

    #[test]
    fn leased_tokens_lapse_and_failed_credit_is_owed_again() {
        let mut l = Lease::default();
        l.admit(3, 0);
        assert_eq!(l.update(LeaseUpdate::TakeDebt), 1);
        l.update(LeaseUpdate::Failed);
        assert_eq!(
            l.update(LeaseUpdate::TakeDebt),
            1,
            "the credit is charged later"
        );
        l.update(refilled(3, 0, 0));
        assert_eq!(l.admit(3, LEASE_TTL_NS), d(true, true), "lapsed: credit");
        assert_eq!(l.update(LeaseUpdate::TakeDebt), 1);
    }

    #[test]
    fn a_request_not_sent_is_asked_again_by_the_next_connection() {
        let mut l = Lease::default();
        assert_eq!(l.admit(5, 0), d(true, true));
        assert_eq!(l.admit(5, 1), d(true, false));
        l.update(LeaseUpdate::NotSent);
        assert_eq!(l.admit(5, 2), d(true, true));
        assert_eq!(l.update(LeaseUpdate::TakeDebt), 3, "all three owed");
    }

    #[test]
    fn what_an_eviction_would_lose() {
        let mut l = Lease::default();
        assert_eq!(l.live_until(0), None, "never asked");
        l.admit(2, 0);
        assert_eq!(l.live_until(5), Some(STALE_NS), "credit owed, in flight");
        l.update(LeaseUpdate::TakeDebt);
        assert_eq!(l.live_until(5), Some(STALE_NS), "in flight");
        assert_eq!(l.live_until(STALE_NS), None, "an answer that never came");
        l.update(refilled(2, 0, 10));
        assert_eq!(l.live_until(20), Some(10 + LEASE_TTL_NS), "live tokens");
        assert_eq!(l.live_until(10 + LEASE_TTL_NS), None, "lapsed");
        l.update(refilled(0, MS, 10));
        assert_eq!(l.live_until(20), Some(10 + MS), "a running refusal");
        assert_eq!(l.live_until(10 + MS), None);
        assert!(l.held());
        // Credit owed by a client that left: kept for IDLE_NS after its last connection.
        let mut l = Lease::default();
        l.admit(2, 3 * NS_PER_S + 5);
        l.update(LeaseUpdate::NotSent);
        assert_eq!(l.live_until(12 * NS_PER_S), Some(13 * NS_PER_S));
        assert_eq!(l.live_until(13 * NS_PER_S), None);
    }
}
