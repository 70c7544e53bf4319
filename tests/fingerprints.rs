//! ClientHello parsing and JA3 / JA4 fingerprints: the worked examples of the JA3 README and of
//! FoxIO's JA4.md, every reference capture in `../shared/fixtures/clienthello/` (whole, fed one
//! byte at a time, and re-framed into other record sizes), and hand-built hellos for the framing
//! rules (1-byte records, trailing bytes, plain HTTP, SSLv2, bad lengths, the 16 KiB cap).
//! Without the fixture folder the fixture tests skip visibly, and fail under CI
//! (`tests/common/prereq.rs`).
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;
use common::hello::{u16_vec, with_u16_len, with_u8_len};
use common::prereq;
use std::fs;

use rampart::tls::clienthello::{parse_client_hello, ClientHello, HelloParse, MAX_HELLO_BYTES};
use rampart::tls::ja3::validate_ja3;
use rampart::tls::ja4::validate_ja4;
use serde_json::Value;

// ---------------------------------------------------------------------------------------------
// Hand-built hellos

/// One extension: type and raw body.
type Ext = (u16, Vec<u8>);

fn sni_ext(host: &[u8]) -> Ext {
    let mut entry = vec![0u8];
    entry.extend(with_u16_len(host));
    (0x0000, with_u16_len(&entry))
}

fn alpn_ext(names: &[&[u8]]) -> Ext {
    let list: Vec<u8> = names.iter().flat_map(|n| with_u8_len(n)).collect();
    (0x0010, with_u16_len(&list))
}

fn u16_list_ext(ty: u16, values: &[u16]) -> Ext {
    (ty, with_u16_len(&u16_vec(values)))
}

fn versions_ext(values: &[u16]) -> Ext {
    (0x002b, with_u8_len(&u16_vec(values)))
}

fn point_formats_ext(values: &[u8]) -> Ext {
    (0x000b, with_u8_len(values))
}

/// The ClientHello handshake message (header included).
fn hello_message(version: u16, ciphers: &[u16], exts: Option<&[Ext]>) -> Vec<u8> {
    let mut body = version.to_be_bytes().to_vec();
    body.extend([0x42; 32]); // random
    body.extend(with_u8_len(&[7; 32])); // session id
    body.extend(with_u16_len(&u16_vec(ciphers)));
    body.extend([1, 0]); // compression: null
    if let Some(exts) = exts {
        let block: Vec<u8> = exts
            .iter()
            .flat_map(|(ty, data)| {
                let mut e = ty.to_be_bytes().to_vec();
                e.extend(with_u16_len(data));
                e
            })
            .collect();
        body.extend(with_u16_len(&block));
    }
    let len = body.len() as u32;
    let mut msg = vec![1, (len >> 16) as u8, (len >> 8) as u8, len as u8];
    msg.extend(body);
    msg
}

/// Frames `payload` into handshake records of at most `size` bytes each.
fn records(payload: &[u8], size: usize) -> Vec<u8> {
    payload
        .chunks(size)
        .flat_map(|chunk| {
            let mut r = vec![0x16, 0x03, 0x01];
            r.extend((chunk.len() as u16).to_be_bytes());
            r.extend_from_slice(chunk);
            r
        })
        .collect()
}

/// The handshake bytes carried by a record stream (record headers removed).
fn unframe(stream: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < stream.len() {
        let len = usize::from(u16::from_be_bytes([stream[i + 3], stream[i + 4]]));
        out.extend_from_slice(&stream[i + 5..i + 5 + len]);
        i += 5 + len;
    }
    out
}

fn complete(buf: &[u8]) -> ClientHello {
    match parse_client_hello(buf) {
        HelloParse::Complete(h) => h,
        other => panic!("expected Complete, got {other:?}"),
    }
}

/// Asserts every proper prefix is `Incomplete` and the whole is `Complete` with `record_bytes`
/// equal to its length; returns the hello.
fn assert_prefixes(buf: &[u8]) -> ClientHello {
    for n in 0..buf.len() {
        assert_eq!(
            parse_client_hello(&buf[..n]),
            HelloParse::Incomplete,
            "prefix of {n}/{} bytes",
            buf.len()
        );
    }
    let hello = complete(buf);
    assert_eq!(hello.record_bytes, buf.len());
    hello
}

