//! JA3 TLS client fingerprint (Salesforce, <https://github.com/salesforce/ja3>).
//!
//! The JA3 string is five comma-separated fields taken from the ClientHello, each a `-`-joined
//! list of decimal values in wire order:
//! `legacy_version,cipher_suites,extension_types,supported_groups,ec_point_formats`, with the 16
//! GREASE values of RFC 8701 removed from every 16-bit list (an absent list is an empty field,
//! e.g. `769,47-53,0,,`). The JA3 fingerprint is the MD5 of that string in lower-case hex
//! (32 characters). Example from the JA3 README:
//! `769,47-53-5-10-49161-49162-49171-49172-50-56-19-4,0-10-11,23-24-25,0` →
//! `ada70206e40642a3e4461f35503241d5`.
//!
//! Cost: one pass over the hello's lists plus one MD5 block per 64 bytes of string; two small
//! string allocations.

use std::fmt::Write as _;

use md5::{Digest, Md5};

use super::clienthello::{is_grease, ClientHello};

/// Lower-case hex digit for a nibble (`n < 16`).
pub(crate) fn hex_digit(n: u8) -> char {
    char::from_digit(u32::from(n & 0x0f), 16).unwrap_or('0')
}

/// Appends `bytes` to `out` as lower-case hex.
pub(crate) fn push_hex(out: &mut String, bytes: &[u8]) {
    for &b in bytes {
        out.push(hex_digit(b >> 4));
        out.push(hex_digit(b));
    }
}

/// Appends the `-`-joined decimal values of `values` (GREASE left out when `drop_grease`).
fn push_list<T: Copy + Into<u16>>(out: &mut String, values: &[T], drop_grease: bool) {
    let mut first = true;
    for &v in values {
        let v: u16 = v.into();
        if drop_grease && is_grease(v) {
            continue;
        }
        if !first {
            out.push('-');
        }
        first = false;
        // Writing to a String cannot fail.
        let _ = write!(out, "{v}");
    }
}

impl ClientHello {
    /// The JA3 full string (Salesforce definition): `legacy_version,ciphers,extensions,
    /// supported_groups,ec_point_formats`, decimal, `-`-joined within a field, GREASE removed.
    pub fn ja3_string(&self) -> String {
        let mut s = String::with_capacity(
            8 + 6
                * (self.cipher_suites.len()
                    + self.extensions.len()
                    + self.supported_groups.len()
                    + self.ec_point_formats.len()),
        );
        let _ = write!(s, "{},", self.legacy_version);
        push_list(&mut s, &self.cipher_suites, true);
        s.push(',');
        push_list(&mut s, &self.extensions, true);
        s.push(',');
        push_list(&mut s, &self.supported_groups, true);
        s.push(',');
        // Point formats are 8-bit: no GREASE value can occur there.
        push_list(&mut s, &self.ec_point_formats, false);
        s
    }

    /// The JA3 fingerprint: MD5 of [`ClientHello::ja3_string`], 32 lower-case hex characters.
    pub fn ja3(&self) -> String {
        ja3_hash(&self.ja3_string())
    }
}

/// MD5 of a JA3 string, as 32 lower-case hex characters.
pub fn ja3_hash(ja3_string: &str) -> String {
    let digest = Md5::digest(ja3_string.as_bytes());
    let mut out = String::with_capacity(32);
    push_hex(&mut out, &digest);
    out
}

/// Quotes a config value for an error message, cut to its first 64 characters.
pub(crate) fn quoted(s: &str) -> String {
    const SHOWN: usize = 64;
    match s.char_indices().nth(SHOWN) {
        Some((cut, _)) => format!("{:?}... ({} bytes)", s.get(..cut).unwrap_or(s), s.len()),
        None => format!("{s:?}"),
    }
}

/// Validates a blocklist entry: exactly 32 hex chars; returns it lower-cased; Err(message) otherwise
/// e.g. "must be 32 hex characters (a JA3 MD5), got \"xyz\"".
///
/// No trimming: surrounding spaces are an error, since the entry could never match.
pub fn validate_ja3(s: &str) -> Result<String, String> {
    if s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(s.to_ascii_lowercase())
    } else {
        Err(format!(
            "must be 32 hex characters (a JA3 MD5), got {}",
            quoted(s)
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readme_example_hash() {
        assert_eq!(
            ja3_hash("769,47-53-5-10-49161-49162-49171-49172-50-56-19-4,0-10-11,23-24-25,0"),
            "ada70206e40642a3e4461f35503241d5"
        );
    }

    #[test]
    fn empty_hello_has_empty_fields() {
        let hello = ClientHello {
            legacy_version: 0x0301,
            ..ClientHello::default()
        };
        assert_eq!(hello.ja3_string(), "769,,,,");
    }

    #[test]
    fn grease_removed_everywhere_but_point_formats() {
        let hello = ClientHello {
            legacy_version: 0x0303,
            cipher_suites: vec![0x0a0a, 0x1301, 0xfafa],
            extensions: vec![0x2a2a, 0x0000, 0x000a],
            supported_groups: vec![0x3a3a, 0x001d],
            ec_point_formats: vec![0x0a, 0],
            ..ClientHello::default()
        };
        assert_eq!(hello.ja3_string(), "771,4865,0-10,29,10-0");
    }

    #[test]
    fn validation() {
        assert_eq!(
            validate_ja3("ADA70206E40642A3E4461F35503241D5").as_deref(),
            Ok("ada70206e40642a3e4461f35503241d5")
        );
        assert_eq!(
            validate_ja3("xyz"),
            Err("must be 32 hex characters (a JA3 MD5), got \"xyz\"".to_string())
        );
        assert!(validate_ja3(" ada70206e40642a3e4461f35503241d5").is_err());
        assert!(validate_ja3("ada70206e40642a3e4461f35503241dg").is_err());
        assert!(validate_ja3("ada70206e40642a3e4461f35503241d").is_err());
        // 32 bytes but not 32 ASCII characters.
        assert!(validate_ja3("ada70206e40642a3e4461f355032ééé").is_err());
        let long = "a".repeat(100);
        assert_eq!(
            validate_ja3(&long),
            Err(format!(
                "must be 32 hex characters (a JA3 MD5), got \"{}\"... (100 bytes)",
                "a".repeat(64)
            ))
        );
    }
}
