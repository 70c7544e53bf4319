//! Per-IP keys: what "one client" means to the engine.
//!
//! An IPv4 source is its address. An IPv6 source is its prefix of `ipv6PrefixLength` bits (default
//! /64: one /64 is one client, since a host can pick any address inside it). An IPv4-mapped IPv6
//! address (`::ffff:a.b.c.d`, what a dual-stack socket reports for an IPv4 peer) is the IPv4
//! address `a.b.c.d` for every check and every report.
//!
//! A key is 17 bytes of information (128 bits + a prefix length); IPv4 keys are stored in their
//! mapped form (`::ffff:a.b.c.d`, length 32), which no masked IPv6 prefix can equal (a masked IPv6
//! prefix of length < 96 has zeros where the mapped form has `ffff`, and an address inside
//! `::ffff:0:0/96` is always converted to IPv4 first).

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Default `ipv6PrefixLength`.
pub(crate) const DEFAULT_IPV6_PREFIX: u8 = 64;

const MAPPED: u128 = 0xffff_u128 << 32;

/// Network mask of `len` leading one bits over 128 bits (`len` ≤ 128).
pub(crate) fn mask128(len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(len))
    }
}

/// The identity of one client in the per-IP table: an IPv4 address or an IPv6 prefix.
///
/// Displayed as a bare IPv4 address (`192.0.2.7`) or as an IPv6 prefix with its length
/// (`2001:db8:1:2::/64`), the form `blockedIps()` reports.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IpKey {
    bits: u128,
    len: u8,
}

impl IpKey {
    /// The key of a client address: IPv4 (or IPv4-mapped IPv6) → the address; IPv6 → its prefix
    /// of `v6_prefix_len` bits (1..=128; larger values are clamped to 128).
    pub fn new(ip: IpAddr, v6_prefix_len: u8) -> IpKey {
        match ip.to_canonical() {
            IpAddr::V4(v4) => IpKey::v4(v4),
            IpAddr::V6(v6) => {
                let len = v6_prefix_len.min(128);
                IpKey {
                    bits: u128::from(v6) & mask128(len),
                    len,
                }
            }
        }
    }

    /// The network prefix of a client address for the prefix tier: IPv4 (or IPv4-mapped) → its
    /// first `v4_len` bits (1..=32), IPv6 → its first `v6_len` bits (1..=128). An IPv4 prefix is
    /// kept in the mapped form with its IPv4 length, so no IPv6 prefix can equal it.
    pub fn prefix(ip: IpAddr, v4_len: u8, v6_len: u8) -> IpKey {
        match ip.to_canonical() {
            IpAddr::V4(v4) => {
                let len = v4_len.clamp(1, 32);
                let mask = u32::MAX << (32 - u32::from(len));
                IpKey {
                    bits: MAPPED | u128::from(u32::from(v4) & mask),
                    len,
                }
            }
            v6 => IpKey::new(v6, v6_len),
        }
    }

    /// The key of an IPv4 address.
    pub fn v4(ip: Ipv4Addr) -> IpKey {
        IpKey {
            bits: MAPPED | u128::from(u32::from(ip)),
            len: 32,
        }
    }

    /// True for an IPv4 key (an address, or an IPv4 prefix of the prefix tier). A masked IPv6
    /// prefix of at most 32 bits is zero in bits 32..48, so it never has the mapped marker.
    pub fn is_ipv4(&self) -> bool {
        self.len <= 32 && (self.bits >> 32) == 0xffff
    }

    /// Prefix length: 32 for an IPv4 client, `ipv6PrefixLength` for IPv6 (the prefix tier's
    /// lengths for its keys).
    pub fn prefix_len(&self) -> u8 {
        self.len
    }

    /// The network address (the IPv4 address itself, or the first address of the IPv6 prefix).
    pub fn addr(&self) -> IpAddr {
        if self.is_ipv4() {
            IpAddr::V4(Ipv4Addr::from(self.bits as u32))
        } else {
            IpAddr::V6(Ipv6Addr::from(self.bits))
        }
    }

    /// The key as a CIDR (`/32` for IPv4), e.g. for an XDP ban-map key.
    pub fn to_ipnet(&self) -> IpNet {
        match self.addr() {
            IpAddr::V4(v4) => {
                IpNet::V4(Ipv4Net::new(v4, self.len).expect("an IPv4 key is at most 32 bits"))
            }
            IpAddr::V6(v6) => {
                IpNet::V6(Ipv6Net::new(v6, self.len).expect("prefix length is at most 128"))
            }
        }
    }

    /// Raw parts for the table: (128 address bits, prefix length).
    pub(crate) fn raw(&self) -> (u128, u8) {
        (self.bits, self.len)
    }

    /// Rebuilds a key from [`IpKey::raw`] parts.
    pub(crate) fn from_raw(bits: u128, len: u8) -> IpKey {
        IpKey { bits, len }
    }
}

impl fmt::Display for IpKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.addr() {
            IpAddr::V4(v4) if self.len == 32 => write!(f, "{v4}"),
            IpAddr::V4(v4) => write!(f, "{v4}/{}", self.len),
            IpAddr::V6(v6) => write!(f, "{v6}/{}", self.len),
        }
    }
}

impl fmt::Debug for IpKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IpKey({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn ipv4_mapped_is_ipv4() {
        let a = IpKey::new(ip("::ffff:192.0.2.7"), 64);
        let b = IpKey::new(ip("192.0.2.7"), 64);
        assert_eq!(a, b);
        assert!(a.is_ipv4());
        assert_eq!(a.to_string(), "192.0.2.7");
    }

    #[test]
    fn ipv6_shares_prefix() {
        let a = IpKey::new(ip("2001:db8:1:2::1"), 64);
        let b = IpKey::new(ip("2001:db8:1:2:ffff::9"), 64);
        let c = IpKey::new(ip("2001:db8:1:3::1"), 64);
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a.to_string(), "2001:db8:1:2::/64");
        assert_eq!(
            IpKey::new(ip("2001:db8::1"), 128).to_string(),
            "2001:db8::1/128"
        );
        assert_eq!(
            IpKey::new(ip("2001:db8:1:2::1"), 48).to_string(),
            "2001:db8:1::/48"
        );
    }

    #[test]
    fn prefixes_mask_and_display_as_cidrs() {
        let p = IpKey::prefix(ip("203.0.113.77"), 24, 48);
        assert_eq!(p, IpKey::prefix(ip("::ffff:203.0.113.1"), 24, 48));
        assert!(p.is_ipv4());
        assert_eq!(p.to_string(), "203.0.113.0/24");
        assert_eq!(p.to_ipnet().to_string(), "203.0.113.0/24");
        assert_ne!(p, IpKey::prefix(ip("203.0.114.1"), 24, 48));
        assert_eq!(
            IpKey::prefix(ip("203.0.113.77"), 32, 48).to_string(),
            "203.0.113.77"
        );
        let q = IpKey::prefix(ip("2001:db8:1:2::1"), 24, 48);
        assert!(!q.is_ipv4());
        assert_eq!(q.to_string(), "2001:db8:1::/48");
        // A short IPv6 prefix never reads as IPv4.
        assert!(!IpKey::prefix(ip("ffff::1"), 24, 16).is_ipv4());
    }

    #[test]
    fn ipv6_never_equals_an_ipv4_key() {
        // ::ffff:0:0/96 members are IPv4; a /96 prefix elsewhere is not.
        let v6 = IpKey::new(ip("::1:ffff:c000:207"), 128);
        assert!(!v6.is_ipv4());
        assert_ne!(v6, IpKey::new(ip("192.0.2.7"), 64));
    }
}
