//! The blocked view behind `blockedIps()`, answered in O(number blocked), not O(number tracked).
//!
//! Membership, evaluated at the `now` of the query:
//! - `rate_limited`: clients refused as `rate_limited` whose `rateLimit` or `sustained` is still
//!   exhausted (the next attempt at `now` would not conform); `remaining_ms` = time until it would.
//! - `concurrency_limited`: clients refused as `too_many_connections` that still hold
//!   `maxConcurrentPerIp` connections.
//! - `penalty_boxed`: clients whose box is running; `remaining_ms` = time to the deadline.
//! - `cidr_blocklist`: the policy's `blocklist` networks (canonical CIDRs).
//! - `dynamic_blocklist`: `blockIp` entries for this listener (global or its port), `remaining_ms`
//!   for entries with a TTL and `note` for the reason given.
//!
//! How it stays O(blocked): each list has a side set of keys, and the entry carries a flag per
//! list. A refusal sets the flag (under the entry's shard lock) and only a 0→1 transition takes
//! the set's lock to insert the key — so a client refused a million times costs one insert. A
//! query snapshots the set, projects each key's entry to `now` under its shard lock, reports the
//! ones still blocked and removes the rest (clearing their flag, so the next refusal lists them
//! again). Evicting a flagged entry removes its key from the sets. A set may briefly hold a key
//! whose flag is clear (a refusal racing a query); the query re-checks every key, so the view is
//! always exact at its `now`.

use super::entry::{FLAG_BOX, FLAG_CONC, FLAG_RATE};
use super::key::IpKey;
use super::reason::BlockReason;
use std::collections::HashSet;
use std::sync::Mutex;

/// One blocked client or network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockedEntry {
    /// Bare IPv4 client, IPv6 client prefix (`2001:db8:1:2::/64`) or canonical CIDR
    /// (`192.0.2.0/24`, `127.0.0.2/32`) for the CIDR lists.
    pub ip: String,
    /// Why it is listed.
    pub reason: BlockReason,
    /// Ms until it would be let in again (rounded up), when that is known.
    pub remaining_ms: Option<u64>,
    /// The reason text given to `blockIp` (dynamic entries only).
    pub note: Option<String>,
}

/// The blocked clients and networks of one listener at one instant; each list sorted by `ip`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlockedView {
    /// Clients whose rate limit is exhausted after a `rate_limited` refusal.
    pub rate_limited: Vec<BlockedEntry>,
    /// Clients at `maxConcurrentPerIp` after a `too_many_connections` refusal.
    pub concurrency_limited: Vec<BlockedEntry>,
    /// The policy's `blocklist`.
    pub cidr_blocklist: Vec<BlockedEntry>,
    /// Clients in the penalty box.
    pub penalty_boxed: Vec<BlockedEntry>,
    /// `blockIp` entries applying to this listener.
    pub dynamic_blocklist: Vec<BlockedEntry>,
}

impl BlockedView {
    pub(crate) fn sort(&mut self) {
        for list in [
            &mut self.rate_limited,
            &mut self.concurrency_limited,
            &mut self.cidr_blocklist,
            &mut self.penalty_boxed,
            &mut self.dynamic_blocklist,
        ] {
            list.sort_by(|a, b| a.ip.cmp(&b.ip));
        }
    }
}

/// One listed client or network with the listener port it is listed for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// The entry.
    pub entry: BlockedEntry,
    /// The listener port.
    pub port: u16,
}

/// `blockedIps()`: the union over the listeners asked for, each list sorted by `(ip, port)` with
/// exact duplicates (same ip, port and reason) removed. Serialised at the JS boundary (bare `ip`
/// lists by default, `{ ip, port, reason, remainingMs?, note? }` with `detail`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlockedIps {
    /// `rateLimited`.
    pub rate_limited: Vec<Listed>,
    /// `concurrencyLimited`.
    pub concurrency_limited: Vec<Listed>,
    /// `cidrBlocklist`.
    pub cidr_blocklist: Vec<Listed>,
    /// `penaltyBoxed` (userspace boxes and kernel bans).
    pub penalty_boxed: Vec<Listed>,
    /// `dynamicBlocklist`.
    pub dynamic_blocklist: Vec<Listed>,
}

impl BlockedIps {
    /// The five lists with their JS names, in the documented order.
    pub fn lists(&self) -> [(&'static str, &[Listed]); 5] {
        [
            ("rateLimited", &self.rate_limited),
            ("concurrencyLimited", &self.concurrency_limited),
            ("cidrBlocklist", &self.cidr_blocklist),
            ("penaltyBoxed", &self.penalty_boxed),
            ("dynamicBlocklist", &self.dynamic_blocklist),
        ]
    }

    /// Adds one listener's view.
    pub fn add(&mut self, port: u16, view: BlockedView) {
        let pairs = [
            (&mut self.rate_limited, view.rate_limited),
            (&mut self.concurrency_limited, view.concurrency_limited),
            (&mut self.cidr_blocklist, view.cidr_blocklist),
            (&mut self.penalty_boxed, view.penalty_boxed),
            (&mut self.dynamic_blocklist, view.dynamic_blocklist),
        ];
        for (list, entries) in pairs {
            list.extend(entries.into_iter().map(|entry| Listed { entry, port }));
        }
    }

    /// Sorts every list by `(ip, port)` and removes exact duplicates.
    pub fn finish(&mut self) {
        for list in [
            &mut self.rate_limited,
            &mut self.concurrency_limited,
            &mut self.cidr_blocklist,
            &mut self.penalty_boxed,
            &mut self.dynamic_blocklist,
        ] {
            list.sort_by(|a, b| (&a.entry.ip, a.port).cmp(&(&b.entry.ip, b.port)));
            list.dedup_by(|a, b| {
                a.entry.ip == b.entry.ip && a.port == b.port && a.entry.reason == b.entry.reason
            });
        }
    }
}

/// The side sets (see the module doc). Lock order: a shard lock may be held while taking a set
/// lock, never the reverse.
#[derive(Default)]
pub(crate) struct SideLists {
    rate: Mutex<HashSet<IpKey>>,
    conc: Mutex<HashSet<IpKey>>,
    boxed: Mutex<HashSet<IpKey>>,
}

impl SideLists {
    fn set(&self, flag: u8) -> &Mutex<HashSet<IpKey>> {
        match flag {
            FLAG_RATE => &self.rate,
            FLAG_CONC => &self.conc,
            _ => &self.boxed,
        }
    }

    fn lock(m: &Mutex<HashSet<IpKey>>) -> std::sync::MutexGuard<'_, HashSet<IpKey>> {
        m.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds `key` to the set of `flag` (after the entry's flag went 0→1).
    pub fn add(&self, flag: u8, key: IpKey) {
        Self::lock(self.set(flag)).insert(key);
    }

    /// Removes `key` from every set whose flag is in `flags` (entry evicted).
    pub fn forget(&self, key: IpKey, flags: u8) {
        for f in [FLAG_RATE, FLAG_CONC, FLAG_BOX] {
            if flags & f != 0 {
                Self::lock(self.set(f)).remove(&key);
            }
        }
    }

    /// Removes `key` from the set of `flag`.
    pub fn remove(&self, flag: u8, key: IpKey) {
        Self::lock(self.set(flag)).remove(&key);
    }

    /// The keys currently in the set of `flag`.
    pub fn snapshot(&self, flag: u8) -> Vec<IpKey> {
        Self::lock(self.set(flag)).iter().copied().collect()
    }
}
