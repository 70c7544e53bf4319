//! JA4 TLS client fingerprint (FoxIO, `technical_details/JA4.md`; the BSD-3-Clause JA4 part of
//! the JA4+ suite only).
//!
//! `JA4 = a_b_c`, 36 characters, e.g. `t13d1516h2_8daaf6152771_e5627efa2ab1`:
//! - `a` (10 chars): `t` (TLS over TCP, the only transport Rampart sees); the TLS version, from
//!   the highest non-GREASE `supported_versions` value, else `legacy_version` (`13` `12` `11`
//!   `10` `s3` `s2` `d1` `d2` `d3`, `00` when unknown); `d` if the hello has a `server_name`
//!   extension, else `i`; the number of cipher suites and of extensions, GREASE not counted (SNI
//!   and ALPN counted), two digits each, capped at 99; the first and last characters of the first
//!   ALPN value (`00` without ALPN or with an empty first value; when its first or last byte is not
//!   ASCII alphanumeric, the first and last digits of its lower-case hex form instead: `0xBA 0xAD`
//!   → `bd`).
//! - `b`: SHA-256 of the non-GREASE cipher suites as 4-digit lower-case hex, sorted, `,`-joined,
//!   truncated to 12 hex characters.
//! - `c`: the same hash of the non-GREASE extension types sorted, without SNI (`0000`) and ALPN
//!   (`0010`), then, when there are any, `_` and the non-GREASE signature algorithms in wire
//!   order.
//!
//! An empty list hashes to `000000000000` (no extensions left in `c` gives `000000000000` too).
//! `JA4_r` prints the strings before hashing; `JA4_o` / `JA4_ro` use wire order throughout (SNI
//! and ALPN kept). Cost per call: two sorts of a few dozen values and two SHA-256 hashes of a few
//! hundred bytes; a handful of small string allocations.

use sha2::{Digest, Sha256};

use super::clienthello::{ext, is_grease, ClientHello};
use super::ja3::{hex_digit, push_hex, quoted};

/// Value of an empty `b` or `c` section.
const EMPTY_HASH: &str = "000000000000";

/// JA4 two-character version code for a TLS/DTLS version number.
fn version_code(v: u16) -> &'static str {
    match v {
        0x0304 => "13",
        0x0303 => "12",
        0x0302 => "11",
        0x0301 => "10",
        0x0300 => "s3",
        0x0002 => "s2",
        0xfeff => "d1",
        0xfefd => "d2",
        0xfefc => "d3",
        _ => "00",
    }
}

/// The version codes [`ClientHello::ja4`] can print.
const VERSION_CODES: [&str; 10] = ["13", "12", "11", "10", "s3", "s2", "d1", "d2", "d3", "00"];

/// Two-digit count, capped at 99.
fn push_count(out: &mut String, n: usize) {
    let n = n.min(99);
    out.push(char::from(b'0' + (n / 10) as u8));
    out.push(char::from(b'0' + (n % 10) as u8));
}

/// The two ALPN characters of JA4 section `a` for the first ALPN value.
fn alpn_chars(first: Option<&[u8]>) -> [char; 2] {
    match (first.and_then(<[u8]>::first), first.and_then(<[u8]>::last)) {
        (Some(&f), Some(&l)) => {
            if f.is_ascii_alphanumeric() && l.is_ascii_alphanumeric() {
                [char::from(f), char::from(l)]
            } else {
                [hex_digit(f >> 4), hex_digit(l)]
            }
        }
        _ => ['0', '0'],
    }
}

/// Appends the values as 4-digit lower-case hex, `,`-joined.
fn push_hex_list(out: &mut String, values: &[u16]) {
    for (i, v) in values.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_hex(out, &v.to_be_bytes());
    }
}

/// Appends the first 12 lower-case hex characters of SHA-256(`s`), or `000000000000` when the
/// list behind `s` is `empty`.
fn push_hash12(out: &mut String, s: &str, empty: bool) {
    if empty {
        out.push_str(EMPTY_HASH);
    } else {
        push_hex(
            out,
            Sha256::digest(s.as_bytes()).get(..6).unwrap_or_default(),
        );
    }
}

