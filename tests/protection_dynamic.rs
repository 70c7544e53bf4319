//! Dynamic blocks (`blockIp` / `unblockIp`): TTL, port scope, replacement, CIDR rules.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use ipnet::IpNet;
use rampart::config::update::parse_block;
use rampart::protection::{parse_cidr, DynamicBlocks};
use serde_json::{json, Value};
use std::net::IpAddr;

const MS: u64 = rampart::clock::NS_PER_MS;
const T0: u64 = 5_000_000 * MS;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn net(s: &str) -> IpNet {
    parse_cidr(s).unwrap()
}

#[test]
fn block_requests_parse_with_the_cidr_rules_and_the_ttl_rule() {
    let d = DynamicBlocks::new();
    let req = |cidr: &str, opts: Value| parse_block(cidr, &opts, &[]);
    let r = req("192.0.2.7", Value::Null).unwrap();
    assert_eq!(r.net.to_string(), "192.0.2.7/32");
    d.block(r.net, r.ttl_ms, r.reason, r.port, T0);
    let r = req("::ffff:198.51.100.0/120", Value::Null).unwrap();
    assert_eq!(r.net.to_string(), "198.51.100.0/24");
    d.block(r.net, r.ttl_ms, r.reason, r.port, T0);
    let e = req("10.1.2.3/8", Value::Null).unwrap_err();
    assert_eq!(e.issues.len(), 1);
    assert_eq!(e.issues[0].path, "cidr");
    assert_eq!(
        e.issues[0].message,
        r#"host bits are set in "10.1.2.3/8"; did you mean 10.0.0.0/8?"#
    );
    // Every problem at once: the CIDR and the TTL.
    let e = req("10.1.2.3/8", json!({"ttlMs": 0})).unwrap_err();
    let paths: Vec<&str> = e.issues.iter().map(|i| i.path.as_str()).collect();
    assert_eq!(paths, ["cidr", "opts.ttlMs"]);
    assert!(req("192.0.2.0/33", Value::Null).is_err());
    assert!(d.matches(ip("198.51.100.200"), 443, T0));
    assert!(!d.matches(ip("198.51.101.1"), 443, T0));
    assert!(!d.matches(ip("10.1.2.3"), 443, T0));
}

#[test]
fn ttl_expires_exactly() {
    let d = DynamicBlocks::new();
    d.block(net("203.0.113.0/24"), Some(250), None, None, T0);
    assert!(d.matches(ip("203.0.113.1"), 1, T0 + 250 * MS - 1));
    assert!(!d.matches(ip("203.0.113.1"), 1, T0 + 250 * MS));
    assert_eq!(d.len(), 1);
    assert_eq!(d.purge_expired(T0 + 250 * MS), 1);
    assert!(d.is_empty());
}

#[test]
fn blocking_again_replaces_ttl_and_note() {
    let d = DynamicBlocks::new();
    d.block(
        net("203.0.113.9"),
        Some(100),
        Some("first".into()),
        None,
        T0,
    );
    d.block(net("203.0.113.9"), None, Some("second".into()), None, T0);
    assert_eq!(d.len(), 1);
    assert!(d.matches(ip("203.0.113.9"), 1, T0 + 3_600_000 * MS));
    let e = d.entries(None, T0);
    assert_eq!(
        (e[0].remaining_ms, e[0].note.as_deref()),
        (None, Some("second"))
    );
    // Purging the old TTL does not remove the replacement.
    assert_eq!(d.purge_expired(T0 + 200 * MS), 0);
    assert_eq!(d.len(), 1);
}

#[test]
fn port_scope_and_unblock() {
    let d = DynamicBlocks::new();
    d.block(net("192.0.2.0/24"), None, None, Some(443), T0);
    d.block(net("192.0.2.0/24"), None, None, Some(8443), T0);
    d.block(net("198.51.100.0/24"), None, None, None, T0);
    assert!(d.matches(ip("192.0.2.1"), 443, T0));
    assert!(d.matches(ip("192.0.2.1"), 8443, T0));
    assert!(!d.matches(ip("192.0.2.1"), 80, T0));
    assert!(d.matches(ip("198.51.100.1"), 80, T0));
    assert_eq!(d.entries(Some(80), T0).len(), 1);
    assert_eq!(d.entries(Some(443), T0).len(), 2);
    // With a port: only that listener's entry.
    assert!(d.unblock(net("192.0.2.0/24"), Some(443)));
    assert!(!d.matches(ip("192.0.2.1"), 443, T0));
    assert!(d.matches(ip("192.0.2.1"), 8443, T0));
    assert!(!d.unblock(net("192.0.2.0/24"), Some(443)));
    // A global entry cannot be carved per port.
    assert!(!d.unblock(net("198.51.100.0/24"), Some(80)));
    // Without a port: every entry of that CIDR.
    d.block(net("192.0.2.0/24"), None, None, None, T0);
    assert!(d.unblock(net("192.0.2.0/24"), None));
    assert!(!d.matches(ip("192.0.2.1"), 8443, T0));
    assert!(!d.unblock(net("192.0.2.0/25"), None));
}

#[test]
fn families_and_prefix_lengths() {
    let d = DynamicBlocks::new();
    d.block(net("::/0"), None, None, None, T0);
    assert!(d.matches(ip("2001:db8::1"), 1, T0));
    assert!(!d.matches(ip("192.0.2.1"), 1, T0));
    d.unblock(net("::/0"), None);
    d.block(net("2001:db8:1::/48"), None, None, None, T0);
    d.block(net("10.0.0.0/8"), None, None, None, T0);
    d.block(net("10.20.30.40"), None, None, None, T0);
    assert!(d.matches(ip("2001:db8:1:ffff::1"), 1, T0));
    assert!(!d.matches(ip("2001:db8:2::1"), 1, T0));
    assert!(d.matches(ip("10.99.0.1"), 1, T0));
    d.unblock(net("10.0.0.0/8"), None);
    assert!(!d.matches(ip("10.99.0.1"), 1, T0));
    assert!(d.matches(ip("10.20.30.40"), 1, T0));
}

#[test]
fn twenty_thousand_blocks_one_by_one() {
    let d = DynamicBlocks::new();
    for i in 0..20_000u32 {
        let a = std::net::Ipv4Addr::from(0x0a00_0000 + i * 2);
        d.block(IpNet::from(IpAddr::V4(a)), None, None, None, T0);
    }
    assert_eq!(d.len(), 20_000);
    for i in 0..20_000u32 {
        assert!(d.matches(IpAddr::V4((0x0a00_0000 + i * 2).into()), 1, T0));
        assert!(!d.matches(IpAddr::V4((0x0a00_0000 + i * 2 + 1).into()), 1, T0));
    }
    for i in (0..20_000u32).step_by(2) {
        let a = std::net::Ipv4Addr::from(0x0a00_0000 + i * 2);
        assert!(d.unblock(IpNet::from(IpAddr::V4(a)), None));
    }
    assert_eq!(d.len(), 10_000);
    assert!(!d.matches(IpAddr::V4(0x0a00_0000.into()), 1, T0));
    assert!(d.matches(IpAddr::V4((0x0a00_0000 + 2).into()), 1, T0));
}
