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

/// The five lists of the blocked view, in the documented order, with entries of type `T`:
/// [`BlockedView`] (one listener's, bare entries) and [`BlockedIps`] (the union over listeners,
/// each entry with its port).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lists<T> {
    /// `rateLimited`: clients whose rate limit is exhausted after a `rate_limited` refusal.
    pub rate_limited: Vec<T>,
    /// `concurrencyLimited`: clients at `maxConcurrentPerIp` after a `too_many_connections`
    /// refusal.
    pub concurrency_limited: Vec<T>,
    /// `cidrBlocklist`: the policy's `blocklist`.
    pub cidr_blocklist: Vec<T>,
    /// `penaltyBoxed`: clients and prefixes in the penalty box (userspace boxes and kernel bans).
    pub penalty_boxed: Vec<T>,
    /// `dynamicBlocklist`: `blockIp` entries.
    pub dynamic_blocklist: Vec<T>,
}

impl<T> Default for Lists<T> {
    fn default() -> Self {
        Lists {
            rate_limited: Vec::new(),
            concurrency_limited: Vec::new(),
            cidr_blocklist: Vec::new(),
            penalty_boxed: Vec::new(),
            dynamic_blocklist: Vec::new(),
        }
    }
}

/// The JS names of the five lists, in the order of [`Lists::lists`].
pub(crate) const LIST_NAMES: [&str; 5] = [
    "rateLimited",
    "concurrencyLimited",
    "cidrBlocklist",
    "penaltyBoxed",
    "dynamicBlocklist",
];

impl<T> Lists<T> {
    /// The five lists with their JS names, in the documented order.
    pub fn lists(&self) -> [(&'static str, &[T]); 5] {
        let [a, b, c, d, e] = LIST_NAMES;
        [
            (a, &self.rate_limited),
            (b, &self.concurrency_limited),
            (c, &self.cidr_blocklist),
            (d, &self.penalty_boxed),
            (e, &self.dynamic_blocklist),
        ]
    }

    fn lists_mut(&mut self) -> [&mut Vec<T>; 5] {
        [
            &mut self.rate_limited,
            &mut self.concurrency_limited,
            &mut self.cidr_blocklist,
            &mut self.penalty_boxed,
            &mut self.dynamic_blocklist,
        ]
    }

    fn into_lists(self) -> [Vec<T>; 5] {
        [
            self.rate_limited,
            self.concurrency_limited,
            self.cidr_blocklist,
            self.penalty_boxed,
            self.dynamic_blocklist,
        ]
    }
}

/// The blocked clients and networks of one listener at one instant; each list sorted by `ip`.
pub type BlockedView = Lists<BlockedEntry>;

impl Lists<BlockedEntry> {
    pub(crate) fn sort(&mut self) {
        for list in self.lists_mut() {
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
pub type BlockedIps = Lists<Listed>;

impl Lists<Listed> {
    /// Adds one listener's view.
    pub fn add(&mut self, port: u16, view: BlockedView) {
        for (list, entries) in self.lists_mut().into_iter().zip(view.into_lists()) {
            list.extend(entries.into_iter().map(|entry| Listed { entry, port }));
        }
    }

    /// Sorts every list by `(ip, port)` and removes exact duplicates.
    pub fn finish(&mut self) {
        for list in self.lists_mut() {
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
    pub(crate) fn add(&self, flag: u8, key: IpKey) {
        Self::lock(self.set(flag)).insert(key);
    }

    /// Removes `key` from every set whose flag is in `flags` (entry evicted).
    pub(crate) fn forget(&self, key: IpKey, flags: u8) {
        for f in [FLAG_RATE, FLAG_CONC, FLAG_BOX] {
            if flags & f != 0 {
                Self::lock(self.set(f)).remove(&key);
            }
        }
    }

    /// Removes `key` from the set of `flag`.
    pub(crate) fn remove(&self, flag: u8, key: IpKey) {
        Self::lock(self.set(flag)).remove(&key);
    }

    /// The keys currently in the set of `flag`.
    pub(crate) fn snapshot(&self, flag: u8) -> Vec<IpKey> {
        Self::lock(self.set(flag)).iter().copied().collect()
    }
}
