//! Fuzz targets (proptest) for the parsers a client's bytes reach before anything else:
//! the first-request head reader (`proxy::head`, HTTP/1.x and the HTTP/2 preface + first header
//! block) and the inbound PROXY v1/v2 parser (`proxy::proxy_protocol::parse_inbound`). The
//! ClientHello reader has its own targets in `clienthello_prop.rs`; the forwarded-header state
//! machine and the HTTP/2 inspector in `fuzz_streams.rs`.
//!
//! Each target checks, on arbitrary bytes and on mutations of valid inputs:
//! - no panic, and every length it reports lies inside the input;
//! - the streaming property: a final verdict on a prefix (complete, invalid) is the verdict on
//!   every longer input, so TCP's segmentation cannot change what Rampart decides;
//! - valid inputs built at random are recognised exactly.
//!
//! Plus the corpus: `tests/corpus/<target>/*` holds the exact bytes of every hostile input found
//! so far, replayed on every run with the expected verdict.
//!
//! A longer run: `PROPTEST_CASES=200000 cargo test --release --test fuzz_parsers`.

mod common;
use common::corpus::{cases, corpus};
use proptest::prelude::*;
use rampart::proxy::head::{self, Head};
use rampart::proxy::proxy_protocol::{
    parse_inbound, v1_header, v2_header, Inbound, MAX_INBOUND_HEADER_BYTES,
};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Bytes that look like the start of HTTP often enough to reach deep states.
fn http_ish() -> impl Strategy<Value = Vec<u8>> {
    let pieces = prop::sample::select(vec![
        &b"GET / HTTP/1.1\r\n"[..],
        b"POST /x HTTP/1.0\r\n",
        b"CONNECT a:443 HTTP/1.1\r\n",
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        b"Host: a\r\n",
        b"Upgrade: h2c\r\n",
        b"Connection: Upgrade, HTTP2-Settings\r\n",
        b"Content-Length: 5\r\n",
        b"Transfer-Encoding: chunked\r\n",
        b"X_Forwarded_For: 6.6.6.6\r\n",
        b" folded\r\n",
        b"\r\n",
        b"\n",
        b":",
        b"\0",
    ]);
    prop::collection::vec(
        prop_oneof![
            pieces.prop_map(|p| p.to_vec()),
            prop::collection::vec(any::<u8>(), 0..8)
        ],
        0..12,
    )
    .prop_map(|v| v.concat())
}

/// An HTTP/2 client preface followed by random frames (valid headers, random payloads).
fn h2_ish() -> impl Strategy<Value = Vec<u8>> {
    let frame = (
        0u8..12,
        any::<u8>(),
        0u32..8,
        prop::collection::vec(any::<u8>(), 0..40),
    )
        .prop_map(|(ty, flags, stream, payload)| {
            let len = payload.len() as u32;
            let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, ty, flags];
            f.extend_from_slice(&stream.to_be_bytes());
            f.extend_from_slice(&payload);
            f
        });
    prop::collection::vec(frame, 0..8).prop_map(|frames| {
        let mut out = rampart::http2::PREFACE.to_vec();
        for f in frames {
            out.extend_from_slice(&f);
        }
        out
    })
}

fn final_head(h: Head) -> bool {
    matches!(h, Head::Complete(_) | Head::Invalid)
}