fn non_grease(values: &[u16]) -> Vec<u16> {
    values.iter().copied().filter(|&v| !is_grease(v)).collect()
}

/// The lists one JA4 variant hashes: ciphers, extensions (for `c`), signature algorithms.
struct Lists {
    ciphers: Vec<u16>,
    extensions: Vec<u16>,
    sig_algs: Vec<u16>,
}

impl Lists {
    /// `sorted`: JA4 / JA4_r (sorted, SNI and ALPN left out of `c`); else JA4_o / JA4_ro.
    fn of(hello: &ClientHello, sorted: bool) -> Lists {
        let mut ciphers = non_grease(&hello.cipher_suites);
        let mut extensions = non_grease(&hello.extensions);
        if sorted {
            ciphers.sort_unstable();
            extensions.retain(|&e| e != ext::SERVER_NAME && e != ext::ALPN);
            extensions.sort_unstable();
        }
        Lists {
            ciphers,
            extensions,
            sig_algs: non_grease(&hello.signature_algorithms),
        }
    }

    fn cipher_string(&self) -> String {
        let mut s = String::with_capacity(5 * self.ciphers.len());
        push_hex_list(&mut s, &self.ciphers);
        s
    }

    fn extension_string(&self) -> String {
        let mut s = String::with_capacity(5 * (self.extensions.len() + self.sig_algs.len()) + 1);
        push_hex_list(&mut s, &self.extensions);
        if !self.sig_algs.is_empty() {
            s.push('_');
            push_hex_list(&mut s, &self.sig_algs);
        }
        s
    }

    /// `a_b_c` with hashed (`raw == false`) or printed `b` and `c`.
    fn render(&self, mut a: String, raw: bool) -> String {
        let (b, c) = (self.cipher_string(), self.extension_string());
        a.push('_');
        if raw {
            a.push_str(&b);
            a.push('_');
            a.push_str(&c);
            return a;
        }
        push_hash12(&mut a, &b, self.ciphers.is_empty());
        a.push('_');
        push_hash12(&mut a, &c, self.extensions.is_empty());
        a
    }
}

impl ClientHello {
    /// JA4 version code: the highest non-GREASE `supported_versions` value, else `legacy_version`.
    fn ja4_version(&self) -> &'static str {
        let best = self
            .supported_versions
            .iter()
            .copied()
            .filter(|&v| !is_grease(v))
            .max();
        version_code(best.unwrap_or(self.legacy_version))
    }

    /// JA4 section `a`, 10 characters, e.g. `t13d1516h2`.
    pub fn ja4_a(&self) -> String {
        let mut a = String::with_capacity(36);
        a.push('t');
        a.push_str(self.ja4_version());
        a.push(if self.extensions.contains(&ext::SERVER_NAME) {
            'd'
        } else {
            'i'
        });
        push_count(
            &mut a,
            self.cipher_suites
                .iter()
                .filter(|&&v| !is_grease(v))
                .count(),
        );
        push_count(
            &mut a,
            self.extensions.iter().filter(|&&v| !is_grease(v)).count(),
        );
        a.extend(alpn_chars(self.alpn.first().map(Vec::as_slice)));
        a
    }

    /// The JA4 fingerprint (FoxIO JA4.md), 36 characters: `a_b_c`, e.g.
    /// `t13d1516h2_8daaf6152771_e5627efa2ab1`. The ALPN characters are printed as sent, so an
    /// upper-case ALPN value gives upper-case letters: compare with blocklist entries from
    /// [`validate_ja4`] (lower case) case-insensitively.
    pub fn ja4(&self) -> String {
        Lists::of(self, true).render(self.ja4_a(), false)
    }

    /// JA4_r: the JA4 with `b` and `c` printed instead of hashed, e.g.
    /// `t13d1516h2_002f,0035,..._0005,000a,..._0403,0804,...`.
    pub fn ja4_r(&self) -> String {
        Lists::of(self, true).render(self.ja4_a(), true)
    }

    /// JA4_o: like JA4 but ciphers and extensions in wire order, SNI and ALPN included.
    pub fn ja4_o(&self) -> String {
        Lists::of(self, false).render(self.ja4_a(), false)
    }

    /// JA4_ro: JA4_o with `b` and `c` printed instead of hashed.
    pub fn ja4_ro(&self) -> String {
        Lists::of(self, false).render(self.ja4_a(), true)
    }
}