const JA4_SPEC_CIPHERS: [u16; 15] = [
    0x1301, 0x1302, 0x1303, 0xc02b, 0xc02f, 0xc02c, 0xc030, 0xcca9, 0xcca8, 0xc013, 0xc014, 0x009c,
    0x009d, 0x002f, 0x0035,
];
const JA4_SPEC_EXTENSIONS: [u16; 16] = [
    0x001b, 0x0000, 0x0033, 0x0010, 0x4469, 0x0017, 0x002d, 0x000d, 0x0005, 0x0023, 0x0012, 0x002b,
    0xff01, 0x000b, 0x000a, 0x0015,
];
const JA4_SPEC_SIG_ALGS: [u16; 8] = [
    0x0403, 0x0804, 0x0401, 0x0503, 0x0805, 0x0501, 0x0806, 0x0601,
];

/// A wire hello with the lists of JA4.md's example, GREASE sprinkled in as Chrome does.
fn ja4_spec_hello(sig_algs: &[u16]) -> Vec<u8> {
    let mut ciphers = vec![0x5a5a];
    ciphers.extend(JA4_SPEC_CIPHERS);
    let mut exts: Vec<Ext> = vec![(0xeaea, vec![])];
    for ty in JA4_SPEC_EXTENSIONS {
        exts.push(match ty {
            0x0000 => sni_ext(b"example.com"),
            0x0010 => alpn_ext(&[b"h2", b"http/1.1"]),
            0x000d => u16_list_ext(0x000d, sig_algs),
            0x002b => versions_ext(&[0x7a7a, 0x0304, 0x0303]),
            0x000a => u16_list_ext(0x000a, &[0x2a2a, 0x001d, 0x0017, 0x0018]),
            0x000b => point_formats_ext(&[0]),
            other => (other, vec![0; 3]),
        });
    }
    exts.push((0x1a1a, vec![0]));
    records(&hello_message(0x0303, &ciphers, Some(&exts)), 1 << 14)
}

// ---------------------------------------------------------------------------------------------
// Worked examples of the specs

#[test]
fn ja3_readme_example_reproduces() {
    let exts = [
        sni_ext(b"example.com"),
        u16_list_ext(0x000a, &[23, 24, 25]),
        point_formats_ext(&[0]),
    ];
    let ciphers = [47, 53, 5, 10, 49161, 49162, 49171, 49172, 50, 56, 19, 4];
    let hello = complete(&records(&hello_message(769, &ciphers, Some(&exts)), 512));
    assert_eq!(
        hello.ja3_string(),
        "769,47-53-5-10-49161-49162-49171-49172-50-56-19-4,0-10-11,23-24-25,0"
    );
    assert_eq!(hello.ja3(), "ada70206e40642a3e4461f35503241d5");
}

#[test]
fn ja4_spec_example_reproduces() {
    let hello = complete(&ja4_spec_hello(&JA4_SPEC_SIG_ALGS));
    assert_eq!(hello.sni.as_deref(), Some("example.com"));
    assert_eq!(hello.ja4(), "t13d1516h2_8daaf6152771_e5627efa2ab1");
    assert_eq!(hello.ja4_a(), "t13d1516h2");
    assert_eq!(
        hello.ja4_r(),
        "t13d1516h2_002f,0035,009c,009d,1301,1302,1303,c013,c014,c02b,c02c,c02f,c030,cca8,cca9_\
         0005,000a,000b,000d,0012,0015,0017,001b,0023,002b,002d,0033,4469,ff01_\
         0403,0804,0401,0503,0805,0501,0806,0601"
    );
    assert_eq!(
        hello.ja4_ro(),
        "t13d1516h2_1301,1302,1303,c02b,c02f,c02c,c030,cca9,cca8,c013,c014,009c,009d,002f,0035_\
         001b,0000,0033,0010,4469,0017,002d,000d,0005,0023,0012,002b,ff01,000b,000a,0015_\
         0403,0804,0401,0503,0805,0501,0806,0601"
    );
    assert_eq!(hello.ja4_o(), "t13d1516h2_acb858a92679_18f69afefd3d");
    // GREASE is in every raw list but in no fingerprint.
    assert_eq!(hello.cipher_suites.first(), Some(&0x5a5a));
    assert_eq!(hello.extensions.first(), Some(&0xeaea));
    assert_eq!(hello.supported_versions, [0x7a7a, 0x0304, 0x0303]);
}

