//! The kernel/user layout: `#[repr(C)]` twins of every struct in `ebpf/rampart.h`, the map
//! names, and the constants (ABI version, flags, counter slots, map sizes).
//!
//! Each twin carries `const _: () = assert!(...)` on its size and field offsets, matching the
//! `_Static_assert`s in the header, so a drift on either side fails the build rather than
//! misreading a map in production. `ABI_VERSION` names the pin directory
//! (`<pin root>/v<ABI>/<ifname>/`) and is stored in the `rampart_meta` map; bump it together
//! with `RAMPART_ABI_VERSION` whenever a struct or map definition changes.
//!
//! Addresses are 16 bytes for both families, IPv4 stored IPv4-mapped (`::ffff:a.b.c.d`).

use std::mem::{offset_of, size_of};
use std::net::{IpAddr, Ipv6Addr};

/// `RAMPART_ABI_VERSION`: layout version shared with the C program.
pub const ABI_VERSION: u32 = 3;

/// `RAMPART_MAX_VLAN`: VLAN tags (802.1Q / 802.1ad) walked before the L3 header.
pub const MAX_VLAN: usize = 3;
/// `RAMPART_MAX_IPV6_EXT`: IPv6 extension headers walked before a packet counts as unparsed.
pub const MAX_IPV6_EXT: usize = 8;

/// `RAMPART_MAX_PORTS`: port-policy entries per set, the set header at port 0 included.
pub const MAX_PORTS: u32 = 1024;
/// `RAMPART_MAX_CIDRS`: entries per allow or block trie per set (union entries included).
pub const MAX_CIDRS: u32 = 1 << 20;
/// `RAMPART_MAX_LIST_PORTS`: protected ports per set that may carry allow/block lists (one
/// bit each in the trie values).
pub const MAX_LIST_PORTS: usize = 64;
/// `RAMPART_MAX_DYNAMIC`: entries of the dynamic-block trie.
pub const MAX_DYNAMIC: u32 = 1 << 18;
/// `RAMPART_MAX_BANS`: the object's ban LRU hash size (least recently used bans are evicted
/// beyond it), used by unattached loads; `attachXdp` sizes the map from the config
/// ([`super::manager::MapSizes`]).
pub const MAX_BANS: u32 = 1 << 17;
/// `RAMPART_MAX_SYN_STATES`: the object's per-(source, port) SYN GCRA state size (LRU).
pub const MAX_SYN_STATES: u32 = 1 << 17;
/// `RAMPART_MAX_KNOWN_GOOD`: the object's known-good LRU size.
pub const MAX_KNOWN_GOOD: u32 = 1 << 17;
/// `RAMPART_MAX_PREFIX_BANS`: the object's prefix-ban trie size.
pub const MAX_PREFIX_BANS: u32 = 1 << 17;
/// `RAMPART_BUDGET_SLOTS`: SYN-budget TATs, one per destination port.
pub const BUDGET_SLOTS: u32 = 65_536;

/// `RAMPART_PORT_PROTECTED`: lists, bans and the SYN limit apply on this port.
pub const PORT_PROTECTED: u32 = 1 << 0;
/// `RAMPART_PORT_HAS_ALLOW`: the allow trie holds entries for this port.
pub const PORT_HAS_ALLOW: u32 = 1 << 1;
/// `RAMPART_PORT_HAS_BLOCK`: the block trie holds entries for this port.
pub const PORT_HAS_BLOCK: u32 = 1 << 2;
/// `RAMPART_PORT_SYN_LIMIT`: the per-source SYN GCRA applies.
pub const PORT_SYN_LIMIT: u32 = 1 << 3;
/// `RAMPART_PORT_BAN_RATE`: a banned source's SYNs are measured (`ban_*`), excess extends.
pub const PORT_BAN_RATE: u32 = 1 << 4;
/// `RAMPART_PORT_SYN_BUDGET`: SYNs of sources that are not known-good are budgeted (`budget_*`).
pub const PORT_SYN_BUDGET: u32 = 1 << 5;
/// `RAMPART_SET_DROP_FRAGMENTS`: set header only: every IP fragment is dropped.
pub const SET_DROP_FRAGMENTS: u32 = 1 << 6;
/// `RAMPART_PORT_SET_HEADER`: the port-0 entry holding set-wide settings.
pub const PORT_SET_HEADER: u32 = 1 << 31;

