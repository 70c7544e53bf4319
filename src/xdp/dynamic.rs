//! Dynamic blocks (`blockIp`) as the kernel sees them: one LPM trie, `rampart_dyn`, with
//! deadlines, shared by every policy set (a config swap does not touch it). There is no second
//! record of the blocks here: [`kernel_entries`] derives the trie's exact contents from the
//! engine's set (`crate::protection::DynamicBlocks::rules`), and the manager writes the
//! difference from what the trie holds.
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
use crate::protection::cidr::canonical_net;
use crate::protection::DynamicRule;

/// Every key of the kernel trie with its effective deadlines, for the live `rules` (a rule's
/// `port: None` is scope 0; `expires_ns: None` is stored as `u64::MAX`). Pure: O(rules × 129).
pub(crate) fn kernel_entries(rules: &[DynamicRule]) -> BTreeMap<LpmKey, RampartDynValue> {
    // Per scope and across scopes, the own deadline of each CIDR.
    let mut own: HashMap<(u16, IpNet), u64> = HashMap::with_capacity(rules.len());
    let mut any: HashMap<IpNet, u64> = HashMap::with_capacity(rules.len());
    for r in rules {
        let (scope, net) = (r.port.unwrap_or(0), canonical_net(r.net));
        let deadline = r.expires_ns.unwrap_or(u64::MAX);
        let slot = own.entry((scope, net)).or_insert(0);
        *slot = (*slot).max(deadline);
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
    for &(scope, net) in own.keys() {
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

    fn rule(net: &str, port: Option<u16>, deadline: Option<u64>) -> DynamicRule {
        DynamicRule {
            net: net.parse().unwrap(),
            port,
            expires_ns: deadline,
            note: None,
        }
    }

    fn value(rules: &[DynamicRule], scope: u16, net: &str) -> RampartDynValue {
        kernel_entries(rules)[&lpm::key(scope, net.parse().unwrap())]
    }

    #[test]
    fn a_longer_prefix_inherits_a_later_shorter_deadline() {
        let rules = [
            rule("192.0.2.0/24", None, Some(2_000)),
            rule("192.0.2.7/32", None, Some(1_000)),
        ];
        assert_eq!(value(&rules, 0, "192.0.2.7/32").all_deadline_ns, 2_000);
        assert_eq!(value(&rules, 0, "192.0.2.0/24").all_deadline_ns, 2_000);
        assert_eq!(kernel_entries(&rules[..1]).len(), 1);
    }

    #[test]
    fn port_blocks_reach_scope_zero_only_as_any() {
        let rules = [rule("198.51.100.0/24", Some(443), None)];
        assert_eq!(
            value(&rules, 443, "198.51.100.0/24").all_deadline_ns,
            u64::MAX
        );
        let zero = value(&rules, 0, "198.51.100.0/24");
        assert_eq!(zero.all_deadline_ns, 0);
        assert_eq!(zero.any_deadline_ns, u64::MAX);
        assert!(kernel_entries(&[]).is_empty());
    }

    #[test]
    fn ipv6_any_does_not_block_ipv4() {
        let rules = [rule("::/0", None, Some(5))];
        let marker = value(&rules, 0, "0.0.0.0/0");
        assert_eq!(marker.all_deadline_ns, 0);
        assert_eq!(marker.any_deadline_ns, 0);
        assert_eq!(value(&rules, 0, "::/0").all_deadline_ns, 5);
    }

    #[test]
    fn ipv4_mapped_rules_are_ipv4_keys() {
        let rules = [rule("::ffff:192.0.2.0/120", None, None)];
        assert_eq!(value(&rules, 0, "192.0.2.0/24").all_deadline_ns, u64::MAX);
    }
}
