//! PROXY protocol headers (HAProxy "The PROXY protocol", versions 1 and 2), built and parsed with
//! the `ppp` crate. Built: sent to the upstream before any application byte. Parsed
//! ([`parse_inbound`]): received from a trusted load balancer (`acceptProxyProtocol`) before the
//! client's own bytes.
//!
//! v1 is the text line `PROXY TCP4 <src> <dst> <sport> <dport>\r\n`; v2 is the binary header
//! (12-byte signature, version/command 0x21, family/protocol 0x11 or 0x21, addresses) followed by
//! TLVs, in Symphony's order and layout ([`V2Tlvs`]): the forwarded fingerprints in private-range
//! TLVs (0xE0..=0xEF are reserved for custom use by the spec: 0xE0 the client's JA3, 32 ASCII
//! hex, 0xE1 its JA4), `PP2_TYPE_AUTHORITY` (the SNI), and on a connection terminated here
//! `PP2_TYPE_ALPN`, `PP2_TYPE_SSL` ([`ssl_tlv_value`]) and the verified client chain (0xE2, one
//! TLV per certificate, leaf first).

use ppp::v2::{Builder, Command, Protocol, Version};
use ppp::{HeaderResult, PartialResult};
use std::net::{IpAddr, SocketAddr};

/// PROXY v2 `PP2_TYPE_ALPN`: the application protocol the client negotiated (ALPN id bytes).
pub const TLV_ALPN: u8 = 0x01;
/// PROXY v2 `PP2_TYPE_AUTHORITY`: the host name the client asked for (its SNI, UTF-8).
pub const TLV_AUTHORITY: u8 = 0x02;
/// PROXY v2 `PP2_TYPE_SSL`: the client's TLS facts (client flags, verify result, sub-TLVs).
pub const TLV_SSL: u8 = 0x20;
/// `PP2_SUBTYPE_SSL_VERSION` inside `PP2_TYPE_SSL`: the TLS version (`TLSv1.3`).
pub const SUBTLV_SSL_VERSION: u8 = 0x21;
/// `PP2_SUBTYPE_SSL_CN` inside `PP2_TYPE_SSL`: the client certificate's subject CN (UTF-8).
pub const SUBTLV_SSL_CN: u8 = 0x22;
/// `PP2_SUBTYPE_SSL_CIPHER` inside `PP2_TYPE_SSL`: the negotiated cipher suite's IANA name
/// (`TLS13_AES_128_GCM_SHA256`, as rustls names it).
pub const SUBTLV_SSL_CIPHER: u8 = 0x23;
/// Private-range TLV (0xE0..=0xEF) carrying one certificate of the client's verified chain, DER;
/// one TLV per certificate, leaf first (the type Symphony uses).
pub const TLV_CLIENT_CERT: u8 = 0xE2;
/// `PP2_CLIENT_SSL`: the client connected over TLS.
pub const PP2_CLIENT_SSL: u8 = 0x01;
/// `PP2_CLIENT_CERT_CONN`: the client presented a certificate on this connection.
pub const PP2_CLIENT_CERT_CONN: u8 = 0x02;

/// The value of a `PP2_TYPE_SSL` TLV (HAProxy PROXY protocol §2.2.5): `client` flags
/// (`PP2_CLIENT_SSL`, plus `PP2_CLIENT_CERT_CONN` when a certificate was presented), `verify`
/// (u32 big-endian: 0 when a client certificate was presented and verified, 1 when none was
/// presented), then the sub-TLVs `PP2_SUBTYPE_SSL_VERSION` and `PP2_SUBTYPE_SSL_CIPHER` (each
/// when known), then, with a certificate that has one, `PP2_SUBTYPE_SSL_CN`. Without a CN the
/// bytes are Symphony's.
pub fn ssl_tlv_value(
    cert_verified: bool,
    version: Option<&str>,
    cipher: Option<&str>,
    cn: Option<&str>,
) -> Vec<u8> {
    let subs = [
        (SUBTLV_SSL_VERSION, version),
        (SUBTLV_SSL_CIPHER, cipher),
        (SUBTLV_SSL_CN, cn),
    ];
    let len: usize = subs.iter().map(|(_, x)| x.map_or(0, |x| 3 + x.len())).sum();
    let mut v = Vec::with_capacity(5 + len);
    let flags = PP2_CLIENT_SSL
        | if cert_verified {
            PP2_CLIENT_CERT_CONN
        } else {
            0
        };
    v.push(flags);
    v.extend_from_slice(&u32::from(!cert_verified).to_be_bytes());
    for (kind, value) in subs {
        if let Some(value) = value {
            let value = &value.as_bytes()[..value.len().min(u16::MAX as usize)];
            v.push(kind);
            v.extend_from_slice(&(value.len() as u16).to_be_bytes());
            v.extend_from_slice(value);
        }
    }
    v
}

