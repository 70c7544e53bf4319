//! PROXY protocol headers (HAProxy "The PROXY protocol", versions 1 and 2), built and parsed with
//! the `ppp` crate. Built: sent to the upstream before any application byte. Parsed
//! ([`parse_inbound`]): received from a trusted load balancer (`acceptProxyProtocol`) before the
//! client's own bytes.
//!
//! v1 is the text line `PROXY TCP4 <src> <dst> <sport> <dport>\r\n`; v2 is the binary header
//! (12-byte signature, version/command 0x21, family/protocol 0x11 or 0x21, addresses) followed by
//! TLVs. Rampart adds two private-range TLVs (0xE0..=0xEF are reserved for custom use by the
//! spec): 0xE0 carries the client's JA3 (32 ASCII hex), 0xE1 its JA4 (ASCII).

use ppp::v2::{Builder, Command, Protocol, Version};
use ppp::{HeaderResult, PartialResult};
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

/// Most bytes an inbound PROXY header may take (v1 is at most 107; a v2 header with its TLVs
/// beyond this is refused as invalid).
pub const MAX_INBOUND_HEADER_BYTES: usize = 16 * 1024;

/// An inbound PROXY header at the start of a buffer ([`parse_inbound`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inbound {
    /// A header of `len` bytes naming the client (`source`) and the address it connected to
    /// (`destination`), both canonical (IPv4-mapped IPv6 as IPv4).
    Proxy {
        /// Header length in bytes (TLVs included; they are ignored).
        len: usize,
        /// The client.
        source: SocketAddr,
        /// The address the client connected to (the load balancer's frontend).
        destination: SocketAddr,
    },
    /// A header of `len` bytes that names no client: v2 `LOCAL` (the balancer's own health
    /// check), v1 `UNKNOWN`, a v2 family without IP addresses, or v2 over UDP/UNSPEC. The peer is
    /// the client.
    Local {
        /// Header length in bytes.
        len: usize,
    },
    /// A prefix of a header: more bytes are needed.
    Partial,
    /// Not a PROXY v1 or v2 header (or one over [`MAX_INBOUND_HEADER_BYTES`]).
    Invalid,
}

fn canonical(a: SocketAddr) -> SocketAddr {
    SocketAddr::new(a.ip().to_canonical(), a.port())
}

/// The 12 bytes every v2 header starts with.
const V2_SIGNATURE: &[u8] = b"\r\n\r\n\0\r\nQUIT\n";

/// Most bytes of a v1 header, CRLF included (the spec's 107).
const V1_MAX_BYTES: usize = 107;