/// `RAMPART_BAN_DYNAMIC`: fixed deadline, never extended by the kernel.
pub const BAN_DYNAMIC: u32 = 1;
/// `RAMPART_BAN_PENALTY`: userspace penalty box; extended by continued SYN excess.
pub const BAN_PENALTY: u32 = 2;
/// `RAMPART_BAN_SYNFLOOD`: set by the kernel SYN limit; extended by continued SYN excess.
pub const BAN_SYNFLOOD: u32 = 3;

/// Counter slots of `rampart_stats` (per-CPU `u64`).
pub mod counter {
    /// Packets passed (every XDP_PASS, whatever the port).
    pub const PASSED: u32 = 0;
    /// SYNs dropped by a configured blocklist CIDR.
    pub const DROP_CIDR: u32 = 1;
    /// SYNs dropped by a dynamic block (trie, or a ban with reason dynamic).
    pub const DROP_DYNAMIC: u32 = 2;
    /// SYNs dropped by a penalty ban.
    pub const DROP_PENALTY: u32 = 3;
    /// SYNs dropped by the kernel SYN limit or its ban.
    pub const DROP_SYNFLOOD: u32 = 4;
    /// Packets with an unreadable port from a blocked or banned source.
    pub const DROP_UNPARSED: u32 = 5;
    /// Ban deadlines moved forward by SYN excess while banned.
    pub const BAN_EXTENDED: u32 = 6;
    /// Sources banned by the kernel SYN limit.
    pub const BANNED: u32 = 7;
    /// SYNs of sources that are not known-good beyond the port's SYN budget.
    pub const DROP_SYN_BUDGET: u32 = 8;
    /// UDP / UDP-Lite / SCTP / DCCP packets to a protected port.
    pub const DROP_NON_TCP: u32 = 9;
    /// IP fragments (`xdp.dropFragments`).
    pub const DROP_FRAGMENT: u32 = 10;
    /// Number of slots.
    pub const MAX: u32 = 11;
}

/// Map names in the object (also the pin file names).
pub(crate) mod map_name {
    /// `ARRAY[1] → RampartMeta`.
    pub(crate) const META: &str = "rampart_meta";
    /// `ARRAY[1] → u32`: the live policy set (0 or 1).
    pub(crate) const ACTIVE: &str = "rampart_active";
    /// `HASH u16 port → RampartPortPolicy`, per set.
    pub(crate) const PORTS: [&str; 2] = ["rampart_ports0", "rampart_ports1"];
    /// `LPM_TRIE RampartCidrKey → u64` port bitmask, per set.
    pub(crate) const ALLOW: [&str; 2] = ["rampart_allow0", "rampart_allow1"];
    /// `LPM_TRIE RampartCidrKey → u64` port bitmask, per set.
    pub(crate) const BLOCK: [&str; 2] = ["rampart_block0", "rampart_block1"];
    /// `LPM_TRIE RampartLpmKey → RampartDynValue`.
    pub(crate) const DYNAMIC: &str = "rampart_dyn";
    /// `LRU_HASH RampartIp → RampartBan`.
    pub(crate) const BANS: &str = "rampart_bans";
    /// `LRU_HASH RampartSynKey → RampartSynState`.
    pub(crate) const SYN: &str = "rampart_syn";
    /// `LPM_TRIE RampartCidrKey → RampartBan`: boxed prefixes.
    pub(crate) const PREFIX_BANS: &str = "rampart_prefix_bans";
    /// `LRU_HASH RampartSynKey → u64` known-good deadline (ns).
    pub(crate) const KNOWN_GOOD: &str = "rampart_known_good";
    /// `ARRAY[65536] → u64`: SYN-budget TAT per port.
    pub(crate) const BUDGET: &str = "rampart_budget";
    /// `PERCPU_ARRAY[counter::MAX] → u64`.
    pub(crate) const STATS: &str = "rampart_stats";
}

