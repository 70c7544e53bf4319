//! Dynamic blocks (`blockIp` / `unblockIp`): runtime CIDR blocks with an optional TTL and an
//! optional listener port, shared by every listener's engine (an entry without a port applies to
//! every listener, with or without a protection policy; with a port, to that listener only).
//!
//! Lookup is O(number of distinct prefix lengths in use): for each length present, the address is
//! masked and looked up in a hash map — no lock, no allocation: readers load an immutable snapshot
//! through `arc-swap`, and an empty set costs one relaxed load. Writes (rare, operator actions) go
//! through a mutex and publish a new snapshot: a small *delta* layer over a shared *base* layer,
//! copied on each write; when the delta outgrows max(64, √n) entries it is folded into a rebuilt
//! base. A write therefore costs O(√n) amortised, so a script blocking 100k addresses one by one
//! finishes in well under a second. Many entries at once ([`DynamicBlocks::block_many`], the
//! cluster tier's load) are one write: O(entries + n), so batches that double cost O(N) in all.
//! The master and the layers share each network's entries (`Arc`): a rebuild copies pointers.
//!
//! Expiry: an entry whose TTL has passed stops matching at once (checked at lookup) and is
//! removed by [`DynamicBlocks::purge_expired`] (called from every engine's eviction tick) or by the
//! next write. Blocking the same CIDR and port again replaces its TTL and note.

use super::blocked::BlockedEntry;
use super::key::mask128;
use super::reason::BlockReason;
use crate::clock::{ms_to_ns, ns_to_ms_ceil};
use arc_swap::ArcSwap;
use ipnet::IpNet;
use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// A validated `blockIp(cidr, { ttlMs, reason, port })`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockRequest {
    /// The network to block (canonical; a bare address is /32 or /128).
    pub net: IpNet,
    /// Time to live in ms (≥ 1); `None` = until `unblockIp`.
    pub ttl_ms: Option<u64>,
    /// The operator's note, at most `MAX_REASON_CHARS` (200) characters.
    pub reason: Option<String>,
    /// The listener port it applies to; `None` = every listener.
    pub port: Option<u16>,
}

/// One `blockIp` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DynamicRule {
    /// The blocked network (canonical).
    pub net: IpNet,
    /// `Some(port)`: only the listener on that port; `None`: every listener.
    pub port: Option<u16>,
    /// CLOCK_MONOTONIC ns at which it expires; `None` = until `unblockIp`.
    pub expires_ns: Option<u64>,
    /// The reason text given to `blockIp`.
    pub note: Option<Arc<str>>,
}

