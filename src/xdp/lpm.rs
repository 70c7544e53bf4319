//! CIDRs as LPM-trie keys, and the two rules that let one trie serve every port and both
//! families.
//!
//! Addresses are 16 bytes with IPv4 stored IPv4-mapped, so an IPv4 `/N` is the 128-bit prefix
//! `96 + N`; an IPv4-mapped IPv6 CIDR (`::ffff:a.b.c.d/N`, N ≥ 96) is the IPv4 CIDR `/N-96`.
//! Allow/block tries use [`RampartCidrKey`] (prefix + address); the dynamic trie puts a 16-bit
//! scope (port, 0 = every port) before the address ([`key`]).
//!
//! Covering: an LPM lookup returns only the longest matching prefix, so each key's value
//! folds in every same-family entry that covers it — for allow/block the OR of the port
//! bitmasks (a `/24` on port A and a `/32` inside it on port B: the `/32` key holds A|B), for
//! dynamic blocks the maximum deadline. Lists are folded by one sort and a stack sweep,
//! O(n log n).
//!
//! Family isolation: an IPv6 CIDR short enough to contain `::ffff:0:0/96` (`::/0`, `::/80`, …)
//! would otherwise match every IPv4 source, while the contract says `/0` (and any IPv6 CIDR)
//! matches its own family only. Such a trie also gets a marker key at exactly `::ffff:0:0/96`
//! (the IPv4 `/0` position): longest-prefix match sends every IPv4 source that no IPv4 entry
//! holds to the marker, whose value is 0 ("not listed") unless an IPv4 `0.0.0.0/0` is listed.

use std::net::Ipv4Addr;

use ipnet::{IpNet, Ipv4Net};

use super::abi::{addr16, RampartCidrKey, RampartLpmData};
use crate::protection::cidr::canonical_net;

/// One LPM key: `(prefixlen, data)`; ordered so sets diff deterministically.
pub(crate) type LpmKey = (u32, RampartLpmData);

/// The LPM key of `net` (canonical) in `scope`.
pub(crate) fn key(scope: u16, net: IpNet) -> LpmKey {
    let net = canonical_net(net);
    let prefixlen = match net {
        IpNet::V4(n) => 16 + 96 + u32::from(n.prefix_len()),
        IpNet::V6(n) => 16 + u32::from(n.prefix_len()),
    };
    (
        prefixlen,
        RampartLpmData {
            scope,
            addr: addr16(net.network()),
            pad: 0,
        },
    )
}

/// The IPv4 `/0` net, whose key is the family marker.
pub(crate) fn ipv4_any() -> IpNet {
    IpNet::V4(Ipv4Net::new(Ipv4Addr::UNSPECIFIED, 0).expect("/0"))
}

/// Whether an IPv6 `net` (canonical) contains the IPv4-mapped range `::ffff:0:0/96`.
pub(crate) fn covers_mapped_range(net: &IpNet) -> bool {
    match net {
        IpNet::V6(n) => n.prefix_len() <= 96 && n.contains(&Ipv4Addr::UNSPECIFIED.to_ipv6_mapped()),
        IpNet::V4(_) => false,
    }
}

/// The allow/block key of `net`: `prefixlen` 96 + N (IPv4) or N (IPv6), network address.
pub(crate) fn cidr_key(net: IpNet) -> RampartCidrKey {
    let net = canonical_net(net);
    let prefixlen = match net {
        IpNet::V4(n) => 96 + u32::from(n.prefix_len()),
        IpNet::V6(n) => u32::from(n.prefix_len()),
    };
    RampartCidrKey {
        prefixlen,
        addr: addr16(net.network()),
    }
}