#[test]
fn ja4_spec_example_without_signature_algorithms_ends_without_underscore() {
    let hello = complete(&ja4_spec_hello(&[]));
    assert!(hello
        .ja4_r()
        .ends_with("_0005,000a,000b,000d,0012,0015,0017,001b,0023,002b,002d,0033,4469,ff01"));
    assert_eq!(hello.ja4(), "t13d1516h2_8daaf6152771_6d807ffa2a79");
}

#[test]
fn ja4_grease_in_signature_algorithms_is_ignored() {
    let mut sig_algs = vec![0x3a3a];
    sig_algs.extend(JA4_SPEC_SIG_ALGS);
    let hello = complete(&ja4_spec_hello(&sig_algs));
    assert_eq!(hello.signature_algorithms.first(), Some(&0x3a3a));
    assert_eq!(hello.ja4(), "t13d1516h2_8daaf6152771_e5627efa2ab1");
}

#[test]
fn ja4_empty_lists_hash_to_zeros_and_version_falls_back_to_legacy() {
    let hello = complete(&records(&hello_message(0x0301, &[], None), 100));
    assert_eq!(hello.ja4(), "t10i000000_000000000000_000000000000");
    assert_eq!(hello.ja4_r(), "t10i000000__");
    assert_eq!(hello.ja3_string(), "769,,,,");
    // supported_versions holding only GREASE: legacy_version (SSL 3.0) decides.
    let exts = [
        sni_ext(b"a.b"),
        alpn_ext(&[b"\xba\xad"]),
        versions_ext(&[0x0a0a]),
    ];
    let hello = complete(&records(
        &hello_message(0x0300, &[0x00ff], Some(&exts)),
        100,
    ));
    assert_eq!(hello.ja4(), "ts3d0103bd_8909cde2f411_b9a491fefe05");
    assert_eq!(hello.ja4_r(), "ts3d0103bd_00ff_002b");
    // Only SNI and ALPN: the extension count is 2 but section c is empty.
    let exts = [sni_ext(b"a.b"), alpn_ext(&[b"h2"])];
    let hello = complete(&records(
        &hello_message(0x0303, &[0x00ff], Some(&exts)),
        100,
    ));
    assert_eq!(hello.ja4(), "t12d0102h2_8909cde2f411_000000000000");
    assert_eq!(hello.ja4_r(), "t12d0102h2_00ff_");
    assert!(validate_ja4(&hello.ja4()).is_ok());
}

#[test]
fn ja4_counts_cap_at_99() {
    let ciphers: Vec<u16> = (1..=150).collect();
    let exts: Vec<Ext> = (0x1000..0x1000 + 120).map(|t| (t, vec![])).collect();
    let hello = complete(&records(
        &hello_message(0x0303, &ciphers, Some(&exts)),
        1 << 14,
    ));
    assert_eq!(&hello.ja4_a(), "t12i999900");
    assert!(validate_ja4(&hello.ja4()).is_ok());
}

// ---------------------------------------------------------------------------------------------
// Reference fixtures

/// `(name, bytes, expected)` for every fixture of `expected.json`, sorted by name; `None` (after
/// [`prereq::skip_or_fail`]: a visible skip, a failure under CI) when the folder is absent.
fn fixtures() -> Option<Vec<(String, Vec<u8>, Value)>> {
    let dir = prereq::require(common::fixtures::shared_fixture_dir("clienthello"))?;
    let expected: Value =
        serde_json::from_slice(&fs::read(dir.join("expected.json")).expect("expected.json"))
            .expect("expected.json parses");
    let map = expected.as_object().expect("expected.json is an object");
    let mut out: Vec<_> = map
        .iter()
        .map(|(name, exp)| {
            let bytes = fs::read(dir.join(format!("{name}.bin"))).expect("fixture .bin");
            (name.clone(), bytes, exp.clone())
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    // Every .bin has an entry, and a present folder holds the whole reference set.
    let bins = fs::read_dir(&dir)
        .expect("fixture dir")
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "bin"))
        })
        .count();
    assert_eq!(bins, out.len(), "every .bin has an expected.json entry");
    assert!(
        out.len() >= 29,
        "{} fixtures in {}",
        out.len(),
        dir.display()
    );
    Some(out)
}