/// The `PP2_TYPE_SSL` value of a connection terminated here ([`ssl_tlv_value`]): its TLS
/// version, cipher suite and, with a (verified) client certificate, that certificate's subject CN.
pub fn ssl_tlv_of(tls: &rustls::ServerConnection) -> Vec<u8> {
    let version = match tls.protocol_version() {
        Some(rustls::ProtocolVersion::TLSv1_2) => Some("TLSv1.2"),
        Some(rustls::ProtocolVersion::TLSv1_3) => Some("TLSv1.3"),
        _ => None,
    };
    let cipher = tls
        .negotiated_cipher_suite()
        .and_then(|c| c.suite().as_str());
    let leaf = tls.peer_certificates().and_then(|c| c.first());
    let cn = leaf.and_then(|c| crate::tls::certs::subject_cn(c));
    ssl_tlv_value(leaf.is_some(), version, cipher, cn.as_deref())
}

/// The TLS facts of a connection terminated here that its PROXY v2 header carries.
#[derive(Debug, Clone, Copy)]
pub struct TlsFacts<'a> {
    /// The negotiated ALPN id (`PP2_TYPE_ALPN`), if any.
    pub alpn: Option<&'a [u8]>,
    /// The `PP2_TYPE_SSL` value ([`ssl_tlv_value`]).
    pub ssl: &'a [u8],
    /// The client's certificate chain as it presented it and the route verified it, DER, leaf
    /// first (one [`TLV_CLIENT_CERT`] each); empty without a client certificate.
    pub chain: &'a [rustls::pki_types::CertificateDer<'a>],
}

impl<'a> TlsFacts<'a> {
    /// The facts of `tls` (its negotiated ALPN, its client's chain) with its `ssl` value
    /// ([`ssl_tlv_of`]).
    pub fn of(tls: &'a rustls::ServerConnection, ssl: &'a [u8]) -> Self {
        TlsFacts {
            alpn: tls.alpn_protocol(),
            ssl,
            chain: tls.peer_certificates().unwrap_or(&[]),
        }
    }
}

/// What a PROXY v2 header carries beyond the addresses, in the order it is written: the
/// fingerprints (`forwardFingerprint`), the SNI, then on a terminated connection the ALPN, the
/// SSL TLV and the client chain.
#[derive(Debug, Clone, Copy, Default)]
pub struct V2Tlvs<'a> {
    /// JA3 ([`TLV_JA3`]) when forwarded.
    pub ja3: Option<&'a str>,
    /// JA4 ([`TLV_JA4`]) when forwarded.
    pub ja4: Option<&'a str>,
    /// The client's SNI ([`TLV_AUTHORITY`]).
    pub authority: Option<&'a str>,
    /// The TLS facts of a terminated connection.
    pub tls: Option<TlsFacts<'a>>,
}

/// Largest address block of a v2 header (two IPv6 addresses and ports), bytes.
const V2_MAX_ADDRESS_BYTES: usize = 36;

