//! `tls: { minVersion, maxVersion, cipherSuites, groups, preferServerCipherOrder,
//! sessionTickets, ticketKeyRotationS, sessionCacheSize }` on listeners and terminating routes
//! (docs/proxy.md: TLS versions, suites, groups and resumption). A route's `tls` replaces its listener's for that route, as its `mtls` does.

use super::error::Issues;
use super::value::{self as v, field, index, join};
use crate::tls::options::{
    default_group_names, group_by_name, provider_has_group, suite_by_name, TlsOptions, TlsVersion,
    MAX_ROTATION_S, SUITES,
};
use serde_json::Value;

/// The fields of a `tls` object.
pub(crate) const TLS_FIELDS: &[&str] = &[
    "minVersion",
    "maxVersion",
    "cipherSuites",
    "groups",
    "preferServerCipherOrder",
    "sessionTickets",
    "ticketKeyRotationS",
    "sessionCacheSize",
];

/// Largest `sessionCacheSize` (entries of a few hundred bytes each).
pub(crate) const MAX_SESSION_CACHE_SIZE: u64 = 1_000_000;

fn version(val: &Value, path: &str, issues: &mut Issues) -> Option<TlsVersion> {
    let s = v::string(val, path, issues)?;
    if let Some(ver) = TlsVersion::parse(s) {
        return Some(ver);
    }
    let why = match s {
        "TLSv1" | "TLSv1.0" | "TLSv1.1" | "SSLv3" => {
            " (TLS 1.0 and 1.1 are deprecated, RFC 8996, and not implemented by rustls)"
        }
        _ => "",
    };
    issues.push(
        path,
        format!("must be one of 'TLSv1.2', 'TLSv1.3', got {s:?}{why}"),
    );
    None
}

/// The names list of `cipherSuites` / `groups`: a non-empty array of unique known names, each
/// resolved by `lookup` to a code point (or an error sentence).
fn names(
    val: &Value,
    path: &str,
    issues: &mut Issues,
    lookup: impl Fn(&str) -> Result<u16, String>,
) -> Option<Vec<u16>> {
    let arr = v::array(val, path, issues)?;
    let before = issues.len();
    if arr.is_empty() {
        issues.push(
            path,
            "must name at least one (leave it out for the defaults)",
        );
    }
    let mut out: Vec<u16> = Vec::with_capacity(arr.len());
    for (i, x) in arr.iter().enumerate() {
        let p = index(path, i);
        let Some(s) = v::string(x, &p, issues) else {
            continue;
        };
        match lookup(s) {
            Ok(code) if out.contains(&code) => issues.push(
                p,
                format!("{s:?} is listed twice (under this or another name)"),
            ),
            Ok(code) => out.push(code),
            Err(e) => issues.push(p, e),
        }
    }
    (issues.len() == before).then_some(out)
}

fn lookup_suite(s: &str) -> Result<u16, String> {
    if let Some(n) = suite_by_name(s) {
        return Ok(u16::from(n.suite));
    }
    let why = if s.contains("CBC") || s.ends_with("-SHA") || s.ends_with("_SHA") {
        "CBC suites are not offered (rustls implements AEAD suites only); "
    } else {
        ""
    };
    let known: Vec<_> = SUITES.iter().map(|n| n.iana).collect();
    Err(format!(
        "unknown cipher suite {s:?}: {why}expected an IANA name ({}) or its OpenSSL name (e.g. 'ECDHE-RSA-AES128-GCM-SHA256')",
        known.join(", ")
    ))
}

fn lookup_group(s: &str) -> Result<u16, String> {
    match group_by_name(s) {
        Some(g) if provider_has_group(g.group) => Ok(u16::from(g.group)),
        Some(_) => Err(format!(
            "{s:?} is not implemented by this build's crypto provider (offered: {})",
            default_group_names().join(", ")
        )),
        None => Err(format!(
            "unknown group {s:?}: expected one of 'X25519MLKEM768', 'X25519', 'secp256r1' (P-256, prime256v1), 'secp384r1' (P-384)"
        )),
    }
}