/// The program's section name in the object.
pub const PROGRAM_NAME: &str = "rampart_xdp";

/// `struct rampart_meta`: written by the loader, checked against pinned copies.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RampartMeta {
    /// [`ABI_VERSION`] of the build that created the maps.
    pub abi_version: u32,
    /// [`LAYOUT`] of that build.
    pub layout: u32,
}
const _: () = assert!(size_of::<RampartMeta>() == 8);
const _: () = assert!(offset_of!(RampartMeta, layout) == 4);

/// `struct rampart_port_policy`: value of the per-set port maps (key: port, host order).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RampartPortPolicy {
    /// `PORT_*` flags.
    pub flags: u32,
    /// Configured SYN rate (SYN/s); 0 = no limit. Informational.
    pub syn_per_second: u32,
    /// Configured SYN burst. Informational.
    pub syn_burst: u32,
    /// IPv6 sources share bans and SYN state by this prefix length (0..=128).
    pub ipv6_prefix_len: u32,
    /// GCRA emission interval T = 1e9 / syn_per_second (ns).
    pub syn_interval_ns: u64,
    /// GCRA tolerance tau = T × (burst − 1) (ns).
    pub syn_tolerance_ns: u64,
    /// Ban duration after SYN excess, and its extension while banned (ns).
    pub penalty_ns: u64,
    /// This port's bit (0..64) in allow/block trie values.
    pub list_bit: u32,
    /// Configured SYN budget (SYN/s, `xdp.synBudgetPerSecond`); 0 = none. Informational.
    pub syn_budget_per_second: u32,
    /// GCRA T of a banned source's SYNs (ns): `synPerSecond`'s, else `rateLimit`'s.
    pub ban_interval_ns: u64,
    /// Its tau (ns).
    pub ban_tolerance_ns: u64,
    /// GCRA T of the port's SYN budget = 1e9 / synBudgetPerSecond (ns).
    pub budget_interval_ns: u64,
    /// Its tau = T × (budget − 1) (ns): one second of budget at once.
    pub budget_tolerance_ns: u64,
}
const _: () = assert!(size_of::<RampartPortPolicy>() == 80);
const _: () = assert!(offset_of!(RampartPortPolicy, ban_interval_ns) == 48);
const _: () = assert!(offset_of!(RampartPortPolicy, budget_tolerance_ns) == 72);
const _: () = assert!(offset_of!(RampartPortPolicy, list_bit) == 40);
const _: () = assert!(offset_of!(RampartPortPolicy, ipv6_prefix_len) == 12);
const _: () = assert!(offset_of!(RampartPortPolicy, syn_interval_ns) == 16);
const _: () = assert!(offset_of!(RampartPortPolicy, syn_tolerance_ns) == 24);
const _: () = assert!(offset_of!(RampartPortPolicy, penalty_ns) == 32);

/// `struct rampart_cidr_key`: key of the allow/block tries, `prefixlen` (96 + N for IPv4 /N,
/// N for IPv6 /N) then the 16-byte address. aya's `lpm_trie::Key<[u8; 16]>` has this layout.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RampartCidrKey {
    /// Prefix length in bits of `addr`.
    pub prefixlen: u32,
    /// Network address, network order, IPv4-mapped for IPv4, host bits zero.
    pub addr: [u8; 16],
}
const _: () = assert!(size_of::<RampartCidrKey>() == 20);
const _: () = assert!(offset_of!(RampartCidrKey, addr) == 4);
const _: () = assert!(size_of::<aya::maps::lpm_trie::Key<[u8; 16]>>() == 20);