fn alpn_as_json(alpn: &[Vec<u8>]) -> Vec<String> {
    alpn.iter()
        .map(|name| {
            if !name.is_empty() && name.iter().all(|b| (0x20..0x7f).contains(b)) {
                String::from_utf8(name.clone()).unwrap()
            } else {
                let hex: String = name.iter().map(|b| format!("{b:02x}")).collect();
                format!("hex:{hex}")
            }
        })
        .collect()
}

fn assert_matches_expected(name: &str, hello: &ClientHello, exp: &Value) {
    let s = |k: &str| exp[k].as_str().unwrap_or_else(|| panic!("{name}: {k}"));
    assert_eq!(hello.ja3_string(), s("ja3_string"), "{name}: ja3_string");
    assert_eq!(hello.ja3(), s("ja3"), "{name}: ja3");
    assert_eq!(hello.ja4(), s("ja4"), "{name}: ja4");
    assert_eq!(hello.ja4_r(), s("ja4_r"), "{name}: ja4_r");
    assert_eq!(hello.sni.as_deref(), exp["sni"].as_str(), "{name}: sni");
    let alpn: Vec<String> = exp["alpn"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert_eq!(alpn_as_json(&hello.alpn), alpn, "{name}: alpn");
    assert_eq!(
        validate_ja3(&hello.ja3()).as_deref(),
        Ok(s("ja3")),
        "{name}"
    );
    assert_eq!(
        validate_ja4(&hello.ja4()).as_deref(),
        Ok(s("ja4")),
        "{name}"
    );
}

#[test]
fn every_fixture_matches_expected_json() {
    let Some(all) = fixtures() else {
        return;
    };
    for (name, bytes, exp) in &all {
        let hello = complete(bytes);
        assert_eq!(hello.record_bytes, bytes.len(), "{name}: record_bytes");
        assert_eq!(Some(bytes.len() as u64), exp["bytes"].as_u64(), "{name}");
        assert_matches_expected(name, &hello, exp);
    }
    assert!(all.len() >= 29, "{} fixtures", all.len());
    assert!(all
        .iter()
        .any(|(_, b, e)| e["tls_records"] == 2 && unframe(b).len() + 10 == b.len()));
}

#[test]
fn every_fixture_fed_byte_by_byte() {
    // Every fixture (the 2-record one included): each proper prefix is Incomplete, the whole is
    // Complete and equal to the one-shot parse, and trailing bytes change nothing.
    let Some(all) = fixtures() else {
        return;
    };
    for (name, bytes, exp) in all {
        let hello = assert_prefixes(&bytes);
        assert_matches_expected(&name, &hello, &exp);
        let mut more = bytes.clone();
        more.extend([0x17, 0x03, 0x03, 0x00, 0x10, 0xff]);
        assert_eq!(complete(&more), hello, "{name}: trailing bytes");
    }
}

#[test]
fn every_fixture_reframed_gives_the_same_fingerprints() {
    let Some(all) = fixtures() else {
        return;
    };
    for (name, bytes, exp) in all {
        let message = unframe(&bytes);
        for size in [1, 2, 3, 7, 64, 255, 1000] {
            let stream = records(&message, size);
            if stream.len() > MAX_HELLO_BYTES {
                assert!(matches!(
                    parse_client_hello(&stream),
                    HelloParse::Malformed(_)
                ));
                continue;
            }
            let hello = complete(&stream);
            assert_eq!(hello.record_bytes, stream.len(), "{name}/{size}");
            assert_matches_expected(&format!("{name} in {size}-byte records"), &hello, &exp);
        }
    }
}

#[test]
fn two_record_fixture_in_one_byte_records_fed_byte_by_byte() {
    let Some(all) = fixtures() else {
        return;
    };
    let (name, bytes, exp) = all
        .into_iter()
        .find(|(_, _, e)| e["tls_records"] == 2)
        .expect("a fixture in two records");
    let stream = records(&unframe(&bytes), 1);
    let hello = assert_prefixes(&stream);
    assert_matches_expected(&name, &hello, &exp);
}

// ---------------------------------------------------------------------------------------------
// Framing rules on hand-built hellos

fn small_hello() -> Vec<u8> {
    let exts = [
        sni_ext(b"Api.Example.COM."),
        alpn_ext(&[b"http/1.1"]),
        versions_ext(&[0x0304]),
        u16_list_ext(0x000a, &[29]),
        u16_list_ext(0x000d, &[0x0804]),
    ];
    hello_message(0x0303, &[0x1301, 0x1302], Some(&exts))
}

#[test]
fn hello_in_one_byte_records_parses_at_every_split() {
    let message = small_hello();
    let stream = records(&message, 1);
    assert_eq!(stream.len(), 6 * message.len());
    let hello = assert_prefixes(&stream);
    // The same fields as the hello in one record, but for `record_bytes`.
    let mut one_record = complete(&records(&message, 1 << 14));
    assert_eq!(one_record.record_bytes, message.len() + 5);
    one_record.record_bytes = stream.len();
    assert_eq!(hello, one_record);
    assert_eq!(hello.sni.as_deref(), Some("Api.Example.COM."));
    assert_eq!(hello.alpn, [b"http/1.1".to_vec()]);
    assert_eq!(hello.ja4_a(), "t13d0205h1");
}

#[test]
fn trailing_application_bytes_are_not_part_of_the_hello() {
    let hello_stream = records(&small_hello(), 100);
    let mut stream = hello_stream.clone();
    stream.extend([0x17, 0x03, 0x03, 0x00, 0x05, 1, 2, 3, 4, 5]);
    stream.extend(b"GET / HTTP/1.1\r\n");
    let hello = complete(&stream);
    assert_eq!(hello.record_bytes, hello_stream.len());
    assert_eq!(complete(&hello_stream), hello);
}

#[test]
fn plain_http_and_sslv2_are_not_tls() {
    for input in [
        &b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n"[..],
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        b"G",
        // SSLv2-compatible ClientHello: 2-byte header with the high bit set, msg_type 1, 3.1.
        &[
            0x80, 0x2e, 0x01, 0x03, 0x01, 0x00, 0x15, 0x00, 0x00, 0x00, 0x10,
        ],
        // An alert record.
        &[0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x28],
        // Handshake type byte, but not version 3.x.
        &[0x16, 0x02, 0x00, 0x00, 0x10],
        &[0x00],
    ] {
        assert!(
            matches!(parse_client_hello(input), HelloParse::NotTls(_)),
            "{input:?}: {:?}",
            parse_client_hello(input)
        );
    }
    assert_eq!(
        parse_client_hello(b"GET /"),
        HelloParse::NotTls("plain text (e.g. HTTP) instead of a TLS handshake record")
    );
    assert_eq!(
        parse_client_hello(&[0x80, 0x2e]),
        HelloParse::NotTls("SSLv2-style record header (not supported)")
    );
    assert_eq!(parse_client_hello(&[]), HelloParse::Incomplete);
    assert_eq!(parse_client_hello(&[0x16, 0x03]), HelloParse::Incomplete);
}

fn malformed(buf: &[u8]) -> &'static str {
    match parse_client_hello(buf) {
        HelloParse::Malformed(why) => why,
        other => panic!("expected Malformed, got {other:?}"),
    }
}

