//! Local leases of `clusterRateLimit` tokens: how a node admits without asking Redis.
//!
//! Redis holds each client's GCRA (one atomic Lua script, Redis `TIME` as the clock,
//! [`super::script`]). A node takes tokens from it in leases of `lease` tokens and admits from
//! them on the accept path; when a client's lease runs out the accept path queues a refill
//! request (a bounded channel, `try_send`) and the background task asks Redis. So the accept path
//! never waits for Redis. Per client and node:
//! - tokens left → admit, one token less (the last one queues the next refill);
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
//! Memory: one entry (~48 bytes plus the map's overhead) per client seen in the last
//! [`IDLE_NS`], at most [`MAX_CLIENTS`]; beyond that new clients are admitted without a lease
//! (counted in `untracked`).

use crate::protection::IpKey;
use dashmap::mapref::entry::Entry;
use dashmap::DashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// How long leased tokens stay usable, ns.
pub const LEASE_TTL_NS: u64 = 1_000_000_000;
/// An entry unused for this long (and with nothing in flight) is dropped, ns.
pub const IDLE_NS: u64 = 10_000_000_000;
/// Most clients with a lease entry per node.
pub const MAX_CLIENTS: usize = 1_000_000;

#[derive(Debug, Default, Clone, Copy)]
struct Lease {
    tokens: u64,
    /// Admissions on credit, not yet charged in Redis.
    debt: u64,
    /// Debt handed to the refill in flight (given back if it fails).
    charging: u64,
    pending: bool,
    denied_until: u64,
    expires: u64,
    last: u64,
}

/// The accept path's decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseDecision {
    /// Admit (false: refuse `cluster_rate_limited`).
    pub admit: bool,
    /// Queue a refill request for this client (it was marked in flight).
    pub refill: bool,
}

/// One node's leases, keyed by (listener port, client).
#[derive(Default)]
pub struct Leases {
    map: DashMap<(u16, IpKey), Lease>,
    /// Entries in `map`: counted where `admit` inserts, recounted by `purge`. Kept beside the map
    /// because `DashMap::len` read-locks every shard, too much for each accepted connection.
    count: AtomicUsize,
    /// Clients admitted without a lease because the table was full.
    pub untracked: AtomicU64,
}

impl Leases {
    /// Decides one connection of `key` on `port` at `now_ns` with leases of `lease` tokens.
    pub fn admit(&self, port: u16, key: IpKey, lease: u64, now_ns: u64) -> LeaseDecision {
        let mut e = match self.map.entry((port, key)) {
            Entry::Occupied(o) => o.into_ref(),
            Entry::Vacant(v) => {
                if self.count.load(Ordering::Relaxed) >= MAX_CLIENTS {
                    self.untracked.fetch_add(1, Ordering::Relaxed);
                    return LeaseDecision {
                        admit: true,
                        refill: false,
                    };
                }
                self.count.fetch_add(1, Ordering::Relaxed);
                v.insert(Lease::default())
            }
        };
        e.last = now_ns;
        if e.tokens > 0 && now_ns >= e.expires {
            e.tokens = 0;
        }
        if e.tokens > 0 {
            e.tokens -= 1;
            let refill = e.tokens == 0 && !e.pending;
            e.pending |= refill;
            return LeaseDecision {
                admit: true,
                refill,
            };
        }
        if now_ns < e.denied_until {
            return LeaseDecision {
                admit: false,
                refill: false,
            };
        }
        let refill = !e.pending;
        e.pending = true;
        let admit = e.debt + e.charging < lease.max(1);
        if admit {
            e.debt += 1;
        }
        LeaseDecision { admit, refill }
    }

    /// A refill request could not be queued: clears the in-flight mark (the next connection
    /// tries again).
    pub fn not_sent(&self, port: u16, key: IpKey) {
        if let Some(mut e) = self.map.get_mut(&(port, key)) {
            e.pending = false;
        }
    }

    /// The refill task takes the credit to charge with this request.
    pub fn take_debt(&self, port: u16, key: IpKey) -> u64 {
        match self.map.get_mut(&(port, key)) {
            Some(mut e) => {
                let d = e.debt;
                e.debt = 0;
                e.charging += d;
                d
            }
            None => 0,
        }
    }

