//! CIDR parsing rules (DESIGN.md §4) with their exact messages, and large-set matching.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use rampart::protection::{parse_cidr, CidrSet};
use std::net::IpAddr;

fn ok(s: &str) -> String {
    parse_cidr(s).unwrap().to_string()
}

fn err(s: &str) -> String {
    parse_cidr(s).unwrap_err()
}

#[test]
fn canonical_forms() {
    assert_eq!(ok("192.0.2.0/24"), "192.0.2.0/24");
    assert_eq!(ok("127.0.0.2"), "127.0.0.2/32");
    assert_eq!(ok("2001:db8::1"), "2001:db8::1/128");
    assert_eq!(ok("2001:0db8:0000::/32"), "2001:db8::/32");
    assert_eq!(ok("0.0.0.0/0"), "0.0.0.0/0");
    assert_eq!(ok("::/0"), "::/0");
}

#[test]
fn ipv4_mapped_means_ipv4() {
    assert_eq!(ok("::ffff:192.0.2.0/120"), "192.0.2.0/24");
    assert_eq!(ok("::ffff:192.0.2.7"), "192.0.2.7/32");
    assert_eq!(ok("::ffff:0.0.0.0/96"), "0.0.0.0/0");
    assert_eq!(ok("::ffff:c000:207/128"), "192.0.2.7/32");
}

#[test]
fn host_bits_suggest_the_network() {
    assert_eq!(
        err("10.1.2.3/8"),
        r#"host bits are set in "10.1.2.3/8"; did you mean 10.0.0.0/8?"#
    );
    assert_eq!(
        err("2001:db8::1/32"),
        r#"host bits are set in "2001:db8::1/32"; did you mean 2001:db8::/32?"#
    );
    assert_eq!(
        err("::ffff:10.1.2.3/104"),
        r#"host bits are set in "::ffff:10.1.2.3/104"; did you mean 10.0.0.0/8?"#
    );
}

#[test]
fn out_of_range_prefixes() {
    assert_eq!(
        err("10.0.0.0/33"),
        r#"prefix length 33 is out of range for IPv4 (0-32), got "10.0.0.0/33""#
    );
    assert_eq!(
        err("2001:db8::/129"),
        r#"prefix length 129 is out of range for IPv6 (0-128), got "2001:db8::/129""#
    );
    assert_eq!(
        err("10.0.0.0/99999999999"),
        r#"prefix length 99999999999 is out of range for IPv4 (0-32), got "10.0.0.0/99999999999""#
    );
}

#[test]
fn prefix_lengths_with_leading_zeros_are_refused() {
    for (s, family) in [
        ("10.0.0.0/08", "IPv4: 0-32"),
        ("10.0.0.0/00", "IPv4: 0-32"),
        ("0.0.0.0/00", "IPv4: 0-32"),
        ("10.0.0.0/032", "IPv4: 0-32"),
        ("10.0.0.0/033", "IPv4: 0-32"),
        ("10.1.2.3/08", "IPv4: 0-32"),
        ("::/0128", "IPv6: 0-128"),
        ("::/00", "IPv6: 0-128"),
        ("2001:db8::/032", "IPv6: 0-128"),
        ("::ffff:192.0.2.0/0120", "IPv6: 0-128"),
    ] {
        let p = s.split_once('/').unwrap().1;
        assert_eq!(
            err(s),
            format!(
                "prefix length {p} must be written without leading zeros ({family}), got {s:?}"
            ),
            "{s}"
        );
    }
    // A lone 0 is canonical.
    assert_eq!(ok("10.0.0.0/8"), "10.0.0.0/8");
    assert_eq!(ok("0.0.0.0/0"), "0.0.0.0/0");
    assert_eq!(ok("::/128"), "::/128");
}

#[test]
fn signs_and_spaces_around_the_prefix_length_are_refused() {
    for s in [
        "10.0.0.0/ 8",
        "10.0.0.0/8 ",
        "10.0.0.0/8\t",
        "10.0.0.0/\n8",
        "::/ 0128",
    ] {
        assert_eq!(
            err(s),
            format!("must not contain spaces, got {s:?}"),
            "{s:?}"
        );
    }
    let invalid = |s: &str| {
        format!(
            "must be an IP address or CIDR (e.g. 192.0.2.0/24, 2001:db8::/32 or 192.0.2.7), got {s:?}"
        )
    };
    for s in [
        "10.0.0.0/+8",
        "10.0.0.0/+08",
        "10.0.0.0/-0",
        "::/+0",
        "::/-128",
        "10.0.0.0/0x8",
        "10.0.0.0/8.0",
        "10.0.0.0/\u{0668}", // ARABIC-INDIC DIGIT EIGHT
        "10.0.0.0/８",       // FULLWIDTH DIGIT EIGHT
    ] {
        assert_eq!(err(s), invalid(s), "{s:?}");
    }
}

#[test]
fn spaces_bare_numbers_and_junk() {
    assert_eq!(
        err(" 10.0.0.0/8"),
        r#"must not contain spaces, got " 10.0.0.0/8""#
    );
    assert_eq!(
        err("10.0.0.0 /8"),
        r#"must not contain spaces, got "10.0.0.0 /8""#
    );
    let invalid = |s: &str| {
        format!(
            "must be an IP address or CIDR (e.g. 192.0.2.0/24, 2001:db8::/32 or 192.0.2.7), got {s:?}"
        )
    };
    for s in [
        "10",
        "10/8",
        "",
        "10.0.0.0/",
        "10.0.0.0/-1",
        "10.0.0.0/+8",
        "10.0.0.0/8/8",
        "a.b.c.d",
        "fe80::1%eth0",
        "10.0.0.256",
    ] {
        assert_eq!(err(s), invalid(s), "{s}");
    }
}

#[test]
fn a_hundred_thousand_entries_match_by_binary_search() {
    // 100k disjoint /32s and /24s across 10.0.0.0/8 and 2001:db8::/32.
    let mut nets = Vec::new();
    for i in 0..50_000u32 {
        nets.push(parse_cidr(&format!("10.{}.{}.0/24", i / 256 % 256, i % 256)).unwrap());
        nets.push(parse_cidr(&format!("2001:db8:{:x}::/48", i)).unwrap());
    }
    let set = CidrSet::new(nets);
    assert_eq!(set.len(), 100_000);
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    assert!(set.contains(ip("10.0.0.1")));
    assert!(set.contains(ip("10.195.79.255"))); // i = 49_999 → 10.195.79.0/24
    assert!(!set.contains(ip("10.195.80.0")));
    assert!(set.contains(ip("2001:db8:c34f:ffff::1"))); // 49_999 = 0xc34f
    assert!(!set.contains(ip("2001:db8:c350::1")));
    assert!(!set.contains(ip("11.0.0.0")));
}