#[test]
fn bad_record_headers_are_malformed() {
    assert_eq!(
        malformed(&[0x16, 0x03, 0x01, 0x00, 0x00]),
        "empty handshake record"
    );
    assert_eq!(
        malformed(&[0x16, 0x03, 0x01, 0x40, 0x01]),
        "record longer than 2^14 bytes"
    );
    assert_eq!(
        malformed(&[0x16, 0x03, 0x01, 0x3f, 0xfc]),
        "ClientHello records exceed MAX_HELLO_BYTES (16 KiB)"
    );
    // A ServerHello (type 2) instead of a ClientHello.
    assert_eq!(
        malformed(&[0x16, 0x03, 0x03, 0x00, 0x30, 0x02]),
        "first handshake message is not a ClientHello"
    );
    // A non-handshake record in the middle of the hello.
    let mut stream = records(&small_hello(), 20);
    stream[20 + 5] = 0x17;
    assert_eq!(
        malformed(&stream),
        "a non-handshake record arrived before the ClientHello ended"
    );
    // The last record carries bytes after the hello: detected from its header alone.
    let mut message = small_hello();
    message.extend([0x0b, 0, 0, 0]);
    let stream = records(&message, 1 << 14);
    assert_eq!(
        malformed(&stream[..9]),
        "a handshake record carries bytes after the ClientHello"
    );
}