/// The data part of `struct rampart_lpm_key` (after `prefixlen`), as aya's
/// `lpm_trie::Key<RampartLpmData>` wants it: `Key` is `repr(C, packed)` { u32, data }.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RampartLpmData {
    /// Listener port (host order), or 0 (union / every port, see the header).
    pub scope: u16,
    /// Address, network order, IPv4-mapped for IPv4, host bits zero.
    pub addr: [u8; 16],
    /// Never compared.
    pub pad: u16,
}
const _: () = assert!(size_of::<RampartLpmData>() == 20);
const _: () = assert!(offset_of!(RampartLpmData, addr) == 2);

/// `struct rampart_lpm_key` in full (used for the layout assertion and the LAYOUT number).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct RampartLpmKey {
    /// Bits of `scope` + `addr` that must match: 16 + address prefix (IPv4 /N = 16 + 96 + N).
    pub prefixlen: u32,
    /// See [`RampartLpmData`].
    pub data: RampartLpmData,
}
const _: () = assert!(size_of::<RampartLpmKey>() == 24);
const _: () = assert!(offset_of!(RampartLpmKey, data) + offset_of!(RampartLpmData, addr) == 6);

/// `struct rampart_dyn_value`: effective deadlines of a dynamic-trie entry (CLOCK_MONOTONIC ns;
/// `u64::MAX` = no expiry, 0 = none).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RampartDynValue {
    /// Blocks the prefix on the entry's scope (a port, or every listener port for scope 0).
    pub all_deadline_ns: u64,
    /// Scope 0 only: blocked on some port; applies when the port cannot be read.
    pub any_deadline_ns: u64,
}
const _: () = assert!(size_of::<RampartDynValue>() == 16);
const _: () = assert!(offset_of!(RampartDynValue, any_deadline_ns) == 8);

/// `struct rampart_ip`: ban key, a source address (IPv6 masked to the set's prefix length).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RampartIp {
    /// Network order, IPv4-mapped for IPv4.
    pub addr: [u8; 16],
}
const _: () = assert!(size_of::<RampartIp>() == 16);

/// `struct rampart_ban`: value of the ban LRU hash.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RampartBan {
    /// CLOCK_MONOTONIC ns; live while now < deadline.
    pub deadline_ns: u64,
    /// GCRA TAT (ns) of the banned source's SYNs, measured against the port's ban rate.
    pub tat_ns: u64,
    /// `BAN_*`.
    pub reason: u32,
    /// Listener port the ban was made for.
    pub port: u16,
    /// Bits of the source the key holds: 32 for IPv4, the port's IPv6 prefix length for IPv6.
    pub prefix_len: u16,
}
const _: () = assert!(size_of::<RampartBan>() == 24);
const _: () = assert!(offset_of!(RampartBan, reason) == 16);
const _: () = assert!(offset_of!(RampartBan, port) == 20);
const _: () = assert!(offset_of!(RampartBan, prefix_len) == 22);

/// `struct rampart_syn_key`: one SYN GCRA state per (source, listener port); also the key of
/// the known-good map.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RampartSynKey {
    /// Source, as in [`RampartIp`].
    pub addr: [u8; 16],
    /// Listener port, host order.
    pub port: u16,
    /// Zero.
    pub pad: u16,
}
const _: () = assert!(size_of::<RampartSynKey>() == 20);
const _: () = assert!(offset_of!(RampartSynKey, port) == 16);

/// `struct rampart_syn_state`: GCRA theoretical arrival time (CLOCK_MONOTONIC ns).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RampartSynState {
    /// TAT in ns.
    pub tat_ns: u64,
}
const _: () = assert!(size_of::<RampartSynState>() == 8);