    /// Redis answered at `now_ns`: `granted` tokens, and when none, `retry_after_ns` until one
    /// conforms.
    pub fn refilled(&self, port: u16, key: IpKey, granted: u64, retry_after_ns: u64, now_ns: u64) {
        let mut e = self.map.entry((port, key)).or_default();
        e.pending = false;
        e.charging = 0;
        e.tokens = granted;
        e.expires = now_ns.saturating_add(LEASE_TTL_NS);
        if granted == 0 {
            e.denied_until = now_ns.saturating_add(retry_after_ns.max(1));
        }
    }

    /// The refill failed (Redis unreachable): the credit it carried is owed again.
    pub fn failed(&self, port: u16, key: IpKey) {
        if let Some(mut e) = self.map.get_mut(&(port, key)) {
            e.pending = false;
            e.debt += e.charging;
            e.charging = 0;
        }
    }

    /// Drops entries idle for [`IDLE_NS`] with nothing in flight; returns how many remain.
    pub fn purge(&self, now_ns: u64) -> usize {
        self.map
            .retain(|_, e| e.pending || now_ns.saturating_sub(e.last) < IDLE_NS);
        let n = self.map.len();
        self.count.store(n, Ordering::Relaxed);
        n
    }

    /// Clients with an entry.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when no client has an entry.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    const MS: u64 = 1_000_000;

    fn key(n: u8) -> IpKey {
        IpKey::v4(Ipv4Addr::new(10, 0, 0, n))
    }

    fn d(admit: bool, refill: bool) -> LeaseDecision {
        LeaseDecision { admit, refill }
    }

    #[test]
    fn a_new_client_is_admitted_on_credit_and_asks_once() {
        let l = Leases::default();
        assert_eq!(l.admit(1, key(1), 2, 0), d(true, true));
        assert_eq!(
            l.admit(1, key(1), 2, 1),
            d(true, false),
            "credit up to the lease"
        );
        assert_eq!(l.admit(1, key(1), 2, 2), d(false, false), "credit spent");
        assert_eq!(l.take_debt(1, key(1)), 2);
        l.refilled(1, key(1), 2, 0, 3 * MS);
        assert_eq!(l.admit(1, key(1), 2, 4 * MS), d(true, false));
        assert_eq!(
            l.admit(1, key(1), 2, 5 * MS),
            d(true, true),
            "the last token asks"
        );
        assert_eq!(
            l.admit(1, key(1), 2, 6 * MS),
            d(true, false),
            "credit while in flight"
        );
    }

    #[test]
    fn a_refusal_from_redis_holds_until_retry_after() {
        let l = Leases::default();
        assert!(l.admit(1, key(2), 1, 0).refill);
        l.take_debt(1, key(2));
        l.refilled(1, key(2), 0, 100 * MS, MS);
        assert_eq!(l.admit(1, key(2), 1, 50 * MS), d(false, false));
        assert_eq!(l.admit(1, key(2), 1, 100 * MS), d(false, false));
        assert_eq!(l.admit(1, key(2), 1, 101 * MS), d(true, true));
    }

    #[test]
    fn leased_tokens_lapse_and_failed_credit_is_owed_again() {
        let l = Leases::default();
        l.admit(1, key(3), 3, 0);
        assert_eq!(l.take_debt(1, key(3)), 1);
        l.failed(1, key(3));
        assert_eq!(l.take_debt(1, key(3)), 1, "the credit is charged later");
        l.refilled(1, key(3), 3, 0, 0);
        assert_eq!(
            l.admit(1, key(3), 3, LEASE_TTL_NS),
            d(true, true),
            "lapsed: credit"
        );
        assert_eq!(l.take_debt(1, key(3)), 1);
        // Ports are separate clients.
        assert_eq!(l.admit(2, key(3), 3, 0), d(true, true));
        assert_eq!(l.purge(IDLE_NS + LEASE_TTL_NS), 2, "in flight: kept");
        l.refilled(1, key(3), 1, 0, 0);
        l.refilled(2, key(3), 1, 0, 0);
        assert_eq!(l.purge(IDLE_NS + LEASE_TTL_NS), 0);
    }
}