/// Parses a `tls` object at `path` (every issue recorded; `None` when any).
pub(crate) fn parse_tls(val: &Value, path: &str, issues: &mut Issues) -> Option<TlsOptions> {
    let obj = v::object(val, path, issues)?;
    let before = issues.len();
    v::reject_unknown(obj, TLS_FIELDS, path, issues);
    let mut o = TlsOptions::default();
    let min = field(obj, "minVersion").and_then(|x| version(x, &join(path, "minVersion"), issues));
    let max = field(obj, "maxVersion").and_then(|x| version(x, &join(path, "maxVersion"), issues));
    o.min_version = min.unwrap_or(o.min_version);
    o.max_version = max.unwrap_or(o.max_version);
    if o.min_version > o.max_version {
        let (p, other) = match max {
            Some(_) => ("maxVersion", "minVersion"),
            None => ("minVersion", "maxVersion"),
        };
        issues.push(
            join(path, p),
            format!(
                "{} is older than {other} {} (minVersion must not be newer than maxVersion)",
                o.max_version.name(),
                o.min_version.name()
            ),
        );
    }
    let suites_path = join(path, "cipherSuites");
    o.cipher_suites =
        field(obj, "cipherSuites").and_then(|x| names(x, &suites_path, issues, lookup_suite));
    let groups_path = join(path, "groups");
    o.groups = field(obj, "groups").and_then(|x| names(x, &groups_path, issues, lookup_group));
    for (key, slot) in [
        ("preferServerCipherOrder", &mut o.prefer_server_cipher_order),
        ("sessionTickets", &mut o.session_tickets),
    ] {
        if let Some(b) = field(obj, key).and_then(|b| v::boolean(b, &join(path, key), issues)) {
            *slot = b;
        }
    }
    if let Some(n) = field(obj, "ticketKeyRotationS").and_then(|n| {
        let p = join(path, "ticketKeyRotationS");
        v::number_in(n, &p, 1.0, MAX_ROTATION_S as f64, true, issues)
    }) {
        o.ticket_key_rotation_s = n as u64;
    }
    if let Some(n) = field(obj, "sessionCacheSize").and_then(|n| {
        let p = join(path, "sessionCacheSize");
        v::number_in(n, &p, 0.0, MAX_SESSION_CACHE_SIZE as f64, true, issues)
    }) {
        o.session_cache_size = n as usize;
    }
    if issues.len() != before {
        return None;
    }
    // Combinations: every allowed version needs a suite, and TLS 1.2 an ECDHE group.
    if let Some(list) = &o.cipher_suites {
        for ver in o.versions() {
            let has = SUITES
                .iter()
                .any(|n| n.version == ver && list.contains(&u16::from(n.suite)));
            if !has {
                issues.push(
                    &suites_path,
                    format!(
                        "names no {} suite but {} is allowed (minVersion {}, maxVersion {}): add one or narrow the versions",
                        ver.name(),
                        ver.name(),
                        o.min_version.name(),
                        o.max_version.name()
                    ),
                );
            }
        }
    }
    if let Some(list) = &o.groups {
        let tls12_group = list
            .iter()
            .any(|&c| group_by_name_code(c).is_some_and(|g| g.tls12));
        if o.min_version == TlsVersion::Tls12 && !tls12_group {
            issues.push(
                &groups_path,
                "names only TLS 1.3 groups but TLSv1.2 is allowed: add 'X25519' or 'secp256r1', or set minVersion 'TLSv1.3'",
            );
        }
    }
    if issues.len() != before {
        return None;
    }
    if let Err(e) = o.provider() {
        issues.push(path, e);
        return None;
    }
    Some(o)
}