impl DynamicRule {
    fn live(&self, now_ns: u64) -> bool {
        self.expires_ns.is_none_or(|t| now_ns < t)
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
struct NetKey {
    v6: bool,
    len: u8,
    bits: u128,
}

impl NetKey {
    fn of(net: &IpNet) -> NetKey {
        match net {
            IpNet::V4(n) => NetKey {
                v6: false,
                len: n.prefix_len(),
                bits: u128::from(u32::from(n.network())),
            },
            IpNet::V6(n) => NetKey {
                v6: true,
                len: n.prefix_len(),
                bits: u128::from(n.network()),
            },
        }
    }
}

#[derive(Default)]
struct Layer {
    map: HashMap<NetKey, Arc<[DynamicRule]>>,
}

/// Prefix lengths in use: bit `l` set when some key has length `l` (IPv4: 0..=32, IPv6: 0..=128).
#[derive(Default, Clone, Copy)]
struct Lens {
    v4: u64,
    v6: [u64; 3],
}

impl Lens {
    /// Marks a [`len_slot`] as in use.
    fn add(&mut self, slot: usize) {
        if slot < 33 {
            self.v4 |= 1 << slot;
        } else {
            let l = slot - 33;
            self.v6[l / 64] |= 1 << (l % 64);
        }
    }
}

/// Index of a key's prefix length in `Master::per_len`.
fn len_slot(k: &NetKey) -> usize {
    if k.v6 {
        33 + k.len as usize
    } else {
        k.len as usize
    }
}

#[derive(Default)]
struct Snapshot {
    base: Arc<Layer>,
    delta: Arc<Layer>,
    lens: Lens,
}

impl Snapshot {
    #[inline]
    fn rules(&self, k: &NetKey) -> Option<&[DynamicRule]> {
        match self.delta.map.get(k) {
            Some(r) => Some(r),
            None => self.base.map.get(k).map(|r| &r[..]),
        }
    }

    fn matches(&self, ip: IpAddr, port: u16, now_ns: u64) -> bool {
        let hit = |k: NetKey| {
            self.rules(&k).is_some_and(|rules| {
                rules
                    .iter()
                    .any(|r| r.port.is_none_or(|p| p == port) && r.live(now_ns))
            })
        };
        match ip {
            IpAddr::V4(v4) => {
                let a = u32::from(v4);
                let mut lens = self.lens.v4;
                while lens != 0 {
                    let l = lens.trailing_zeros();
                    lens &= lens - 1;
                    let m = if l == 0 { 0 } else { u32::MAX << (32 - l) };
                    if hit(NetKey {
                        v6: false,
                        len: l as u8,
                        bits: u128::from(a & m),
                    }) {
                        return true;
                    }
                }
                false
            }
            IpAddr::V6(v6) => {
                let a = u128::from(v6);
                for (word, &bits) in self.lens.v6.iter().enumerate() {
                    let mut lens = bits;
                    while lens != 0 {
                        let l = (word * 64) as u32 + lens.trailing_zeros();
                        lens &= lens - 1;
                        if hit(NetKey {
                            v6: true,
                            len: l as u8,
                            bits: a & mask128(l as u8),
                        }) {
                            return true;
                        }
                    }
                }
                false
            }
        }
    }
}

struct Master {
    /// The entries per network, shared with the published layers (a base rebuild copies
    /// pointers, not entries).
    rules: HashMap<NetKey, Arc<[DynamicRule]>>,
    /// Keys per prefix length (IPv4 0..=32, then IPv6 0..=128), for the published `Lens`.
    per_len: [u32; 33 + 129],
    expiry: BTreeSet<(u64, NetKey, Option<u16>)>,
    base: Arc<Layer>,
    delta: HashMap<NetKey, Arc<[DynamicRule]>>,
}

/// The `blockIp` entries of one proxy, shared (`Arc`) by every listener's engine.
pub struct DynamicBlocks {
    snap: ArcSwap<Snapshot>,
    nonempty: AtomicBool,
    generation: AtomicU64,
    master: Mutex<Master>,
}

impl Default for DynamicBlocks {
    fn default() -> Self {
        DynamicBlocks::new()
    }
}

impl DynamicBlocks {
    /// An empty set.
    pub fn new() -> DynamicBlocks {
        DynamicBlocks {
            snap: ArcSwap::from_pointee(Snapshot::default()),
            nonempty: AtomicBool::new(false),
            generation: AtomicU64::new(0),
            master: Mutex::new(Master {
                rules: HashMap::new(),
                per_len: [0; 33 + 129],
                expiry: BTreeSet::new(),
                base: Arc::new(Layer::default()),
                delta: HashMap::new(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Master> {
        self.master.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Blocks `net` (canonical, as `crate::config::update::parse_block` gives it) for `ttl_ms`
    /// (`None` = until unblocked) on listener `port` (`None` = every listener), from `now_ns`.
    /// Blocking the same network and port again replaces its TTL and note.
    pub fn block(
        &self,
        net: IpNet,
        ttl_ms: Option<u64>,
        reason: Option<String>,
        port: Option<u16>,
        now_ns: u64,
    ) {
        let mut m = self.lock();
        let mut changed = purge_locked(&mut m, now_ns);
        changed.push(insert_locked(&mut m, net, ttl_ms, reason, port, now_ns));
        self.publish(&mut m, &changed);
    }

    /// Blocks every entry of `blocks` as [`DynamicBlocks::block`] does, in one write: one lock
    /// and one published snapshot for the lot (O(len + n) instead of O(len × √n)), for a load of
    /// many entries (the cluster tier's).
    pub fn block_many(&self, blocks: Vec<BlockRequest>, now_ns: u64) {
        if blocks.is_empty() {
            return;
        }
        let mut m = self.lock();
        let mut changed = purge_locked(&mut m, now_ns);
        changed.reserve(blocks.len());
        for b in blocks {
            changed.push(insert_locked(
                &mut m, b.net, b.ttl_ms, b.reason, b.port, now_ns,
            ));
        }
        self.publish(&mut m, &changed);
    }

    /// Removes the block on `net`: with `port`, only that listener's entry; without, the
    /// every-listener entry and every per-port entry of that network. Returns whether anything
    /// was removed (an entry whose TTL passed since the last purge still counts).
    pub fn unblock(&self, net: IpNet, port: Option<u16>) -> bool {
        let key = NetKey::of(&net);
        let mut m = self.lock();
        let Some(rules) = m.rules.get(&key) else {
            return false;
        };
        let mut gone = Vec::new();
        let kept: Vec<DynamicRule> = rules
            .iter()
            .filter(|r| {
                let hit = port.is_none() || r.port == port;
                if hit {
                    gone.push((r.expires_ns, r.port));
                }
                !hit
            })
            .cloned()
            .collect();
        replace_rules(&mut m, key, kept);
        for (t, p) in &gone {
            if let Some(t) = t {
                m.expiry.remove(&(*t, key, *p));
            }
        }
        self.publish(&mut m, &[key]);
        !gone.is_empty()
    }

    /// Whether `ip` (canonical: IPv4-mapped already converted) is blocked for listener `port` at
    /// `now_ns`.
    #[inline]
    pub fn matches(&self, ip: IpAddr, port: u16, now_ns: u64) -> bool {
        if !self.nonempty.load(Ordering::Relaxed) {
            return false;
        }
        self.snap.load().matches(ip, port, now_ns)
    }

    /// Drops entries whose TTL has passed; returns how many.
    pub fn purge_expired(&self, now_ns: u64) -> usize {
        if !self.nonempty.load(Ordering::Relaxed) {
            return 0;
        }
        let mut m = self.lock();
        if m.expiry.first().is_none_or(|f| f.0 > now_ns) {
            return 0;
        }
        let keys = purge_locked(&mut m, now_ns);
        let n = keys.len();
        self.publish(&mut m, &keys);
        n
    }

    /// Live entries applying to listener `port` (`None`: all entries), unsorted.
    pub fn rules(&self, port: Option<u16>, now_ns: u64) -> Vec<DynamicRule> {
        let m = self.lock();
        m.rules
            .values()
            .flat_map(|r| r.iter())
            .filter(|r| r.live(now_ns) && (port.is_none() || r.port.is_none() || r.port == port))
            .cloned()
            .collect()
    }

    /// Live entries for listener `port` as blocked-view entries (`dynamic_blocked`).
    pub fn entries(&self, port: Option<u16>, now_ns: u64) -> Vec<BlockedEntry> {
        self.rules(port, now_ns)
            .into_iter()
            .map(|r| BlockedEntry {
                ip: r.net.to_string(),
                reason: BlockReason::DynamicBlocked,
                remaining_ms: r
                    .expires_ns
                    .map(|t| ns_to_ms_ceil(t.saturating_sub(now_ns))),
                note: r.note.as_deref().map(str::to_string),
            })
            .collect()
    }

    /// Number of entries (including expired ones not yet purged).
    pub fn len(&self) -> usize {
        self.lock().rules.values().map(|r| r.len()).sum()
    }

    /// True when there is no entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn publish(&self, m: &mut Master, changed: &[NetKey]) {
        for k in changed {
            let rules: Arc<[DynamicRule]> = m.rules.get(k).cloned().unwrap_or_default();
            m.delta.insert(*k, rules);
        }
        if m.delta.len() > 64usize.max(m.rules.len().isqrt()) {
            m.base = Arc::new(Layer {
                map: m.rules.iter().map(|(k, v)| (*k, Arc::clone(v))).collect(),
            });
            m.delta.clear();
        }
        let mut lens = Lens::default();
        for (slot, &n) in m.per_len.iter().enumerate() {
            if n > 0 {
                lens.add(slot);
            }
        }
        let snap = Snapshot {
            base: Arc::clone(&m.base),
            delta: Arc::new(Layer {
                map: m.delta.clone(),
            }),
            lens,
        };
        self.snap.store(Arc::new(snap));
        self.nonempty.store(!m.rules.is_empty(), Ordering::Release);
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Counts changes (block, unblock, expiry purge): the kernel's copy is rewritten when it
    /// moves.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }
}

/// Inserts (or replaces) one entry into the master, unpublished; returns its key.
fn insert_locked(
    m: &mut Master,
    net: IpNet,
    ttl_ms: Option<u64>,
    reason: Option<String>,
    port: Option<u16>,
    now_ns: u64,
) -> NetKey {
    let expires_ns = ttl_ms.map(|ms| now_ns.saturating_add(ms_to_ns(ms)));
    let key = NetKey::of(&net);
    let mut rules: Vec<DynamicRule> = m.rules.get(&key).map(|r| r.to_vec()).unwrap_or_default();
    let old_expiry = rules
        .iter()
        .position(|r| r.port == port)
        .map(|i| rules.remove(i).expires_ns);
    rules.push(DynamicRule {
        net,
        port,
        expires_ns,
        note: reason.map(Arc::from),
    });
    if m.rules.insert(key, rules.into()).is_none() {
        m.per_len[len_slot(&key)] += 1;
    }
    if let Some(Some(t)) = old_expiry {
        m.expiry.remove(&(t, key, port));
    }
    if let Some(t) = expires_ns {
        m.expiry.insert((t, key, port));
    }
    key
}

/// Sets the entries of `key` in the master to `kept` (none: the key goes), unpublished.
fn replace_rules(m: &mut Master, key: NetKey, kept: Vec<DynamicRule>) {
    if kept.is_empty() {
        if m.rules.remove(&key).is_some() {
            m.per_len[len_slot(&key)] -= 1;
        }
    } else {
        m.rules.insert(key, kept.into());
    }
}

/// Removes expired rules from the master; returns the keys touched.
fn purge_locked(m: &mut Master, now_ns: u64) -> Vec<NetKey> {
    let mut touched = Vec::new();
    while let Some(&(t, key, port)) = m.expiry.first() {
        if t > now_ns {
            break;
        }
        m.expiry.pop_first();
        if let Some(rules) = m.rules.get(&key) {
            let kept: Vec<DynamicRule> = rules
                .iter()
                .filter(|r| !(r.port == port && r.expires_ns == Some(t)))
                .cloned()
                .collect();
            replace_rules(m, key, kept);
        }
        touched.push(key);
    }
    touched
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protection::cidr::parse_cidr;

    const MS: u64 = crate::clock::NS_PER_MS;

    fn req(cidr: &str, ttl_ms: Option<u64>, port: Option<u16>) -> BlockRequest {
        BlockRequest {
            net: parse_cidr(cidr).unwrap(),
            ttl_ms,
            reason: Some("n".into()),
            port,
        }
    }

    /// One write of many entries is the same set as one write each: lookups, replacement of a
    /// network's entry, ports, TTLs, and one new snapshot (generation) for the lot.
    #[test]
    fn block_many_is_block_for_each_in_one_write() {
        let (one, many) = (DynamicBlocks::new(), DynamicBlocks::new());
        let mut reqs: Vec<BlockRequest> = (0..5000u32)
            .map(|i| req(&format!("10.{}.{}.0/24", i >> 8, i & 255), Some(1000), None))
            .collect();
        reqs.push(req("2001:db8::/32", None, Some(443)));
        reqs.push(req("10.0.0.0/24", Some(5000), None)); // replaces the first one's TTL
        for r in reqs.clone() {
            one.block(r.net, r.ttl_ms, r.reason, r.port, 0);
        }
        let g = many.generation();
        many.block_many(reqs, 0);
        assert_eq!(many.generation(), g + 1, "one snapshot");
        assert_eq!(many.len(), one.len());
        assert_eq!(many.len(), 5001);
        let sorted = |d: &DynamicBlocks| {
            let mut r: Vec<String> = d
                .rules(None, 0)
                .iter()
                .map(|r| format!("{} {:?} {:?}", r.net, r.port, r.expires_ns))
                .collect();
            r.sort();
            r
        };
        assert_eq!(sorted(&many), sorted(&one));
        for (ip, port, at, hit) in [
            ("10.0.0.9", 1, 2000 * MS, true),
            ("10.0.1.9", 1, 2000 * MS, false),
            ("10.19.135.1", 1, 999 * MS, true),
            ("10.19.136.1", 1, 0, false),
            ("2001:db8::1", 443, u64::MAX - 1, true),
            ("2001:db8::1", 80, 0, false),
        ] {
            let ip: IpAddr = ip.parse().unwrap();
            assert_eq!(many.matches(ip, port, at), hit, "{ip} {port} {at}");
            assert_eq!(one.matches(ip, port, at), hit, "{ip} {port} {at}");
        }
        assert_eq!(many.purge_expired(1000 * MS), 4999);
        many.block_many(Vec::new(), 0);
        assert_eq!(many.len(), 2);
    }
}