#[test]
fn oversized_lengths_are_malformed() {
    let message = small_hello();
    let stream = records(&message, 1 << 14);
    // Handshake length larger than the record stream can carry within 16 KiB: known at byte 9.
    let mut big = stream[..9].to_vec();
    big[6..9].copy_from_slice(&[0x00, 0xff, 0xff]);
    assert_eq!(big.len(), 9);
    assert_eq!(
        malformed(&big),
        "ClientHello records exceed MAX_HELLO_BYTES (16 KiB)"
    );
    // Cipher suite length running past the message.
    let cipher_len_at = 5 + 4 + 2 + 32 + 33;
    let mut bad = stream.clone();
    bad[cipher_len_at..cipher_len_at + 2].copy_from_slice(&[0x7f, 0xfe]);
    assert_eq!(
        malformed(&bad),
        "a field runs past the end of its enclosing structure"
    );
    // ... and the same verdict as soon as the length field is in.
    assert_eq!(
        malformed(&bad[..cipher_len_at + 2]),
        "a field runs past the end of its enclosing structure"
    );
    // Odd cipher suite length.
    let mut bad = stream.clone();
    bad[cipher_len_at + 1] = 3;
    assert_eq!(malformed(&bad), "odd length for a list of 16-bit values");
    // Session id longer than 32 bytes.
    let mut bad = stream.clone();
    bad[5 + 4 + 2 + 32] = 33;
    assert_eq!(malformed(&bad), "legacy_session_id longer than 32 bytes");
    // Handshake length shorter than its contents: the extensions block overruns it.
    let mut bad = stream.clone();
    bad[8] -= 1;
    bad[4] -= 1;
    bad.pop();
    assert_eq!(
        malformed(&bad),
        "a field runs past the end of its enclosing structure"
    );
}

#[test]
fn bad_extensions_are_malformed() {
    let dup = [
        alpn_ext(&[b"h2"]),
        sni_ext(b"a.example"),
        alpn_ext(&[b"h3"]),
    ];
    let stream = records(&hello_message(0x0303, &[0x1301], Some(&dup)), 1 << 14);
    assert_eq!(malformed(&stream), "duplicate extension type");
    let dup_unknown = [(0x7777, vec![]), (0x7777, vec![1])];
    let stream = records(
        &hello_message(0x0303, &[0x1301], Some(&dup_unknown)),
        1 << 14,
    );
    assert_eq!(malformed(&stream), "duplicate extension type");
    // Inner length disagreeing with the extension length.
    let inner = [(0x0010, vec![0x00, 0x05, 0x02, b'h', b'2'])];
    let stream = records(&hello_message(0x0303, &[0x1301], Some(&inner)), 1 << 14);
    assert_eq!(
        malformed(&stream),
        "a field runs past the end of its enclosing structure"
    );
    let short = [(0x000a, vec![0x00, 0x02, 0x00, 0x1d, 0x00])];
    let stream = records(&hello_message(0x0303, &[0x1301], Some(&short)), 1 << 14);
    assert_eq!(
        malformed(&stream),
        "a length field does not match its contents"
    );
    let odd = [(0x002b, vec![0x03, 0x03, 0x04, 0x03])];
    let stream = records(&hello_message(0x0303, &[0x1301], Some(&odd)), 1 << 14);
    assert_eq!(malformed(&stream), "odd length for a list of 16-bit values");
}

