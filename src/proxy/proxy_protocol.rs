//! PROXY protocol headers (HAProxy "The PROXY protocol", versions 1 and 2), built with the `ppp`
//! crate. Sent to the upstream before any application byte.
//!
//! v1 is the text line `PROXY TCP4 <src> <dst> <sport> <dport>\r\n`; v2 is the binary header
//! (12-byte signature, version/command 0x21, family/protocol 0x11 or 0x21, addresses) followed by
//! TLVs. Rampart adds two private-range TLVs (0xE0..=0xEF are reserved for custom use by the
//! spec): 0xE0 carries the client's JA3 (32 ASCII hex), 0xE1 its JA4 (ASCII).

use ppp::v2::{Builder, Command, Protocol, Version};
use std::net::{IpAddr, SocketAddr};

/// PROXY v2 `PP2_TYPE_SSL`: the client's TLS facts (client flags, verify result, sub-TLVs).
pub const TLV_SSL: u8 = 0x20;
/// `PP2_SUBTYPE_SSL_VERSION` inside `PP2_TYPE_SSL`: the TLS version (`TLSv1.3`).
pub const SUBTLV_SSL_VERSION: u8 = 0x21;
/// `PP2_SUBTYPE_SSL_CN` inside `PP2_TYPE_SSL`: the client certificate's subject CN (UTF-8).
pub const SUBTLV_SSL_CN: u8 = 0x22;
/// `PP2_CLIENT_SSL`: the client connected over TLS.
pub const PP2_CLIENT_SSL: u8 = 0x01;
/// `PP2_CLIENT_CERT_CONN`: the client presented a certificate on this connection.
pub const PP2_CLIENT_CERT_CONN: u8 = 0x02;

/// The value of a `PP2_TYPE_SSL` TLV (HAProxy PROXY protocol §2.2.5): `client` flags
/// (`PP2_CLIENT_SSL`, plus `PP2_CLIENT_CERT_CONN` when a certificate was presented), `verify`
/// (u32 big-endian: 0 when a client certificate was presented and verified, 1 when none was
/// presented), then the `PP2_SUBTYPE_SSL_VERSION` and, with a certificate that has one, the
/// `PP2_SUBTYPE_SSL_CN` sub-TLVs.
pub fn ssl_tlv_value(cert_verified: bool, version: &str, cn: Option<&str>) -> Vec<u8> {
    let mut v = Vec::with_capacity(5 + 3 + version.len() + cn.map_or(0, |c| 3 + c.len()));
    let flags = PP2_CLIENT_SSL
        | if cert_verified {
            PP2_CLIENT_CERT_CONN
        } else {
            0
        };
    v.push(flags);
    v.extend_from_slice(&u32::from(!cert_verified).to_be_bytes());
    let mut sub = |kind: u8, value: &[u8]| {
        v.push(kind);
        v.extend_from_slice(&(value.len().min(u16::MAX as usize) as u16).to_be_bytes());
        v.extend_from_slice(&value[..value.len().min(u16::MAX as usize)]);
    };
    sub(SUBTLV_SSL_VERSION, version.as_bytes());
    if let Some(cn) = cn {
        sub(SUBTLV_SSL_CN, cn.as_bytes());
    }
    v
}

/// PROXY v2 TLV type carrying the JA3 MD5 (lower hex, 32 bytes of ASCII).
pub const TLV_JA3: u8 = 0xE0;
/// PROXY v2 TLV type carrying the JA4 string (ASCII).
pub const TLV_JA4: u8 = 0xE1;

fn unify(client: SocketAddr, local: SocketAddr) -> (SocketAddr, SocketAddr) {
    let to_v4 = |a: SocketAddr| match a.ip() {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), a.port()),
            None => a,
        },
        IpAddr::V4(_) => a,
    };
    let (c, l) = (to_v4(client), to_v4(local));
    match (c, l) {
        (SocketAddr::V4(_), SocketAddr::V6(_)) | (SocketAddr::V6(_), SocketAddr::V4(_)) => {
            let to_v6 = |a: SocketAddr| match a.ip() {
                IpAddr::V4(v4) => SocketAddr::new(IpAddr::V6(v4.to_ipv6_mapped()), a.port()),
                IpAddr::V6(_) => a,
            };
            (to_v6(c), to_v6(l))
        }
        _ => (c, l),
    }
}