/// The contents of one allow or block trie: `entries` are `(CIDR, port bits)` (a CIDR may
/// repeat, its bits are OR-ed); returns every key with its effective bits (own | covering
/// same-family entries), plus the family marker when needed, sorted by key.
pub(crate) fn list_entries(entries: &[(IpNet, u64)]) -> Vec<(RampartCidrKey, u64)> {
    fn order(net: &IpNet) -> (u8, u128, u8) {
        match net {
            IpNet::V4(n) => (4, u128::from(u32::from(n.network())), n.prefix_len()),
            IpNet::V6(n) => (6, u128::from(n.network()), n.prefix_len()),
        }
    }
    let mut nets: Vec<(IpNet, u64)> = entries
        .iter()
        .map(|&(n, b)| (canonical_net(n), b))
        .collect();
    if nets.iter().any(|(n, _)| covers_mapped_range(n)) {
        nets.push((ipv4_any(), 0));
    }
    // Parents sort before their children: same family, lower address, then shorter prefix.
    nets.sort_unstable_by_key(|(n, _)| order(n));
    let mut out: Vec<(RampartCidrKey, u64)> = Vec::with_capacity(nets.len());
    let mut stack: Vec<(IpNet, u64)> = Vec::new();
    let mut i = 0;
    while i < nets.len() {
        let net = nets[i].0;
        let mut own = 0;
        while i < nets.len() && nets[i].0 == net {
            own |= nets[i].1;
            i += 1;
        }
        while stack.last().is_some_and(|(top, _)| !top.contains(&net)) {
            stack.pop();
        }
        let bits = own | stack.last().map_or(0, |&(_, b)| b);
        stack.push((net, bits));
        out.push((cidr_key(net), bits));
    }
    out.sort_unstable_by_key(|&(k, _)| k);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    #[test]
    fn prefix_lengths_follow_the_16_byte_form() {
        assert_eq!(cidr_key(net("192.0.2.0/24")).prefixlen, 96 + 24);
        assert_eq!(cidr_key(net("2001:db8::/32")).prefixlen, 32);
        assert_eq!(key(443, net("192.0.2.0/24")).0, 16 + 96 + 24);
        assert_eq!(key(443, net("2001:db8::/32")).0, 16 + 32);
        assert_eq!(
            key(443, net("::ffff:192.0.2.0/120")),
            key(443, net("192.0.2.0/24"))
        );
        assert_eq!(key(443, net("10.1.2.3/8")), key(443, net("10.0.0.0/8")));
    }

    fn bits_of(entries: &[(RampartCidrKey, u64)], n: &str) -> u64 {
        let k = cidr_key(net(n));
        entries.iter().find(|(key, _)| *key == k).unwrap().1
    }

    #[test]
    fn ipv6_default_route_gets_a_family_marker() {
        let e = list_entries(&[(net("::/0"), 1)]);
        assert_eq!(e.len(), 2);
        assert_eq!(bits_of(&e, "0.0.0.0/0"), 0);
        assert_eq!(bits_of(&e, "::/0"), 1);

        let both = list_entries(&[(net("::/0"), 1), (net("0.0.0.0/0"), 2)]);
        assert_eq!(both.len(), 2);
        assert_eq!(bits_of(&both, "0.0.0.0/0"), 2);

        assert_eq!(list_entries(&[(net("2001:db8::/32"), 1)]).len(), 1);
    }

    #[test]
    fn covering_entries_fold_their_port_bits_within_a_family() {
        let e = list_entries(&[
            (net("10.0.0.0/8"), 0b001),
            (net("10.1.0.0/16"), 0b010),
            (net("10.1.2.0/24"), 0b100),
            (net("10.2.0.0/16"), 0b100),
            (net("10.1.2.0/24"), 0b1000),
            (net("11.0.0.0/8"), 0b10000),
            (net("::/0"), 0b100000),
            (net("::ffff:10.1.2.3/128"), 0b1000000),
        ]);
        assert_eq!(bits_of(&e, "10.0.0.0/8"), 0b001);
        assert_eq!(bits_of(&e, "10.1.0.0/16"), 0b011);
        assert_eq!(bits_of(&e, "10.1.2.0/24"), 0b1111);
        assert_eq!(bits_of(&e, "10.1.2.3/32"), 0b1001111);
        assert_eq!(bits_of(&e, "10.2.0.0/16"), 0b101);
        assert_eq!(bits_of(&e, "11.0.0.0/8"), 0b10000);
        assert_eq!(bits_of(&e, "0.0.0.0/0"), 0);
        assert_eq!(e.len(), 8);
        assert!(e.windows(2).all(|w| w[0].0 < w[1].0));
    }

    #[test]
    fn mapped_range_coverage() {
        assert!(covers_mapped_range(&net("::/0")));
        assert!(covers_mapped_range(&net("::/80")));
        assert!(covers_mapped_range(&net("::ffff:0:0/96")));
        assert!(!covers_mapped_range(&net("2001:db8::/32")));
        assert!(!covers_mapped_range(&net("0.0.0.0/0")));
    }
}