fn group_by_name_code(code: u16) -> Option<&'static crate::tls::options::GroupName> {
    crate::tls::options::GROUPS
        .iter()
        .find(|g| u16::from(g.group) == code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<TlsOptions, Vec<(String, String)>> {
        let mut issues = Issues::default();
        let o = parse_tls(&v, "listeners[0].tls", &mut issues);
        match o {
            Some(o) if issues.is_empty() => Ok(o),
            _ => Err(issues.0.into_iter().map(|i| (i.path, i.message)).collect()),
        }
    }

    #[test]
    fn defaults_are_todays() {
        let o = parse(json!({})).unwrap();
        assert_eq!(o, TlsOptions::default());
        assert_eq!(
            (o.min_version, o.max_version, o.prefer_server_cipher_order),
            (TlsVersion::Tls12, TlsVersion::Tls13, false)
        );
    }

    #[test]
    fn names_and_aliases() {
        let o = parse(json!({
            "minVersion": "TLSv1.3",
            "cipherSuites": ["TLS_CHACHA20_POLY1305_SHA256", "TLS_AES_128_GCM_SHA256"],
            "groups": ["P-384", "X25519"],
            "preferServerCipherOrder": true,
            "sessionTickets": false,
            "ticketKeyRotationS": 30,
            "sessionCacheSize": 0,
        }))
        .unwrap();
        assert_eq!(o.ticket_key_rotation_s, 30);
        assert_eq!(o.min_version, TlsVersion::Tls13);
        assert_eq!(o.cipher_suites, Some(vec![0x1303, 0x1301]));
        assert_eq!(o.groups, Some(vec![0x0018, 0x001d]));
        assert!(o.prefer_server_cipher_order && !o.session_tickets);
        assert_eq!(o.session_cache_size, 0);
        let o = parse(json!({ "cipherSuites": [
            "ECDHE-RSA-AES128-GCM-SHA256", "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
            "TLS_AES_256_GCM_SHA384"] }))
        .unwrap();
        assert_eq!(o.cipher_suites, Some(vec![0xc02f, 0xc02c, 0x1302]));
    }

    #[test]
    fn every_bad_field_is_named() {
        let got = parse(json!({
            "minVersion": "TLSv1.1",
            "maxVersion": "tls1.3",
            "cipherSuites": ["ECDHE-RSA-AES128-SHA", "TLS_AES_128_GCM_SHA256", "TLS_AES_128_GCM_SHA256", 7],
            "groups": ["X448"],
            "preferServerCipherOrder": "yes",
            "sessionCacheSize": -1,
            "ticketKeyRotationS": 0.5,
            "ocsp": true,
        }))
        .unwrap_err();
        let paths: Vec<_> = got.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(
            paths,
            [
                "listeners[0].tls.ocsp",
                "listeners[0].tls.minVersion",
                "listeners[0].tls.maxVersion",
                "listeners[0].tls.cipherSuites[0]",
                "listeners[0].tls.cipherSuites[2]",
                "listeners[0].tls.cipherSuites[3]",
                "listeners[0].tls.groups[0]",
                "listeners[0].tls.preferServerCipherOrder",
                "listeners[0].tls.ticketKeyRotationS",
                "listeners[0].tls.sessionCacheSize",
            ]
        );
        assert_eq!(got[1].1, "must be one of 'TLSv1.2', 'TLSv1.3', got \"TLSv1.1\" (TLS 1.0 and 1.1 are deprecated, RFC 8996, and not implemented by rustls)");
        assert!(
            got[3].1.starts_with(
                "unknown cipher suite \"ECDHE-RSA-AES128-SHA\": CBC suites are not offered"
            ),
            "{}",
            got[3].1
        );
        assert_eq!(
            got[4].1,
            "\"TLS_AES_128_GCM_SHA256\" is listed twice (under this or another name)"
        );
    }

    #[test]
    fn combinations_that_leave_no_handshake() {
        assert_eq!(
            parse(json!({ "minVersion": "TLSv1.3", "maxVersion": "TLSv1.2" })).unwrap_err(),
            [(
                "listeners[0].tls.maxVersion".to_string(),
                "TLSv1.2 is older than minVersion TLSv1.3 (minVersion must not be newer than maxVersion)".to_string()
            )]
        );
        assert_eq!(
            parse(json!({ "cipherSuites": ["TLS_AES_128_GCM_SHA256"] })).unwrap_err(),
            [(
                "listeners[0].tls.cipherSuites".to_string(),
                "names no TLSv1.2 suite but TLSv1.2 is allowed (minVersion TLSv1.2, maxVersion TLSv1.3): add one or narrow the versions".to_string()
            )]
        );
        assert!(parse(
            json!({ "minVersion": "TLSv1.3", "cipherSuites": ["TLS_AES_128_GCM_SHA256"] })
        )
        .is_ok());
        assert_eq!(
            parse(json!({ "cipherSuites": [] })).unwrap_err(),
            [(
                "listeners[0].tls.cipherSuites".to_string(),
                "must name at least one (leave it out for the defaults)".to_string()
            )]
        );
    }
}