/// Validates a JA4 blocklist entry: exact format `[tqd]VVdNNNNaa_<12 hex>_<12 hex>`-style per the JA4 spec
/// (protocol char, version among the values JA4 can produce (13,12,11,10,s3,s2,00 ...), d/i, two 2-digit counts (counts capped at 99), 2-char ALPN part, 12 hex, 12 hex);
/// entries that could never be produced (e.g. unknown version code, non-hex hash, wrong length) are errors. Case-insensitive: returns lower-case.
///
/// Accepted: 36 ASCII characters `t VV S CC EE AA _ BBBBBBBBBBBB _ CCCCCCCCCCCC` where
/// - the protocol is `t` only. `q` (QUIC) and `d` (DTLS) are valid JA4 but Rampart sees TLS over
///   TCP only, so such an entry could never match and is reported as an error rather than kept
///   as a silent no-op;
/// - `VV` is one of `13 12 11 10 s3 s2 d1 d2 d3 00` (DTLS codes included: a TCP client can list
///   DTLS versions in `supported_versions`, and JA4 maps them);
/// - `S` is `d` or `i`; `CC` and `EE` are two decimal digits;
/// - `AA` are two ASCII letters or digits (any pair can be produced: alphanumeric ALPN ends, hex
///   digits, `00`);
/// - the two hashes are 12 hex digits each;
/// - and the parts agree where JA4 forces them to: 00 ciphers means `b` is `000000000000`;
///   00 extensions means `c` is `000000000000`, `S` is `i` and `AA` is `00`.
///
/// No trimming: surrounding spaces are an error.
pub fn validate_ja4(s: &str) -> Result<String, String> {
    check_ja4(s).map_err(|problem| {
        format!(
            "must be a JA4 fingerprint like \"t13d1516h2_8daaf6152771_e5627efa2ab1\" ({problem}), got {}",
            quoted(s)
        )
    })
}