fn check_head(parse: fn(&[u8]) -> Head, buf: &[u8]) -> Result<(), TestCaseError> {
    let whole = parse(buf);
    if let Head::Complete(n) = whole {
        prop_assert!(n <= buf.len());
    }
    for cut in 0..buf.len() {
        let part = parse(&buf[..cut]);
        if final_head(part) {
            prop_assert_eq!(part, whole, "prefix of {} bytes decided early", cut);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(3000)))]

    #[test]
    fn http1_head_is_stream_consistent(buf in prop_oneof![http_ish(), prop::collection::vec(any::<u8>(), 0..64)]) {
        check_head(head::http1, &buf)?;
    }

    #[test]
    fn http2_head_is_stream_consistent(buf in prop_oneof![h2_ish(), prop::collection::vec(any::<u8>(), 0..64)]) {
        check_head(head::http2, &buf)?;
    }

    #[test]
    fn proxy_header_is_stream_consistent(buf in prop_oneof![
        prop::collection::vec(any::<u8>(), 0..120),
        proxy_mutated(),
    ]) {
        let whole = parse_inbound(&buf);
        match whole {
            Inbound::Proxy { len, .. } | Inbound::Local { len } => {
                prop_assert!(len <= buf.len() && len <= MAX_INBOUND_HEADER_BYTES);
            }
            Inbound::Partial => prop_assert!(buf.len() < MAX_INBOUND_HEADER_BYTES),
            Inbound::Invalid => {}
        }
        for cut in 0..buf.len() {
            let part = parse_inbound(&buf[..cut]);
            if part != Inbound::Partial {
                prop_assert_eq!(part, whole, "prefix of {} bytes decided early", cut);
            }
        }
    }

    #[test]
    fn proxy_headers_round_trip(
        c in addr(), l in addr(), v2 in any::<bool>(),
        tail in prop::collection::vec(any::<u8>(), 0..16),
    ) {
        let mut buf = if v2 { v2_header(c, l, &[(0xE1, b"t13d")]).expect("a short header fits") } else { v1_header(c, l) };
        let len = buf.len();
        buf.extend_from_slice(&tail);
        let canonical = |a: SocketAddr| SocketAddr::new(a.ip().to_canonical(), a.port());
        match parse_inbound(&buf) {
            Inbound::Proxy { len: got, source, destination } => {
                prop_assert_eq!(got, len);
                prop_assert_eq!(source, canonical(c));
                prop_assert_eq!(destination, canonical(l));
            }
            other => prop_assert!(false, "{:?} for {:?}", other, buf),
        }
        for cut in 0..len {
            prop_assert_eq!(parse_inbound(&buf[..cut]), Inbound::Partial, "cut {}", cut);
        }
    }
}

fn addr() -> impl Strategy<Value = SocketAddr> {
    prop_oneof![
        (any::<u32>(), any::<u16>())
            .prop_map(|(ip, p)| SocketAddr::new(IpAddr::V4(Ipv4Addr::from(ip)), p)),
        (any::<u128>(), any::<u16>())
            .prop_map(|(ip, p)| SocketAddr::new(IpAddr::V6(Ipv6Addr::from(ip)), p)),
    ]
}

/// Valid PROXY headers with one byte changed, truncated or with a length field inflated.
fn proxy_mutated() -> impl Strategy<Value = Vec<u8>> {
    (
        addr(),
        addr(),
        any::<bool>(),
        any::<usize>(),
        any::<u8>(),
        0u8..3,
    )
        .prop_map(|(c, l, v2, at, byte, how)| {
            let mut h = if v2 {
                v2_header(c, l, &[(0xE0, b"0123456789abcdef0123456789abcdef")])
                    .expect("a short header fits")
            } else {
                v1_header(c, l)
            };
            let i = at % h.len();
            match how {
                0 => h[i] = byte,
                1 => h.truncate(i),
                _ if v2 && h.len() > 15 => h[14] = byte,
                _ => h.insert(i, byte),
            }
            h
        })
}

#[test]
fn head_corpus() {
    for (name, bytes) in corpus("head") {
        let (h1, h2) = (head::http1(&bytes), head::http2(&bytes));
        match name.split('.').next().unwrap_or("") {
            // The HTTP/2 preface on a connection that negotiated HTTP/1.x: never an HTTP/1 head.
            n if n.starts_with("h2-preface-on-http1") => {
                assert_eq!(h1, Head::Invalid, "{name}");
                assert!(
                    matches!(h2, Head::Partial | Head::Complete(_)),
                    "{name}: {h2:?}"
                );
            }
            n if n.starts_with("http1-complete") => {
                assert!(matches!(h1, Head::Complete(_)), "{name}: {h1:?}");
                assert_eq!(h2, Head::Invalid, "{name}");
            }
            other => panic!("{name}: no expectation for the prefix {other:?}"),
        }
    }
}

#[test]
fn proxy_corpus() {
    for (name, bytes) in corpus("proxy") {
        let got = parse_inbound(&bytes);
        match name.split('-').next().unwrap_or("") {
            "invalid" => assert_eq!(got, Inbound::Invalid, "{name}"),
            "local" => assert!(matches!(got, Inbound::Local { .. }), "{name}: {got:?}"),
            "proxy" => assert!(matches!(got, Inbound::Proxy { .. }), "{name}: {got:?}"),
            other => panic!("{name}: no expectation for the prefix {other:?}"),
        }
    }
}
