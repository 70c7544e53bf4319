//! Dynamic blocks (`blockIp`) as the kernel sees them: one LPM trie, `rampart_dyn`, with
//! deadlines, shared by every policy set (a config swap does not touch it).
//!
//! Each block is `(CIDR, port or every listener port, deadline or none)`. Blocks for one port
//! live at scope = port; blocks for every port at scope 0. The kernel looks up a SYN's source
//! at its port's scope and at scope 0 and drops while `all_deadline_ns > now`; for a packet
//! whose port cannot be read it looks up scope 0 and uses `any_deadline_ns` (blocked on some
//! port). Because an LPM lookup returns only the longest matching prefix, each key stores the
//! *effective* deadline: the maximum over the blocks of its scope and family that cover it
//! (`/24` until t1 and `/32` until t0 < t1 → the `/32` key holds t1). IPv4/IPv6 isolation uses
//! the marker key described in [`super::lpm`].
//!
//! Cost: a change recomputes every key by walking its ancestors (≤ 33 or 129 hash probes per
//! key), O(blocks × 129), then writes only the keys whose value changed. Deadlines are
//! CLOCK_MONOTONIC ns; `None` (no TTL) is stored as `u64::MAX`.

use std::collections::{BTreeMap, HashMap};

use ipnet::IpNet;

use super::abi::RampartDynValue;
use super::lpm::{self, LpmKey};

/// One dynamic block, as `blockIp(cidr, { ttlMs, port })` gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XdpDynamicBlock {
    /// Blocked CIDR (a bare address is /32 or /128); host bits are ignored.
    pub net: IpNet,
    /// Listener port it applies to; `None` = every listener port (protected or not).
    pub port: Option<u16>,
    /// CLOCK_MONOTONIC deadline in ns (`now_ns + ttlMs × 1e6`); `None` = until unblocked.
    pub deadline_ns: Option<u64>,
}

/// The userspace record of dynamic blocks: `(scope, canonical CIDR) → deadline ns`.
#[derive(Debug, Default)]
pub struct DynamicBlocks {
    entries: BTreeMap<(u16, IpNet), u64>,
}

impl DynamicBlocks {
    /// Adds or replaces a block (same CIDR and port → the new deadline wins).
    pub fn insert(&mut self, block: &XdpDynamicBlock) {
        let scope = block.port.unwrap_or(0);
        self.entries.insert(
            (scope, lpm::canonical(block.net)),
            block.deadline_ns.unwrap_or(u64::MAX),
        );
    }

    /// Removes a block; true if it was present.
    pub fn remove(&mut self, net: IpNet, port: Option<u16>) -> bool {
        self.entries
            .remove(&(port.unwrap_or(0), lpm::canonical(net)))
            .is_some()
    }

    /// Replaces every block.
    pub fn replace(&mut self, blocks: &[XdpDynamicBlock]) {
        self.entries.clear();
        for b in blocks {
            self.insert(b);
        }
    }

    /// Drops blocks whose deadline is `<= now_ns`; returns how many.
    pub fn expire(&mut self, now_ns: u64) -> usize {
        let before = self.entries.len();
        self.entries.retain(|_, deadline| *deadline > now_ns);
        before - self.entries.len()
    }

    /// Number of blocks.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no blocks.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The blocks, as given (canonical CIDRs).
    pub fn blocks(&self) -> Vec<XdpDynamicBlock> {
        self.entries
            .iter()
            .map(|(&(scope, net), &deadline)| XdpDynamicBlock {
                net,
                port: (scope != 0).then_some(scope),
                deadline_ns: (deadline != u64::MAX).then_some(deadline),
            })
            .collect()
    }