impl V2Tlvs<'_> {
    /// The `(type, value)` list, in order. A TLV whose value is empty is left out
    /// ([`v2_header`]). The client chain is left out whole (the SSL TLV still says a verified
    /// certificate was presented) when a certificate is over 65535 bytes or the header would
    /// pass the 16-bit length: the other TLVs (each counted with its 3-byte head, an empty one
    /// included), the chain's and the largest address block together must be at most 65535
    /// bytes, as Symphony counts.
    pub fn list(&self) -> Vec<(u8, &[u8])> {
        let chain = self.tls.map_or(&[][..], |t| t.chain);
        let mut out: Vec<(u8, &[u8])> = Vec::with_capacity(5 + chain.len());
        if let Some(ja3) = self.ja3 {
            out.push((TLV_JA3, ja3.as_bytes()));
        }
        if let Some(ja4) = self.ja4 {
            out.push((TLV_JA4, ja4.as_bytes()));
        }
        if let Some(sni) = self.authority {
            out.push((TLV_AUTHORITY, sni.as_bytes()));
        }
        let Some(tls) = self.tls else {
            return out;
        };
        if let Some(alpn) = tls.alpn {
            out.push((TLV_ALPN, alpn));
        }
        out.push((TLV_SSL, tls.ssl));
        let head: usize = out.iter().map(|(_, v)| 3 + v.len()).sum();
        let chain_bytes: usize = chain.iter().map(|c| 3 + c.len()).sum();
        let fits = head + chain_bytes + V2_MAX_ADDRESS_BYTES <= u16::MAX as usize
            && chain.iter().all(|c| c.len() <= u16::MAX as usize);
        if fits {
            out.extend(chain.iter().map(|c| (TLV_CLIENT_CERT, c.as_ref())));
        }
        out
    }
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