/// PROXY v1 line for a TCP connection from `client` to `local` (the listener address it hit).
pub fn v1_header(client: SocketAddr, local: SocketAddr) -> Vec<u8> {
    let (c, l) = unify(client, local);
    let addrs = match (c, l) {
        (SocketAddr::V4(c), SocketAddr::V4(l)) => {
            ppp::v1::Addresses::new_tcp4(*c.ip(), *l.ip(), c.port(), l.port())
        }
        (SocketAddr::V6(c), SocketAddr::V6(l)) => {
            ppp::v1::Addresses::new_tcp6(*c.ip(), *l.ip(), c.port(), l.port())
        }
        _ => ppp::v1::Addresses::Unknown,
    };
    addrs.to_string().into_bytes()
}

/// PROXY v2 header (command PROXY, TCP over IPv4/IPv6) with the given extra TLVs `(type, value)`.
pub fn v2_header(client: SocketAddr, local: SocketAddr, tlvs: &[(u8, &[u8])]) -> Vec<u8> {
    let (c, l) = unify(client, local);
    let mut b = Builder::with_addresses(Version::Two | Command::Proxy, Protocol::Stream, (c, l));
    for (kind, value) in tlvs {
        b = b
            .write_tlv(*kind, value)
            .expect("writing to an in-memory header cannot fail");
    }
    b.build()
        .expect("a header with two addresses and short TLVs always fits")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_ipv4_and_mapped() {
        let h = v1_header(
            "192.0.2.1:5000".parse().unwrap(),
            "[::ffff:10.0.0.1]:443".parse().unwrap(),
        );
        assert_eq!(h, b"PROXY TCP4 192.0.2.1 10.0.0.1 5000 443\r\n");
    }

    #[test]
    fn v1_ipv6() {
        let h = v1_header(
            "[2001:db8::1]:5000".parse().unwrap(),
            "[::1]:443".parse().unwrap(),
        );
        assert_eq!(h, b"PROXY TCP6 2001:db8::1 ::1 5000 443\r\n");
    }

    #[test]
    fn v2_ipv4_with_tlv_is_byte_exact() {
        let h = v2_header(
            "127.0.0.2:4000".parse().unwrap(),
            "127.0.0.1:8443".parse().unwrap(),
            &[(TLV_JA4, b"t13d")],
        );
        let mut want = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
        want.extend([0x21, 0x11, 0, 12 + 3 + 4]);
        want.extend([127, 0, 0, 2, 127, 0, 0, 1, 0x0f, 0xa0, 0x20, 0xfb]);
        want.extend([0xE1, 0, 4]);
        want.extend(b"t13d");
        assert_eq!(h, want);
    }

    #[test]
    fn ssl_tlv_is_byte_exact() {
        assert_eq!(
            ssl_tlv_value(true, "TLSv1.3", Some("alice")),
            [
                &[0x03, 0, 0, 0, 0, 0x21, 0, 7][..],
                b"TLSv1.3",
                &[0x22, 0, 5],
                b"alice"
            ]
            .concat()
        );
        assert_eq!(
            ssl_tlv_value(false, "TLSv1.2", None),
            [&[0x01, 0, 0, 0, 1, 0x21, 0, 7][..], b"TLSv1.2"].concat()
        );
    }

    #[test]
    fn v2_ipv6() {
        let h = v2_header("[::1]:1".parse().unwrap(), "[::1]:2".parse().unwrap(), &[]);
        assert_eq!(&h[12..16], &[0x21, 0x21, 0, 36]);
        assert_eq!(h.len(), 16 + 36);
    }
}