    /// Every key of the kernel trie with its effective deadlines.
    pub fn kernel_entries(&self) -> BTreeMap<LpmKey, RampartDynValue> {
        // Per scope and across scopes, the own deadline of each CIDR.
        let mut own: HashMap<(u16, IpNet), u64> = HashMap::with_capacity(self.entries.len());
        let mut any: HashMap<IpNet, u64> = HashMap::with_capacity(self.entries.len());
        for (&(scope, net), &deadline) in &self.entries {
            own.insert((scope, net), deadline);
            let slot = any.entry(net).or_insert(0);
            *slot = (*slot).max(deadline);
        }
        let covering = |net: IpNet, lookup: &dyn Fn(IpNet) -> Option<u64>| -> u64 {
            let mut best = 0;
            for len in 0..=net.prefix_len() {
                let ancestor = IpNet::new(net.network(), len)
                    .expect("len within the family")
                    .trunc();
                if let Some(d) = lookup(ancestor) {
                    best = best.max(d);
                }
            }
            best
        };

        let mut out = BTreeMap::new();
        // Per-port scopes.
        let mut scopes: BTreeMap<u16, Vec<IpNet>> = BTreeMap::new();
        for &(scope, net) in self.entries.keys() {
            if scope != 0 {
                scopes.entry(scope).or_default().push(net);
            }
        }
        for (&scope, nets) in &scopes {
            for net in with_marker(nets) {
                let all = covering(net, &|a| own.get(&(scope, a)).copied());
                out.insert(
                    lpm::key(scope, net),
                    RampartDynValue {
                        all_deadline_ns: all,
                        any_deadline_ns: all,
                    },
                );
            }
        }
        // Scope 0: every CIDR of every scope.
        let all_nets: Vec<IpNet> = any.keys().copied().collect();
        for net in with_marker(&all_nets) {
            out.insert(
                lpm::key(0, net),
                RampartDynValue {
                    all_deadline_ns: covering(net, &|a| own.get(&(0, a)).copied()),
                    any_deadline_ns: covering(net, &|a| any.get(&a).copied()),
                },
            );
        }
        out
    }
}

/// `nets` plus the IPv4 `/0` marker when an IPv6 CIDR covers the IPv4-mapped range.
fn with_marker(nets: &[IpNet]) -> Vec<IpNet> {
    let mut all = nets.to_vec();
    if nets.iter().any(lpm::covers_mapped_range) && !nets.contains(&lpm::ipv4_any()) {
        all.push(lpm::ipv4_any());
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(net: &str, port: Option<u16>, deadline: Option<u64>) -> XdpDynamicBlock {
        XdpDynamicBlock {
            net: net.parse().unwrap(),
            port,
            deadline_ns: deadline,
        }
    }

    fn value(d: &DynamicBlocks, scope: u16, net: &str) -> RampartDynValue {
        d.kernel_entries()[&lpm::key(scope, net.parse().unwrap())]
    }

    #[test]
    fn a_longer_prefix_inherits_a_later_shorter_deadline() {
        let mut d = DynamicBlocks::default();
        d.insert(&block("192.0.2.0/24", None, Some(2_000)));
        d.insert(&block("192.0.2.7/32", None, Some(1_000)));
        assert_eq!(value(&d, 0, "192.0.2.7/32").all_deadline_ns, 2_000);
        assert_eq!(value(&d, 0, "192.0.2.0/24").all_deadline_ns, 2_000);
        assert_eq!(d.expire(1_000), 1);
        assert_eq!(d.kernel_entries().len(), 1);
    }

    #[test]
    fn port_blocks_reach_scope_zero_only_as_any() {
        let mut d = DynamicBlocks::default();
        d.insert(&block("198.51.100.0/24", Some(443), None));
        assert_eq!(value(&d, 443, "198.51.100.0/24").all_deadline_ns, u64::MAX);
        let zero = value(&d, 0, "198.51.100.0/24");
        assert_eq!(zero.all_deadline_ns, 0);
        assert_eq!(zero.any_deadline_ns, u64::MAX);
        assert!(d.remove("198.51.100.0/24".parse().unwrap(), Some(443)));
        assert!(d.kernel_entries().is_empty());
    }

    #[test]
    fn ipv6_any_does_not_block_ipv4() {
        let mut d = DynamicBlocks::default();
        d.insert(&block("::/0", None, Some(5)));
        let marker = value(&d, 0, "0.0.0.0/0");
        assert_eq!(marker.all_deadline_ns, 0);
        assert_eq!(marker.any_deadline_ns, 0);
        assert_eq!(value(&d, 0, "::/0").all_deadline_ns, 5);
        assert_eq!(d.blocks(), vec![block("::/0", None, Some(5))]);
    }
}