/// PROXY v2 header (command PROXY, TCP over IPv4/IPv6) with the given extra TLVs `(type,
/// value)`, in order; a TLV with an empty value is left out (as Symphony does). Errors
/// (`WriteZero`) when a value is over 65535 bytes or the header over its 16-bit length
/// ([`V2Tlvs::list`] keeps within both).
pub fn v2_header(
    client: SocketAddr,
    local: SocketAddr,
    tlvs: &[(u8, &[u8])],
) -> std::io::Result<Vec<u8>> {
    let (c, l) = unify(client, local);
    let mut b = Builder::with_addresses(Version::Two | Command::Proxy, Protocol::Stream, (c, l));
    for (kind, value) in tlvs.iter().filter(|(_, v)| !v.is_empty()) {
        b = b.write_tlv(*kind, value)?;
    }
    b.build()
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
        )
        .unwrap();
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
        )
        .unwrap();
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
        )
        .unwrap();
        tlv[15] += 4;
        tlv.extend([0x04, 0x00, 0x09, 0x00]);
        assert_eq!(parse_inbound(&tlv), Inbound::Invalid);
        // UDP over IPv4 (0x12): a header, but the peer stays the client (HAProxy).
        let mut udp = v2_header(
            "192.0.2.9:4000".parse().unwrap(),
            "10.0.0.1:443".parse().unwrap(),
            &[],
        )
        .unwrap();
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
        )
        .unwrap();
        let mut want = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
        want.extend([0x21, 0x11, 0, 12 + 3 + 4]);
        want.extend([127, 0, 0, 2, 127, 0, 0, 1, 0x0f, 0xa0, 0x20, 0xfb]);
        want.extend([0xE1, 0, 4]);
        want.extend(b"t13d");
        assert_eq!(h, want);
    }

    #[test]
    fn ssl_tlv_is_byte_exact() {
        let cipher = "TLS13_AES_128_GCM_SHA256";
        assert_eq!(
            ssl_tlv_value(true, Some("TLSv1.3"), Some(cipher), Some("alice")),
            [
                &[0x03, 0, 0, 0, 0, 0x21, 0, 7][..],
                b"TLSv1.3",
                &[0x23, 0, 24],
                cipher.as_bytes(),
                &[0x22, 0, 5],
                b"alice"
            ]
            .concat()
        );
        // No client certificate: Symphony's bytes (flags SSL, verify 1, version, cipher).
        assert_eq!(
            ssl_tlv_value(false, Some("TLSv1.2"), Some(cipher), None),
            [
                &[0x01, 0, 0, 0, 1, 0x21, 0, 7][..],
                b"TLSv1.2",
                &[0x23, 0, 24],
                cipher.as_bytes()
            ]
            .concat()
        );
    }

    #[test]
    fn v2_tlvs_in_symphonys_order_empty_ones_left_out() {
        use rustls::pki_types::CertificateDer;
        let chain = [
            CertificateDer::from(vec![1u8, 2, 3]),
            CertificateDer::from(vec![4u8]),
        ];
        let ssl = ssl_tlv_value(true, Some("TLSv1.3"), None, None);
        let t = V2Tlvs {
            ja3: Some(""),
            ja4: Some("t13d"),
            authority: Some("a.example"),
            tls: Some(TlsFacts {
                alpn: Some(b"h2"),
                ssl: &ssl,
                chain: &chain,
            }),
        };
        let kinds: Vec<u8> = t.list().iter().map(|(k, _)| *k).collect();
        assert_eq!(kinds, [0xE0, 0xE1, 0x02, 0x01, 0x20, 0xE2, 0xE2]);
        let h = v2_header(
            "127.0.0.2:4000".parse().unwrap(),
            "127.0.0.1:8443".parse().unwrap(),
            &t.list(),
        )
        .unwrap();
        let mut want = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
        let tlvs = [
            &[0xE1, 0, 4][..],
            b"t13d",
            &[0x02, 0, 9],
            b"a.example",
            &[0x01, 0, 2],
            b"h2",
            &[0x20, 0, ssl.len() as u8],
            &ssl,
            &[0xE2, 0, 3, 1, 2, 3],
            &[0xE2, 0, 1, 4],
        ]
        .concat();
        want.extend([0x21, 0x11, 0, 12 + tlvs.len() as u8]);
        want.extend([127, 0, 0, 2, 127, 0, 0, 1, 0x0f, 0xa0, 0x20, 0xfb]);
        want.extend(tlvs);
        assert_eq!(h, want);
        // Passthrough: no TLS facts, so only the fingerprints and the SNI.
        let plain = V2Tlvs {
            authority: Some("a.example"),
            ..V2Tlvs::default()
        };
        assert_eq!(plain.list(), [(0x02, &b"a.example"[..])]);
    }

    #[test]
    fn v2_chain_left_out_whole_past_the_length_limit() {
        use rustls::pki_types::CertificateDer;
        let ssl = ssl_tlv_value(true, Some("TLSv1.3"), None, None);
        let facts = |chain| TlsFacts {
            alpn: None,
            ssl: &ssl,
            chain,
        };
        // ssl TLV (3 + 14) + two certs (3 + n each) + 36: the limit is 65535.
        let room = 65535 - 36 - (3 + ssl.len()) - 6;
        let fit = [
            CertificateDer::from(vec![7u8; room - 100]),
            CertificateDer::from(vec![8u8; 100]),
        ];
        let t = V2Tlvs {
            tls: Some(facts(&fit)),
            ..V2Tlvs::default()
        };
        assert_eq!(t.list().len(), 3);
        assert!(v2_header(
            "[::1]:1".parse().unwrap(),
            "[::1]:2".parse().unwrap(),
            &t.list()
        )
        .is_ok());
        let over = [
            CertificateDer::from(vec![7u8; room - 100]),
            CertificateDer::from(vec![8u8; 101]),
        ];
        let t = V2Tlvs {
            tls: Some(facts(&over)),
            ..V2Tlvs::default()
        };
        assert_eq!(t.list(), [(TLV_SSL, &ssl[..])]);
    }

    #[test]
    fn v2_ipv6() {
        let h = v2_header("[::1]:1".parse().unwrap(), "[::1]:2".parse().unwrap(), &[]).unwrap();
        assert_eq!(&h[12..16], &[0x21, 0x21, 0, 36]);
        assert_eq!(h.len(), 16 + 36);
    }
}