fn check_ja4(s: &str) -> Result<String, &'static str> {
    if s.len() != 36 || !s.is_ascii() {
        return Err("36 ASCII characters");
    }
    let v = s.to_ascii_lowercase();
    let b = v.as_bytes();
    let part = |r: std::ops::Range<usize>| v.get(r).unwrap_or_default();
    match b.first() {
        Some(b't') => {}
        Some(b'q' | b'd') => return Err(
            "QUIC (q) and DTLS (d) fingerprints never match: Rampart sees TLS over TCP (t) only",
        ),
        _ => return Err("first character must be t, for TLS over TCP"),
    }
    if !VERSION_CODES.contains(&part(1..3)) {
        return Err("version must be one of 13 12 11 10 s3 s2 d1 d2 d3 00");
    }
    let sni = b.get(3).copied();
    if !matches!(sni, Some(b'd' | b'i')) {
        return Err("4th character must be d (SNI) or i (no SNI)");
    }
    if !part(4..8).bytes().all(|c| c.is_ascii_digit()) {
        return Err("cipher and extension counts must be two decimal digits each");
    }
    if !part(8..10).bytes().all(|c| c.is_ascii_alphanumeric()) {
        return Err("ALPN part must be two letters or digits");
    }
    if b.get(10) != Some(&b'_') || b.get(23) != Some(&b'_') {
        return Err("sections must be separated by _ at positions 11 and 24");
    }
    let (hash_b, hash_c) = (part(11..23), part(24..36));
    if !(hash_b.bytes().chain(hash_c.bytes())).all(|c| c.is_ascii_hexdigit()) {
        return Err("the two hashes must be 12 hex digits each");
    }
    if part(4..6) == "00" && hash_b != EMPTY_HASH {
        return Err("00 ciphers requires the cipher hash 000000000000");
    }
    if part(6..8) == "00" && (hash_c != EMPTY_HASH || sni != Some(b'i') || part(8..10) != "00") {
        return Err("00 extensions requires no SNI (i), ALPN 00 and extension hash 000000000000");
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alpn_rule_examples_from_ja4_md() {
        let chars = |v: &[u8]| alpn_chars(Some(v)).iter().collect::<String>();
        assert_eq!(chars(b"h2"), "h2");
        assert_eq!(chars(b"http/1.1"), "h1");
        assert_eq!(chars(b"h"), "hh");
        assert_eq!(chars(&[0xab]), "ab");
        assert_eq!(chars(&[0xab, 0xcd]), "ad");
        assert_eq!(chars(&[0x30, 0xab]), "3b");
        assert_eq!(chars(&[0x30, 0x31, 0xab, 0xcd]), "3d");
        assert_eq!(chars(&[0x30, 0xab, 0xcd, 0x31]), "01");
        assert_eq!(chars(&[0xba, 0xad]), "bd");
        assert_eq!(chars(b""), "00");
        assert_eq!(alpn_chars(None), ['0', '0']);
    }

    #[test]
    fn version_codes_and_counts() {
        for (v, code) in [
            (0x0304, "13"),
            (0x0303, "12"),
            (0x0302, "11"),
            (0x0301, "10"),
            (0x0300, "s3"),
            (0x0002, "s2"),
            (0xfeff, "d1"),
            (0xfefd, "d2"),
            (0xfefc, "d3"),
            (0x0305, "00"),
        ] {
            assert_eq!(version_code(v), code);
            assert!(VERSION_CODES.contains(&code));
        }
        let mut s = String::new();
        push_count(&mut s, 7);
        push_count(&mut s, 99);
        push_count(&mut s, 250);
        assert_eq!(s, "079999");
    }

    #[test]
    fn validation_accepts_and_lowercases() {
        assert_eq!(
            validate_ja4("T13D1516H2_8DAAF6152771_E5627EFA2AB1").as_deref(),
            Ok("t13d1516h2_8daaf6152771_e5627efa2ab1")
        );
        for ok in [
            "t10d230100_6a57a6f57151_000000000000",
            "t13d1516bd_8daaf6152771_e5627efa2ab1",
            "ts2i000000_000000000000_000000000000",
            "td3d9999zz_8daaf6152771_e5627efa2ab1",
            "t00i010000_8daaf6152771_000000000000",
            "t13i0101h2_8daaf6152771_000000000000",
        ] {
            assert_eq!(validate_ja4(ok).as_deref(), Ok(ok), "{ok}");
        }
    }

    #[test]
    fn validation_rejects_what_cannot_be_produced() {
        for bad in [
            "",
            "t13d1516h2_8daaf6152771_e5627efa2ab",
            "t13d1516h2_8daaf6152771_e5627efa2ab1 ",
            "q13d1516h2_8daaf6152771_e5627efa2ab1",
            "d13d1516h2_8daaf6152771_e5627efa2ab1",
            "x13d1516h2_8daaf6152771_e5627efa2ab1",
            "t14d1516h2_8daaf6152771_e5627efa2ab1",
            "t13x1516h2_8daaf6152771_e5627efa2ab1",
            "t13d1a16h2_8daaf6152771_e5627efa2ab1",
            "t13d1516h-_8daaf6152771_e5627efa2ab1",
            "t13d1516h2-8daaf6152771_e5627efa2ab1",
            "t13d1516h2_8daaf615277g_e5627efa2ab1",
            "t13d1516h2_8daaf6152771_e5627efa2abz",
            "t13d0016h2_8daaf6152771_e5627efa2ab1",
            "t13d1500h2_8daaf6152771_000000000000",
            "t13i150000_8daaf6152771_e5627efa2ab1",
            "t13d1516h2_8daaf6152771_é5627efa2ab",
        ] {
            assert!(validate_ja4(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(
            validate_ja4("q13d1516h2_8daaf6152771_e5627efa2ab1"),
            Err("must be a JA4 fingerprint like \"t13d1516h2_8daaf6152771_e5627efa2ab1\" (QUIC (q) and DTLS (d) fingerprints never match: Rampart sees TLS over TCP (t) only), got \"q13d1516h2_8daaf6152771_e5627efa2ab1\"".to_string())
        );
    }
}