/// Parses a PROXY v1 or v2 header at the start of `buf` (the bytes after it are not looked at).
pub fn parse_inbound(buf: &[u8]) -> Inbound {
    // A v1 line is judged whole: `ppp` takes a line cut inside a field (`... 5000 `) for a
    // malformed one, and TCP may deliver it in pieces.
    if buf.starts_with(b"PROXY") || b"PROXY".starts_with(buf) {
        let head = &buf[..buf.len().min(V1_MAX_BYTES)];
        if !head.contains(&b'\n') {
            return if buf.len() >= V1_MAX_BYTES {
                Inbound::Invalid
            } else {
                Inbound::Partial
            };
        }
    }
    // A v2 header announces its length in bytes 14..16: one that could never fit is refused at
    // once instead of waiting for bytes that would be refused anyway.
    if buf.len() >= 16 && buf.starts_with(V2_SIGNATURE) {
        let declared = 16 + usize::from(u16::from_be_bytes([buf[14], buf[15]]));
        if declared > MAX_INBOUND_HEADER_BYTES {
            return Inbound::Invalid;
        }
    }
    let parsed = HeaderResult::parse(buf);
    if parsed.is_incomplete() {
        return if buf.len() >= MAX_INBOUND_HEADER_BYTES {
            Inbound::Invalid
        } else {
            Inbound::Partial
        };
    }
    match parsed {
        // Ports and addresses are digits, dots and colons: `ppp` takes `+5000` for a port.
        HeaderResult::V1(Ok(h)) if h.header.contains('+') => Inbound::Invalid,
        HeaderResult::V1(Ok(h)) => {
            let len = h.header.len();
            match h.addresses {
                ppp::v1::Addresses::Tcp4(a) => Inbound::Proxy {
                    len,
                    source: SocketAddr::new(a.source_address.into(), a.source_port),
                    destination: SocketAddr::new(a.destination_address.into(), a.destination_port),
                },
                ppp::v1::Addresses::Tcp6(a) => Inbound::Proxy {
                    len,
                    source: canonical(SocketAddr::new(a.source_address.into(), a.source_port)),
                    destination: canonical(SocketAddr::new(
                        a.destination_address.into(),
                        a.destination_port,
                    )),
                },
                ppp::v1::Addresses::Unknown => Inbound::Local { len },
            }
        }
        HeaderResult::V2(Ok(h)) => {
            let len = h.header.len();
            // The TLV area must be whole TLVs (HAProxy refuses the header otherwise).
            if len > MAX_INBOUND_HEADER_BYTES || h.tlvs().any(|t| t.is_err()) {
                return Inbound::Invalid;
            }
            // Only TCP (STREAM) names a client; UDP or UNSPEC keep the peer, as HAProxy does.
            let stream = h.protocol == Protocol::Stream;
            match (h.command, h.addresses) {
                (Command::Proxy, ppp::v2::Addresses::IPv4(a)) if stream => Inbound::Proxy {
                    len,
                    source: SocketAddr::new(a.source_address.into(), a.source_port),
                    destination: SocketAddr::new(a.destination_address.into(), a.destination_port),
                },
                (Command::Proxy, ppp::v2::Addresses::IPv6(a)) if stream => Inbound::Proxy {
                    len,
                    source: canonical(SocketAddr::new(a.source_address.into(), a.source_port)),
                    destination: canonical(SocketAddr::new(
                        a.destination_address.into(),
                        a.destination_port,
                    )),
                },
                _ => Inbound::Local { len },
            }
        }
        HeaderResult::V1(Err(_)) | HeaderResult::V2(Err(_)) => Inbound::Invalid,
    }
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
    fn inbound_v1() {
        let h = b"PROXY TCP4 192.0.2.7 10.0.0.1 5000 443\r\n\x16\x03\x01";
        let want = Inbound::Proxy {
            len: h.len() - 3,
            source: "192.0.2.7:5000".parse().unwrap(),
            destination: "10.0.0.1:443".parse().unwrap(),
        };
        assert_eq!(parse_inbound(h), want);
        for cut in 0..h.len() - 3 {
            assert_eq!(parse_inbound(&h[..cut]), Inbound::Partial, "cut {cut}");
        }
        assert_eq!(
            parse_inbound(b"PROXY TCP6 ::ffff:192.0.2.7 ::1 1 2\r\n"),
            Inbound::Proxy {
                len: 37,
                source: "192.0.2.7:1".parse().unwrap(),
                destination: "[::1]:2".parse().unwrap(),
            }
        );
        assert_eq!(
            parse_inbound(b"PROXY UNKNOWN\r\n"),
            Inbound::Local { len: 15 }
        );
        assert_eq!(parse_inbound(b"\x16\x03\x01\x02\x00"), Inbound::Invalid);
        assert_eq!(parse_inbound(b"GET / HTTP/1.1\r\n"), Inbound::Invalid);
        assert_eq!(
            parse_inbound(b"PROXY TCP4 300.0.0.1 10.0.0.1 1 2\r\n"),
            Inbound::Invalid
        );
        assert_eq!(
            parse_inbound(b"PROXY TCP4 192.0.2.1 10.0.0.1 +5000 443\r\n"),
            Inbound::Invalid
        );
    }

    #[test]
    fn inbound_v2_round_trips_the_outbound_header() {
        let mut h = v2_header(
            "192.0.2.9:4000".parse().unwrap(),
            "10.0.0.1:443".parse().unwrap(),
            &[(TLV_JA4, b"t13d")],
        );
        let len = h.len();
        h.extend(b"\x16\x03\x01");
        let want = Inbound::Proxy {
            len,
            source: "192.0.2.9:4000".parse().unwrap(),
            destination: "10.0.0.1:443".parse().unwrap(),
        };
        assert_eq!(parse_inbound(&h), want);
        for cut in 0..len {
            assert_eq!(parse_inbound(&h[..cut]), Inbound::Partial, "cut {cut}");
        }
        let v6 = v2_header(
            "[2001:db8::5]:1".parse().unwrap(),
            "[::1]:2".parse().unwrap(),
            &[],
        );
        assert_eq!(
            parse_inbound(&v6),
            Inbound::Proxy {
                len: 52,
                source: "[2001:db8::5]:1".parse().unwrap(),
                destination: "[::1]:2".parse().unwrap(),
            }
        );
        // LOCAL (a health check): no client named.
        let mut local = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
        local.extend([0x20, 0x00, 0, 0]);
        assert_eq!(parse_inbound(&local), Inbound::Local { len: 16 });
        // A bad version nibble.
        let mut bad = local.clone();
        bad[12] = 0x11;
        assert_eq!(parse_inbound(&bad), Inbound::Invalid);
        // A length that could never fit is refused from the first 16 bytes, not after a wait.
        let mut huge = local.clone();
        huge[14..16].copy_from_slice(&0xffffu16.to_be_bytes());
        assert_eq!(parse_inbound(&huge), Inbound::Invalid);
        // A TLV cut short (says 9 bytes, has 1).
        let mut tlv = v2_header(
            "192.0.2.9:4000".parse().unwrap(),
            "10.0.0.1:443".parse().unwrap(),
            &[],
        );
        tlv[15] += 4;
        tlv.extend([0x04, 0x00, 0x09, 0x00]);
        assert_eq!(parse_inbound(&tlv), Inbound::Invalid);
        // UDP over IPv4 (0x12): a header, but the peer stays the client (HAProxy).
        let mut udp = v2_header(
            "192.0.2.9:4000".parse().unwrap(),
            "10.0.0.1:443".parse().unwrap(),
            &[],
        );
        udp[13] = 0x12;
        assert_eq!(parse_inbound(&udp), Inbound::Local { len: 28 });
    }

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