/// `RAMPART_LAYOUT`: the struct sizes folded into one number, stored in `rampart_meta`.
pub const LAYOUT: u32 = ((size_of::<RampartPortPolicy>() as u32) << 24)
    | ((size_of::<RampartLpmKey>() as u32) << 16)
    | ((size_of::<RampartCidrKey>() as u32) << 8)
    | size_of::<RampartSynKey>() as u32;

// SAFETY: each type is `repr(C)`, made only of integers and byte arrays, with no padding
// bytes left implicit (checked by the size assertions above), so any bit pattern is valid.
unsafe impl aya::Pod for RampartMeta {}
// SAFETY: as above.
unsafe impl aya::Pod for RampartPortPolicy {}
// SAFETY: as above.
unsafe impl aya::Pod for RampartLpmData {}
// SAFETY: as above.
unsafe impl aya::Pod for RampartCidrKey {}
// SAFETY: as above.
unsafe impl aya::Pod for RampartDynValue {}
// SAFETY: as above.
unsafe impl aya::Pod for RampartIp {}
// SAFETY: as above.
unsafe impl aya::Pod for RampartBan {}
// SAFETY: as above.
unsafe impl aya::Pod for RampartSynKey {}
// SAFETY: as above.
unsafe impl aya::Pod for RampartSynState {}

/// The 16-byte form of an address: IPv4 (and IPv4-mapped IPv6) as `::ffff:a.b.c.d`.
pub fn addr16(ip: IpAddr) -> [u8; 16] {
    match ip.to_canonical() {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// The address back from its 16-byte form (IPv4-mapped → IPv4).
pub fn ip_from16(addr: [u8; 16]) -> IpAddr {
    IpAddr::V6(Ipv6Addr::from(addr)).to_canonical()
}

/// Zero every bit of `addr` beyond `bits`.
pub fn mask16(mut addr: [u8; 16], bits: u32) -> [u8; 16] {
    for (i, byte) in addr.iter_mut().enumerate() {
        let keep = bits.saturating_sub(i as u32 * 8);
        *byte &= match keep {
            0 => 0,
            1..=7 => 0xffu8 << (8 - keep),
            _ => 0xff,
        };
    }
    addr
}

/// Ban / SYN-state identity of a source, as the kernel computes it: IPv4 as is (mapped),
/// IPv6 masked to `ipv6_prefix_len` bits.
pub fn source_id(ip: IpAddr, ipv6_prefix_len: u8) -> RampartIp {
    match ip.to_canonical() {
        IpAddr::V4(_) => RampartIp { addr: addr16(ip) },
        IpAddr::V6(v6) => RampartIp {
            addr: mask16(v6.octets(), u32::from(ipv6_prefix_len.min(128))),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_number_matches_the_header_formula() {
        assert_eq!(LAYOUT, (80 << 24) | (24 << 16) | (20 << 8) | 20);
    }

    #[test]
    fn addresses_use_one_16_byte_form() {
        let v4: IpAddr = "192.0.2.7".parse().unwrap();
        let mapped: IpAddr = "::ffff:192.0.2.7".parse().unwrap();
        assert_eq!(addr16(v4), addr16(mapped));
        assert_eq!(ip_from16(addr16(v4)), v4);
        assert_eq!(
            addr16(v4),
            [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 7]
        );
    }

    #[test]
    fn ipv6_sources_are_masked_ipv4_never() {
        let v6: IpAddr = "2001:db8:1:2:3:4:5:6".parse().unwrap();
        assert_eq!(
            ip_from16(source_id(v6, 64).addr),
            "2001:db8:1:2::".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            ip_from16(source_id(v6, 60).addr),
            "2001:db8:1::".parse::<IpAddr>().unwrap()
        );
        assert_eq!(ip_from16(source_id(v6, 128).addr), v6);
        let v4: IpAddr = "198.51.100.9".parse().unwrap();
        assert_eq!(ip_from16(source_id(v4, 64).addr), v4);
    }
}
