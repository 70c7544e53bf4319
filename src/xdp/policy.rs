//! Port policies: what the userspace config means for the kernel, turned into the exact
//! contents of one policy set (port map + allow trie + block trie).
//!
//! A set holds, per protected port: a `RampartPortPolicy` (flags, GCRA interval
//! T = 1e9 / syn_per_second ns and tolerance tau = T × (burst − 1) ns, penalty, the ban rate a
//! banned source's SYNs are measured against (the SYN limit's, else the listener's `rateLimit`),
//! the SYN budget's GCRA (T = 1e9 / budget, tau = T × (budget − 1)), and a list bit
//! 0..64 when the port has an allowlist or blocklist); per unprotected listener port: a policy
//! with flags 0 (only dynamic blocks apply there); when any port is present, a set header at
//! port 0 (`ipv6_prefix_len`, `SET_DROP_FRAGMENTS`). The allow and block tries hold each CIDR once, valued with the
//! bitmask of the ports listing it (see [`super::lpm`]); any bit set means "listed somewhere",
//! which is what a packet whose port cannot be read is judged by.
//!
//! Building is O(n log n) in CIDRs; the result is compared with what the idle set already
//! holds (a sorted merge) so only differences are written.

use std::collections::{BTreeMap, BTreeSet};

use ipnet::IpNet;

use super::abi::{
    self, RampartCidrKey, RampartPortPolicy, PORT_BAN_RATE, PORT_HAS_ALLOW, PORT_HAS_BLOCK,
    PORT_PROTECTED, PORT_SET_HEADER, PORT_SYN_BUDGET, PORT_SYN_LIMIT, SET_DROP_FRAGMENTS,
};
use super::error::XdpError;
use super::lpm;
use crate::gcra::Gcra;

/// The largest per-second SYN rate or budget a port's policy takes (1e9/s: one per ns).
const MAX_PER_SECOND: u32 = 1_000_000_000;

/// Kernel protection for one listener port (from its `ProtectionConfig`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XdpPortPolicy {
    /// Listener port (1..=65535).
    pub port: u16,
    /// Per-source SYN limit in SYN/s (`xdp.synPerSecond`); `None` = no kernel SYN limit.
    pub syn_per_second: Option<u32>,
    /// SYN burst (`xdp.synBurst`, defaults to the rate); ≥ 1 when a limit is set.
    pub syn_burst: u32,
    /// Ban duration in ns after SYN excess, and the extension of a ban by continued excess
    /// (`penaltyBox.durationMs`, 10 min without one); > 0 when a limit or a ban rate is set.
    pub penalty_ns: u64,
    /// The rate a banned source's SYNs are measured against when `syn_per_second` is `None`:
    /// the listener's `rateLimit` (its GCRA). `None` and no SYN limit: bans are never extended.
    pub ban_rate: Option<Gcra>,
    /// `xdp.synBudgetPerSecond`: SYNs per second from sources that are not known-good on this
    /// port (burst: one second's worth); `None` = no budget.
    pub syn_budget_per_second: Option<u32>,
    /// Allowlist CIDRs: skip every kernel check.
    pub allow: Vec<IpNet>,
    /// Blocklist CIDRs: SYNs dropped (`cidr`).
    pub block: Vec<IpNet>,
    /// IPv6 sources share bans and SYN state on this port by this prefix (its listener's
    /// `ipv6PrefixLength`, 0..=128).
    pub ipv6_prefix_len: u8,
}

/// Everything one policy swap carries to the kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XdpPolicy {
    /// Protected ports.
    pub ports: Vec<XdpPortPolicy>,
    /// Listener ports without protection: only dynamic blocks apply there (`blockIp` without
    /// a port covers every listener). Must not repeat a protected port.
    pub listener_ports: Vec<u16>,
    /// The prefix IPv6 sources are judged by where the port cannot be read (the set header, for
    /// fragments and unparsed packets) and on unprotected listener ports (0..=128; default 64).
    pub ipv6_prefix_len: u8,
    /// `xdp.dropFragments`: every IP fragment is dropped, on every port.
    pub drop_fragments: bool,
}

impl XdpPolicy {
    /// Protected ports only, IPv6 prefix 64.
    pub fn from_ports(ports: &[XdpPortPolicy]) -> Self {
        Self {
            ports: ports.to_vec(),
            listener_ports: Vec::new(),
            ipv6_prefix_len: 64,
            drop_fragments: false,
        }
    }
}

impl Default for XdpPolicy {
    fn default() -> Self {
        Self::from_ports(&[])
    }
}