#[test]
fn hello_over_16_kib_is_malformed() {
    // A hello padded to 17 000 bytes, in records of 2^14 bytes.
    let exts = [sni_ext(b"example.com"), (0x0015, vec![0; 17_000])];
    let message = hello_message(0x0303, &[0x1301], Some(&exts));
    let stream = records(&message, 1 << 14);
    assert!(stream.len() > MAX_HELLO_BYTES);
    assert_eq!(
        malformed(&stream),
        "ClientHello records exceed MAX_HELLO_BYTES (16 KiB)"
    );
    // Already decided at the first record header (its end is past 16 KiB).
    assert_eq!(
        malformed(&stream[..5]),
        "ClientHello records exceed MAX_HELLO_BYTES (16 KiB)"
    );
    // In smaller records it is decided at the handshake header, 9 bytes in.
    let stream = records(&message, 4000);
    assert_eq!(
        malformed(&stream[..9]),
        "ClientHello records exceed MAX_HELLO_BYTES (16 KiB)"
    );
    // The largest accepted stream is exactly MAX_HELLO_BYTES.
    let base = hello_message(0x0303, &[0x1301], Some(&[(0x0015, vec![])])).len();
    let pad = MAX_HELLO_BYTES - 5 - base;
    let message = hello_message(0x0303, &[0x1301], Some(&[(0x0015, vec![0; pad])]));
    let stream = records(&message, 1 << 14);
    assert_eq!(stream.len(), MAX_HELLO_BYTES);
    assert_eq!(complete(&stream).record_bytes, MAX_HELLO_BYTES);
    let message = hello_message(0x0303, &[0x1301], Some(&[(0x0015, vec![0; pad + 1])]));
    assert!(matches!(
        parse_client_hello(&records(&message, 1 << 14)),
        HelloParse::Malformed(_)
    ));
}

#[test]
fn sni_keeps_case_and_rejects_non_host_names() {
    let hello = complete(&records(&small_hello(), 1 << 14));
    assert_eq!(hello.sni.as_deref(), Some("Api.Example.COM."));
    for bad in [
        &b"exa mple.com"[..],
        b"a\0b",
        b"caf\xc3\xa9.fr",
        b"[::1]",
        b"",
    ] {
        let exts = [sni_ext(bad)];
        let hello = complete(&records(
            &hello_message(0x0303, &[0x1301], Some(&exts)),
            1 << 14,
        ));
        assert_eq!(hello.sni, None, "{bad:?}");
        // The extension is still there: JA4 says "d".
        assert_eq!(&hello.ja4()[3..4], "d");
    }
    let long = vec![b'a'; 255];
    let hello = complete(&records(
        &hello_message(0x0303, &[1], Some(&[sni_ext(&long)])),
        1 << 14,
    ));
    assert_eq!(hello.sni, None);
    // Only the first host_name entry counts; other name types are skipped.
    let mut list = vec![7u8, 0, 1, b'x'];
    list.extend([0, 0, 3]);
    list.extend(b"a.b");
    let hello = complete(&records(
        &hello_message(0x0303, &[1], Some(&[(0, with_u16_len(&list))])),
        1 << 14,
    ));
    assert_eq!(hello.sni.as_deref(), Some("a.b"));
}

#[test]
fn ja4_alpn_edge_cases() {
    let ja4_alpn = |names: &[&[u8]]| {
        let exts = [alpn_ext(names)];
        let hello = complete(&records(&hello_message(0x0303, &[1], Some(&exts)), 1 << 14));
        hello.ja4()[8..10].to_string()
    };
    assert_eq!(ja4_alpn(&[b"h2", b"http/1.1"]), "h2");
    assert_eq!(ja4_alpn(&[b"http/1.1"]), "h1");
    assert_eq!(ja4_alpn(&[b"x"]), "xx");
    assert_eq!(ja4_alpn(&[b"", b"h2"]), "00");
    assert_eq!(ja4_alpn(&[]), "00");
    assert_eq!(ja4_alpn(&[b"\xba\xad"]), "bd");
    assert_eq!(ja4_alpn(&[b"0\xab\xcd1"]), "01");
    assert_eq!(ja4_alpn(&[b"H2"]), "H2");
}