/// The exact contents of one policy set.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct SetContents {
    /// Port map (port 0 = set header).
    pub ports: BTreeMap<u16, RampartPortPolicy>,
    /// Allow trie, sorted by key: CIDR → port bits (0 = family marker).
    pub allow: Vec<(RampartCidrKey, u64)>,
    /// Block trie, sorted by key: CIDR → port bits (0 = family marker).
    pub block: Vec<(RampartCidrKey, u64)>,
}

// Kept whole (over 120 lines): the checks and the set are built in one pass over the ports,
// in the order the kernel's set lays them out (header, listener ports, per-port rules, CIDR
// lists); split, each part would re-walk the ports and carry the partial set.
/// Validates `policy` and builds its set. Errors name the port and field.
pub(crate) fn build(policy: &XdpPolicy) -> Result<SetContents, XdpError> {
    let invalid = |problem: String| {
        Err(XdpError::InvalidPolicy {
            port: None,
            problem,
        })
    };
    if policy.ipv6_prefix_len > 128 {
        return invalid(format!(
            "ipv6_prefix_len: must be 0..=128, got {}",
            policy.ipv6_prefix_len
        ));
    }
    let mut seen = BTreeSet::new();
    for port in policy
        .ports
        .iter()
        .map(|p| p.port)
        .chain(policy.listener_ports.iter().copied())
    {
        if port == 0 {
            return invalid("port 0 cannot be a listener port".to_string());
        }
        if !seen.insert(port) {
            return invalid(format!("port {port} is listed twice"));
        }
    }
    if seen.len() >= abi::MAX_PORTS as usize {
        return invalid(format!(
            "{} ports: the kernel map holds at most {}",
            seen.len(),
            abi::MAX_PORTS - 1
        ));
    }

    let mut set = SetContents::default();
    if seen.is_empty() {
        return Ok(set);
    }
    let prefix = u32::from(policy.ipv6_prefix_len);
    set.ports.insert(
        0,
        RampartPortPolicy {
            flags: PORT_SET_HEADER
                | if policy.drop_fragments {
                    SET_DROP_FRAGMENTS
                } else {
                    0
                },
            ipv6_prefix_len: prefix,
            ..Default::default()
        },
    );
    for &port in &policy.listener_ports {
        set.ports.insert(
            port,
            RampartPortPolicy {
                ipv6_prefix_len: prefix,
                ..Default::default()
            },
        );
    }
    let mut allow = Vec::new();
    let mut block = Vec::new();
    let mut next_bit = 0u32;
    for p in &policy.ports {
        if p.ipv6_prefix_len > 128 {
            return invalid(format!(
                "port {}: ipv6_prefix_len must be 0..=128, got {}",
                p.port, p.ipv6_prefix_len
            ));
        }
        let mut entry = RampartPortPolicy {
            flags: PORT_PROTECTED,
            ipv6_prefix_len: u32::from(p.ipv6_prefix_len),
            ..Default::default()
        };
        if let Some(rate) = p.syn_per_second {
            if rate == 0 || rate > MAX_PER_SECOND {
                return invalid(format!(
                    "port {}: syn_per_second must be 1..=1e9, got {rate}",
                    p.port
                ));
            }
            if p.syn_burst == 0 {
                return invalid(format!("port {}: syn_burst must be >= 1, got 0", p.port));
            }
            if p.penalty_ns == 0 {
                return invalid(format!("port {}: penalty_ns must be > 0, got 0", p.port));
            }
            let interval = crate::clock::NS_PER_SEC / u64::from(rate);
            entry.flags |= PORT_SYN_LIMIT;
            entry.syn_per_second = rate;
            entry.syn_burst = p.syn_burst;
            entry.syn_interval_ns = interval;
            entry.syn_tolerance_ns = interval.saturating_mul(u64::from(p.syn_burst - 1));
            entry.penalty_ns = p.penalty_ns;
            entry.flags |= PORT_BAN_RATE;
            entry.ban_interval_ns = entry.syn_interval_ns;
            entry.ban_tolerance_ns = entry.syn_tolerance_ns;
        } else if let Some(g) = p.ban_rate {
            if p.penalty_ns == 0 {
                return invalid(format!("port {}: penalty_ns must be > 0, got 0", p.port));
            }
            entry.flags |= PORT_BAN_RATE;
            entry.ban_interval_ns = g.interval_ns();
            entry.ban_tolerance_ns = g.tolerance_ns();
            entry.penalty_ns = p.penalty_ns;
        }
        if let Some(budget) = p.syn_budget_per_second {
            if budget == 0 || budget > MAX_PER_SECOND {
                return invalid(format!(
                    "port {}: syn_budget_per_second must be 1..=1e9, got {budget}",
                    p.port
                ));
            }
            let interval = crate::clock::NS_PER_SEC / u64::from(budget);
            entry.flags |= PORT_SYN_BUDGET;
            entry.syn_budget_per_second = budget;
            entry.budget_interval_ns = interval;
            entry.budget_tolerance_ns = interval.saturating_mul(u64::from(budget - 1));
        }
        if !p.allow.is_empty() || !p.block.is_empty() {
            if next_bit as usize == abi::MAX_LIST_PORTS {
                return invalid(format!(
                    "port {}: at most {} protected ports may carry allowlists or blocklists",
                    p.port,
                    abi::MAX_LIST_PORTS
                ));
            }
            entry.list_bit = next_bit;
            let bit = 1u64 << next_bit;
            next_bit += 1;
            if !p.allow.is_empty() {
                entry.flags |= PORT_HAS_ALLOW;
                allow.extend(p.allow.iter().map(|&n| (n, bit)));
            }
            if !p.block.is_empty() {
                entry.flags |= PORT_HAS_BLOCK;
                block.extend(p.block.iter().map(|&n| (n, bit)));
            }
        }
        set.ports.insert(p.port, entry);
    }
    set.allow = lpm::list_entries(&allow);
    set.block = lpm::list_entries(&block);
    for (name, len) in [("allow", set.allow.len()), ("block", set.block.len())] {
        if len > abi::MAX_CIDRS as usize {
            return invalid(format!(
                "{len} distinct {name}list CIDRs over all ports: at most {}",
                abi::MAX_CIDRS
            ));
        }
    }
    Ok(set)
}

/// What to write to turn `from` into `to`: removals, then insertions/updates.
pub(crate) struct Diff<K, V> {
    /// Keys present in `from` but not in `to`.
    pub remove: Vec<K>,
    /// Keys new in `to`, or whose value changed.
    pub upsert: Vec<(K, V)>,
}

/// Computes the writes that turn map contents `from` into `to`.
pub(crate) fn diff<K: Ord + Copy, V: PartialEq + Copy>(
    from: &BTreeMap<K, V>,
    to: &BTreeMap<K, V>,
) -> Diff<K, V> {
    Diff {
        remove: from
            .keys()
            .filter(|k| !to.contains_key(k))
            .copied()
            .collect(),
        upsert: to
            .iter()
            .filter(|(k, v)| from.get(k) != Some(v))
            .map(|(k, v)| (*k, *v))
            .collect(),
    }
}

/// [`diff`] for key-sorted vectors (a linear merge).
pub(crate) fn diff_sorted<K: Ord + Copy, V: PartialEq + Copy>(
    from: &[(K, V)],
    to: &[(K, V)],
) -> Diff<K, V> {
    let mut d = Diff {
        remove: Vec::new(),
        upsert: Vec::new(),
    };
    let (mut i, mut j) = (0, 0);
    while i < from.len() || j < to.len() {
        match (from.get(i), to.get(j)) {
            (Some(a), Some(b)) if a.0 == b.0 => {
                if a.1 != b.1 {
                    d.upsert.push(*b);
                }
                i += 1;
                j += 1;
            }
            (Some(a), Some(b)) if a.0 < b.0 => {
                d.remove.push(a.0);
                i += 1;
            }
            (Some(a), None) => {
                d.remove.push(a.0);
                i += 1;
            }
            (_, Some(b)) => {
                d.upsert.push(*b);
                j += 1;
            }
            (None, None) => break,
        }
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(p: u16) -> XdpPortPolicy {
        XdpPortPolicy {
            port: p,
            syn_per_second: Some(4),
            syn_burst: 3,
            penalty_ns: 600_000_000_000,
            allow: vec!["192.0.2.1/32".parse().unwrap()],
            block: vec!["192.0.2.0/24".parse().unwrap()],
            ipv6_prefix_len: 64,
            ban_rate: None,
            syn_budget_per_second: None,
        }
    }

    #[test]
    fn a_port_becomes_gcra_parameters_and_scoped_keys() {
        let set = build(&XdpPolicy::from_ports(&[port(443)])).unwrap();
        let pol = set.ports[&443];
        assert_eq!(
            pol.flags,
            PORT_PROTECTED | PORT_SYN_LIMIT | PORT_BAN_RATE | PORT_HAS_ALLOW | PORT_HAS_BLOCK
        );
        assert_eq!(pol.syn_interval_ns, 250_000_000);
        assert_eq!(pol.syn_tolerance_ns, 500_000_000);
        assert_eq!(
            (pol.ban_interval_ns, pol.ban_tolerance_ns),
            (250_000_000, 500_000_000)
        );
        assert_eq!(pol.ipv6_prefix_len, 64);
        assert_eq!(set.ports[&0].flags, PORT_SET_HEADER);
        // One key per CIDR; the /32 inherits the /24's bit.
        assert_eq!(
            set.allow,
            vec![(lpm::cidr_key("192.0.2.1/32".parse().unwrap()), 1)]
        );
        assert_eq!(
            set.block,
            vec![(lpm::cidr_key("192.0.2.0/24".parse().unwrap()), 1)]
        );
    }

    #[test]
    fn without_a_syn_limit_the_rate_limit_measures_bans_and_a_budget_is_a_gcra() {
        let mut p = port(443);
        p.syn_per_second = None;
        p.ban_rate = Some(Gcra::new(500_000_000, 3));
        p.syn_budget_per_second = Some(200);
        let mut policy = XdpPolicy::from_ports(&[p]);
        policy.drop_fragments = true;
        let set = build(&policy).unwrap();
        let pol = set.ports[&443];
        assert_eq!(pol.flags & PORT_SYN_LIMIT, 0);
        assert_eq!(
            pol.flags & (PORT_BAN_RATE | PORT_SYN_BUDGET),
            PORT_BAN_RATE | PORT_SYN_BUDGET
        );
        assert_eq!(
            (pol.ban_interval_ns, pol.ban_tolerance_ns, pol.penalty_ns),
            (500_000_000, 1_000_000_000, 600_000_000_000)
        );
        assert_eq!(
            (
                pol.budget_interval_ns,
                pol.budget_tolerance_ns,
                pol.syn_budget_per_second
            ),
            (5_000_000, 995_000_000, 200)
        );
        assert_eq!(set.ports[&0].flags, PORT_SET_HEADER | SET_DROP_FRAGMENTS);
        let mut bad = port(443);
        bad.syn_budget_per_second = Some(0);
        let err = build(&XdpPolicy::from_ports(&[bad]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("port 443: syn_budget_per_second"), "{err}");
    }

    #[test]
    fn ports_get_their_own_list_bits() {
        let mut plain = port(80);
        plain.allow.clear();
        plain.block.clear();
        let set = build(&XdpPolicy::from_ports(&[port(443), plain, port(8443)])).unwrap();
        assert_eq!(set.ports[&443].list_bit, 0);
        assert_eq!(set.ports[&8443].list_bit, 1);
        assert_eq!(set.ports[&80].flags & (PORT_HAS_ALLOW | PORT_HAS_BLOCK), 0);
        assert_eq!(
            set.block,
            vec![(lpm::cidr_key("192.0.2.0/24".parse().unwrap()), 0b11)]
        );
        let many: Vec<XdpPortPolicy> = (1..=65).map(port).collect();
        let err = build(&XdpPolicy::from_ports(&many))
            .unwrap_err()
            .to_string();
        assert!(err.contains("port 65: at most 64"), "{err}");
    }

    #[test]
    fn empty_policy_is_an_empty_set() {
        assert_eq!(
            build(&XdpPolicy::default()).unwrap(),
            SetContents::default()
        );
    }

    #[test]
    fn invalid_policies_name_the_port() {
        let mut p = port(443);
        p.syn_burst = 0;
        let err = build(&XdpPolicy::from_ports(&[p])).unwrap_err().to_string();
        assert!(err.contains("port 443: syn_burst must be >= 1"), "{err}");
        let err = build(&XdpPolicy::from_ports(&[port(443), port(443)]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("port 443 is listed twice"), "{err}");
        let mut p = port(8443);
        p.syn_per_second = Some(0);
        let err = build(&XdpPolicy::from_ports(&[p])).unwrap_err().to_string();
        assert!(err.contains("port 8443: syn_per_second"), "{err}");
    }

    #[test]
    fn diff_writes_only_changes() {
        let a: BTreeMap<u16, u32> = [(1, 1), (2, 2), (3, 3)].into();
        let b: BTreeMap<u16, u32> = [(2, 2), (3, 4), (5, 5)].into();
        let d = diff(&a, &b);
        assert_eq!(d.remove, vec![1]);
        assert_eq!(d.upsert, vec![(3, 4), (5, 5)]);
        let a: Vec<(u16, u32)> = a.into_iter().collect();
        let b: Vec<(u16, u32)> = b.into_iter().collect();
        let d = diff_sorted(&a, &b);
        assert_eq!(d.remove, vec![1]);
        assert_eq!(d.upsert, vec![(3, 4), (5, 5)]);
        let d = diff_sorted(&b, &a);
        assert_eq!(d.remove, vec![5]);
        assert_eq!(d.upsert, vec![(1, 1), (3, 3)]);
    }
}
