//! The XDP program run on crafted frames with `BPF_PROG_TEST_RUN` (aya's `TestRun`), against
//! its real maps, plus one real attach on a veth pair in a network namespace.
//!
//! Needs root (CAP_BPF + CAP_NET_ADMIN) and the object built by build.rs; otherwise (not root,
//! object not built, kernel refuses BPF with EPERM, no veth pair for the attach test) each test
//! prints `SKIPPED <test>: <why>` past the output capture, and under CI (`CI=true`) fails instead
//! (`tests/common/prereq.rs`). A verifier rejection is always a failure. Every test loads its own program and maps pinned under
//! `/sys/fs/bpf/rampart-test-<pid>/v<ABI>/<test>/`, so tests run in parallel without sharing
//! state, and removes its pins when done.
//!
//! Time: the program reads `bpf_ktime_get_ns`, which advances for real during a test. Exact
//! assertions rely on margins of seconds (a SYN limit of 1/s with burst B: the B+1-th SYN sent
//! within the same second is excess), never on sleeps.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;
use common::prereq;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;

use rampart::clock::now_ns;
use rampart::protection::DynamicBlocks;
use rampart::xdp::abi::counter;
use rampart::xdp::manager::{XDP_DROP, XDP_PASS};
use rampart::xdp::{
    object_available, BanReason, XdpCounters, XdpError, XdpManager, XdpPolicy, XdpPortPolicy,
};

const SEC: u64 = rampart::clock::NS_PER_SEC;

// ---------------------------------------------------------------- harness

struct Loaded(Option<XdpManager>);

impl std::ops::Deref for Loaded {
    type Target = XdpManager;
    fn deref(&self) -> &XdpManager {
        self.0.as_ref().expect("manager present until drop")
    }
}

impl Loaded {
    /// The manager, for an explicit `detach` (the guard then does nothing).
    fn take(mut self) -> XdpManager {
        self.0.take().expect("manager present until drop")
    }
}

impl Drop for Loaded {
    fn drop(&mut self) {
        if let Some(m) = self.0.take() {
            m.detach().expect("detach removes the pins");
        }
    }
}

fn pin_root() -> PathBuf {
    PathBuf::from(format!("/sys/fs/bpf/rampart-test-{}", std::process::id()))
}

fn skip_reason() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root (BPF needs CAP_BPF + CAP_NET_ADMIN)".to_string());
    }
    object_available().err().map(|e| e.to_string())
}

/// Loads a fresh program + maps for one test (pinned under `name`), or says why the test cannot
/// run ([`prereq::skip_or_fail`]: a visible skip, a failure under CI) and returns `None`.
fn load(name: &str) -> Option<Loaded> {
    if let Some(why) = skip_reason() {
        prereq::skip_or_fail(why);
        return None;
    }
    match XdpManager::load_unattached(&pin_root(), name) {
        Ok(m) => Some(Loaded(Some(m))),
        Err(e @ (XdpError::PermissionDenied { .. } | XdpError::BpfFs { .. })) => {
            prereq::skip_or_fail(format!("the kernel refuses BPF here: {e}"));
            None
        }
        Err(e) => panic!("loading the XDP program failed: {e}"),
    }
}

// ---------------------------------------------------------------- frames

const SYN: u8 = 0x02;
const ACK: u8 = 0x10;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn net(s: &str) -> ipnet::IpNet {
    s.parse().unwrap()
}

fn tcp(dport: u16, flags: u8) -> Vec<u8> {
    let mut t = vec![0u8; 20];
    t[0..2].copy_from_slice(&40000u16.to_be_bytes());
    t[2..4].copy_from_slice(&dport.to_be_bytes());
    t[12] = 5 << 4;
    t[13] = flags;
    t[14..16].copy_from_slice(&64240u16.to_be_bytes());
    t
}

/// IPv4 header (no options) + payload; `frag` is the raw flags/fragment-offset field.
fn ipv4(src: Ipv4Addr, proto: u8, frag: u16, payload: &[u8]) -> Vec<u8> {
    let mut h = vec![0u8; 20];
    h[0] = 0x45;
    h[2..4].copy_from_slice(&((20 + payload.len()) as u16).to_be_bytes());
    h[6..8].copy_from_slice(&frag.to_be_bytes());
    h[8] = 64;
    h[9] = proto;
    h[12..16].copy_from_slice(&src.octets());
    h[16..20].copy_from_slice(&[198, 51, 100, 1]);
    h.extend_from_slice(payload);
    h
}

/// IPv6 header + payload (`nexthdr` names the first header of `payload`).
fn ipv6(src: Ipv6Addr, nexthdr: u8, payload: &[u8]) -> Vec<u8> {
    let mut h = vec![0u8; 40];
    h[0] = 0x60;
    h[4..6].copy_from_slice(&(payload.len() as u16).to_be_bytes());
    h[6] = nexthdr;
    h[7] = 64;
    h[8..24].copy_from_slice(&src.octets());
    h[24..40].copy_from_slice(&"2001:db8:ffff::1".parse::<Ipv6Addr>().unwrap().octets());
    h.extend_from_slice(payload);
    h
}

/// An 8-byte IPv6 options header (hop-by-hop / destination options) followed by `rest`.
fn v6_opts(next: u8, rest: &[u8]) -> Vec<u8> {
    let mut h = vec![next, 0, 1, 4, 0, 0, 0, 0]; // PadN filling the 8 bytes
    h.extend_from_slice(rest);
    h
}

/// An IPv6 fragment header (offset in 8-byte units) followed by `rest`.
fn v6_frag(next: u8, offset: u16, more: bool, rest: &[u8]) -> Vec<u8> {
    let field = (offset << 3) | u16::from(more);
    let mut h = vec![next, 0, 0, 0, 0, 0, 0, 7];
    h[2..4].copy_from_slice(&field.to_be_bytes());
    h.extend_from_slice(rest);
    h
}

/// Ethernet with the given VLAN TPIDs (outermost first), then `ethertype` and `l3`.
fn eth(vlans: &[u16], ethertype: u16, l3: &[u8]) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
    for (i, tpid) in vlans.iter().enumerate() {
        f.extend_from_slice(&tpid.to_be_bytes());
        f.extend_from_slice(&(100 + i as u16).to_be_bytes());
    }
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(l3);
    f
}

/// A TCP segment to `port` with `flags` from `src`, IPv4 or IPv6.
fn segment(src: &str, port: u16, flags: u8) -> Vec<u8> {
    match ip(src) {
        IpAddr::V4(v4) => eth(&[], 0x0800, &ipv4(v4, 6, 0, &tcp(port, flags))),
        IpAddr::V6(v6) => eth(&[], 0x86dd, &ipv6(v6, 6, &tcp(port, flags))),
    }
}

fn syn(src: &str, port: u16) -> Vec<u8> {
    segment(src, port, SYN)
}

fn v4(src: &str) -> Ipv4Addr {
    src.parse().unwrap()
}

fn v6(src: &str) -> Ipv6Addr {
    src.parse().unwrap()
}

fn port(p: u16) -> XdpPortPolicy {
    XdpPortPolicy {
        port: p,
        syn_per_second: None,
        syn_burst: 1,
        penalty_ns: 600 * SEC,
        allow: Vec::new(),
        block: Vec::new(),
        ipv6_prefix_len: 64,
        ban_rate: None,
        syn_budget_per_second: None,
    }
}

fn run(m: &XdpManager, frame: &[u8]) -> u32 {
    m.test_run(frame).expect("BPF_PROG_TEST_RUN")
}

fn verdict(v: u32) -> &'static str {
    match v {
        XDP_DROP => "drop",
        XDP_PASS => "pass",
        _ => "other",
    }
}

// ---------------------------------------------------------------- tests

#[test]
fn syns_to_protected_ports_are_judged_and_other_ports_pass() {
    let Some(m) = load("protected_ports") else {
        return;
    };
    let mut p = port(443);
    p.block = vec![net("192.0.2.0/24"), net("2001:db8:bad::/48")];
    m.apply_policy(&[p]).unwrap();

    assert_eq!(verdict(run(&m, &syn("192.0.2.7", 443))), "drop");
    assert_eq!(verdict(run(&m, &syn("192.0.2.7", 22))), "pass");
    assert_eq!(verdict(run(&m, &syn("203.0.113.9", 443))), "pass");
    assert_eq!(verdict(run(&m, &syn("2001:db8:bad:1::7", 443))), "drop");
    assert_eq!(verdict(run(&m, &syn("2001:db8:bad:1::7", 22))), "pass");
    assert_eq!(verdict(run(&m, &syn("2001:db8:900d::1", 443))), "pass");
    // Established traffic from a blocked source is never touched (userspace refuses at accept).
    assert_eq!(verdict(run(&m, &segment("192.0.2.7", 443, ACK))), "pass");
    assert_eq!(
        verdict(run(&m, &segment("192.0.2.7", 443, SYN | ACK))),
        "pass"
    );
    // UDP to a protected port is dropped (nonTcp); to another port, and ARP, pass.
    let udp = eth(&[], 0x0800, &ipv4(v4("192.0.2.7"), 17, 0, &tcp(443, SYN)));
    assert_eq!(verdict(run(&m, &udp)), "drop");
    let udp = eth(&[], 0x0800, &ipv4(v4("192.0.2.7"), 17, 0, &tcp(53, 0)));
    assert_eq!(verdict(run(&m, &udp)), "pass");
    let arp = eth(&[], 0x0806, &[0u8; 28]);
    assert_eq!(verdict(run(&m, &arp)), "pass");

    assert_eq!(
        m.status().counters,
        XdpCounters {
            passed: 8,
            dropped_cidr: 2,
            dropped_non_tcp: 1,
            ..XdpCounters::default()
        }
    );
}

#[test]
fn cidr_hit_miss_and_allowlist_override() {
    let Some(m) = load("cidr_allow") else {
        return;
    };
    let mut a = port(443);
    a.block = vec![net("10.0.0.0/8"), net("::/0")];
    a.allow = vec![net("10.1.2.3/32"), net("2001:db8::/32")];
    let mut b = port(8443);
    b.block = vec![net("10.1.2.3/32")];
    m.apply_policy(&[a, b]).unwrap();

    assert_eq!(verdict(run(&m, &syn("10.9.9.9", 443))), "drop"); // hit
    assert_eq!(verdict(run(&m, &syn("11.0.0.1", 443))), "pass"); // miss
    assert_eq!(verdict(run(&m, &syn("10.1.2.3", 443))), "pass"); // allowlist wins
    assert_eq!(verdict(run(&m, &syn("10.1.2.3", 8443))), "drop"); // lists are per port
    assert_eq!(verdict(run(&m, &syn("10.9.9.9", 8443))), "pass");
    // ::/0 blocks every IPv6 source but no IPv4 one (/0 matches its own family only).
    assert_eq!(verdict(run(&m, &syn("2001:db9::1", 443))), "drop");
    assert_eq!(verdict(run(&m, &syn("2001:db8::1", 443))), "pass");
    assert_eq!(verdict(run(&m, &syn("198.51.100.1", 443))), "pass");
    // An IPv4-mapped IPv6 source is treated as IPv4.
    assert_eq!(verdict(run(&m, &syn("::ffff:10.9.9.9", 443))), "drop");

    let c = m.status().counters;
    assert_eq!((c.dropped_cidr, c.passed), (4, 5));
}

#[test]
fn bans_drop_until_their_deadline() {
    let Some(m) = load("bans") else {
        return;
    };
    m.apply_policy(&[port(443)]).unwrap();
    let now = now_ns();
    m.ban(ip("198.51.100.7"), 443, now + 60 * SEC, BanReason::Penalty)
        .unwrap();
    m.ban(ip("198.51.100.8"), 443, now - 1, BanReason::Penalty)
        .unwrap();
    m.ban(ip("198.51.100.9"), 443, now + 60 * SEC, BanReason::Dynamic)
        .unwrap();
    m.ban(
        ip("2001:db8:1:2::5"),
        443,
        now + 60 * SEC,
        BanReason::SynFlood,
    )
    .unwrap();

    assert_eq!(verdict(run(&m, &syn("198.51.100.7", 443))), "drop");
    assert_eq!(verdict(run(&m, &syn("198.51.100.8", 443))), "pass"); // deadline passed
    assert_eq!(verdict(run(&m, &syn("198.51.100.9", 443))), "drop");
    // IPv6 bans cover the source's /64.
    assert_eq!(verdict(run(&m, &syn("2001:db8:1:2::99", 443))), "drop");
    assert_eq!(verdict(run(&m, &syn("2001:db8:1:3::5", 443))), "pass");
    // Bans apply only where the kernel has a policy.
    assert_eq!(verdict(run(&m, &syn("198.51.100.7", 22))), "pass");

    let s = m.status();
    assert_eq!(
        s.counters,
        XdpCounters {
            passed: 3,
            dropped_dynamic: 1,
            dropped_penalty: 1,
            dropped_syn_flood: 1,
            ..XdpCounters::default()
        }
    );
    assert_eq!(
        s.banned_ips,
        vec!["198.51.100.7", "198.51.100.9", "2001:db8:1:2::/64"]
    );
    // A ban never shortens; unban lifts it.
    m.ban(ip("198.51.100.7"), 443, now + SEC, BanReason::Penalty)
        .unwrap();
    let kept = m
        .bans()
        .into_iter()
        .find(|b| b.ip == ip("198.51.100.7"))
        .unwrap();
    assert_eq!(kept.deadline_ns, now + 60 * SEC);
    assert!(m.unban(ip("198.51.100.7"), 443).unwrap());
    assert!(!m.unban(ip("198.51.100.7"), 443).unwrap());
    assert_eq!(verdict(run(&m, &syn("198.51.100.7", 443))), "pass");
    // Sweep removes exactly the expired ban.
    assert_eq!(m.sweep(now), 1);
    assert_eq!(m.bans().len(), 2);
}

#[test]
fn vlan_and_qinq_tagged_frames_are_parsed() {
    let Some(m) = load("vlan") else {
        return;
    };
    let mut p = port(443);
    p.block = vec![net("192.0.2.0/24"), net("2001:db8:bad::/48")];
    m.apply_policy(&[p]).unwrap();
    let l3 = ipv4(v4("192.0.2.1"), 6, 0, &tcp(443, SYN));
    let l3v6 = ipv6(v6("2001:db8:bad::1"), 6, &tcp(443, SYN));

    for tags in [
        &[0x8100u16][..],
        &[0x88a8, 0x8100],
        &[0x8100, 0x8100],
        &[0x88a8, 0x8100, 0x8100],
    ] {
        assert_eq!(
            verdict(run(&m, &eth(tags, 0x0800, &l3))),
            "drop",
            "{tags:x?}"
        );
        assert_eq!(
            verdict(run(&m, &eth(tags, 0x86dd, &l3v6))),
            "drop",
            "{tags:x?}"
        );
    }
    // A fourth tag is beyond the bound: no source read, the frame passes.
    let four = [0x88a8, 0x8100, 0x8100, 0x8100];
    assert_eq!(verdict(run(&m, &eth(&four, 0x0800, &l3))), "pass");
    assert_eq!(m.status().counters.dropped_cidr, 8);
}

#[test]
fn truncated_frames_pass_at_every_length() {
    let Some(m) = load("truncated") else {
        return;
    };
    let mut p = port(443);
    p.block = vec![net("192.0.2.0/24"), net("2001:db8:bad::/48")];
    p.syn_per_second = Some(1);
    p.syn_burst = 1_000;
    m.apply_policy(&[p]).unwrap();

    let clean = [
        syn("203.0.113.5", 443),
        syn("2001:db8:900d::5", 443),
        eth(
            &[0x88a8, 0x8100],
            0x0800,
            &ipv4(v4("203.0.113.5"), 6, 0, &tcp(443, SYN)),
        ),
        eth(
            &[],
            0x86dd,
            &ipv6(
                v6("2001:db8:900d::5"),
                0,
                &v6_opts(60, &v6_opts(6, &tcp(443, SYN))),
            ),
        ),
    ];
    for frame in &clean {
        for len in 0..frame.len() {
            match m.test_run(&frame[..len]) {
                Ok(v) => assert_eq!(verdict(v), "pass", "clean frame cut at {len}"),
                // BPF_PROG_TEST_RUN refuses XDP input shorter than an Ethernet header.
                Err(e) => assert!(len < 14, "len {len}: {e}"),
            }
        }
    }
    // From a blocked source: once the source address is readable but the TCP header is cut,
    // the port is unknown and the frame is dropped as unparsed; a whole SYN is a cidr drop.
    let blocked = syn("192.0.2.9", 443);
    for len in 14..=blocked.len() {
        let got = verdict(run(&m, &blocked[..len]));
        let want = if len < 14 + 20 { "pass" } else { "drop" };
        assert_eq!(got, want, "blocked frame cut at {len}");
    }
    let c = m.status().counters;
    assert_eq!(c.dropped_unparsed, 20);
    assert_eq!(c.dropped_cidr, 1);
}

#[test]
fn syn_limit_drops_exactly_the_over_limit_syns_and_bans() {
    let Some(m) = load("syn_limit") else {
        return;
    };
    let mut p = port(443);
    p.syn_per_second = Some(1); // T = 1 s: the whole test runs within one interval
    p.syn_burst = 3;
    p.penalty_ns = 60 * SEC;
    m.apply_policy(&[p]).unwrap();

    let t0 = now_ns();
    let verdicts: Vec<&str> = (0..6)
        .map(|_| verdict(run(&m, &syn("203.0.113.50", 443))))
        .collect();
    let t1 = now_ns();
    assert_eq!(verdicts, ["pass", "pass", "pass", "drop", "drop", "drop"]);
    // Another source has its own limit; established traffic is not limited.
    assert_eq!(verdict(run(&m, &syn("203.0.113.51", 443))), "pass");
    assert_eq!(verdict(run(&m, &segment("203.0.113.50", 443, ACK))), "pass");

    let ban = m.bans()[0];
    assert_eq!(ban.ip, ip("203.0.113.50"));
    assert_eq!(ban.reason, BanReason::SynFlood);
    assert!(ban.deadline_ns > t0 + 60 * SEC && ban.deadline_ns <= t1 + 60 * SEC);
    // SYNs 5 and 6 were excess while banned: each pushed the deadline forward.
    assert_eq!(m.counter(counter::BANNED), 1);
    assert_eq!(m.counter(counter::BAN_EXTENDED), 2);
    let before = m.bans()[0].deadline_ns;
    assert_eq!(verdict(run(&m, &syn("203.0.113.50", 443))), "drop");
    let after = m.bans()[0].deadline_ns;
    assert!(after > before, "continued excess extends the ban");
    assert!(after <= now_ns() + 60 * SEC);

    let c = m.status().counters;
    assert_eq!((c.passed, c.dropped_syn_flood), (5, 4));
    assert_eq!(m.status().banned_ips, vec!["203.0.113.50"]);
}

#[test]
fn a_boxed_source_is_debited_by_conforming_syns_and_extended_by_excess() {
    let Some(m) = load("box_extend") else {
        return;
    };
    let mut p = port(443);
    p.syn_per_second = Some(1);
    p.syn_burst = 3;
    p.penalty_ns = 60 * SEC;
    m.apply_policy(&[p]).unwrap();

    // Boxed by userspace until now + 10 s: the ban starts as the box did, with its burst just
    // exceeded (TAT = write time + tau + T = + 3 s).
    let t_ban = now_ns();
    let boxed_until = t_ban + 10 * SEC;
    m.ban(ip("203.0.113.60"), 443, boxed_until, BanReason::Penalty)
        .unwrap();
    let tat0 = m.bans()[0].tat_ns;
    assert!(tat0 >= t_ban + 3 * SEC && tat0 <= now_ns() + 3 * SEC);
    // A SYN within T is excess: the deadline moves to now + penalty; nothing is debited.
    let t = now_ns();
    assert_eq!(verdict(run(&m, &syn("203.0.113.60", 443))), "drop");
    let ban = m.bans()[0];
    assert!(ban.deadline_ns > t + 60 * SEC && ban.deadline_ns <= now_ns() + 60 * SEC);
    assert_eq!(ban.reason, BanReason::Penalty);
    assert_eq!(ban.tat_ns, tat0);
    // A re-ban by userspace with an earlier deadline keeps the kernel's later one and its TAT.
    m.ban(ip("203.0.113.60"), 443, boxed_until, BanReason::Penalty)
        .unwrap();
    assert_eq!(m.bans()[0].deadline_ns, ban.deadline_ns);
    assert_eq!(m.bans()[0].tat_ns, tat0);
    assert_eq!(verdict(run(&m, &syn("203.0.113.60", 443))), "drop");
    // The per-source SYN state is not touched while banned.
    assert_eq!(m.syn_tat(ip("203.0.113.60"), 443), None);

    let c = m.status().counters;
    assert_eq!((c.dropped_penalty, c.dropped_syn_flood), (2, 0));
    assert_eq!(m.counter(counter::BAN_EXTENDED), 2);
}

#[test]
fn unreadable_ports_from_blocked_sources_are_dropped() {
    let Some(m) = load("unparsed") else {
        return;
    };
    let mut p = port(443);
    p.block = vec![net("192.0.2.0/24"), net("2001:db8:bad::/48")];
    m.apply_policy(&[p]).unwrap();
    m.ban(
        ip("198.51.100.77"),
        443,
        now_ns() + 60 * SEC,
        BanReason::Penalty,
    )
    .unwrap();

    let frag4 = |src: &str| eth(&[], 0x0800, &ipv4(v4(src), 6, 185, &[0u8; 24]));
    assert_eq!(verdict(run(&m, &frag4("192.0.2.1"))), "drop"); // blocklisted
    assert_eq!(verdict(run(&m, &frag4("198.51.100.77"))), "drop"); // banned
    assert_eq!(verdict(run(&m, &frag4("203.0.113.1"))), "pass"); // clean
                                                                 // A first fragment (MF set, offset 0) carries the TCP header: judged normally.
    let first = eth(
        &[],
        0x0800,
        &ipv4(v4("192.0.2.1"), 6, 0x2000, &tcp(443, SYN)),
    );
    assert_eq!(verdict(run(&m, &first)), "drop");
    // IPv6 fragment header with a non-zero offset.
    let frag6 = |src: &str| {
        eth(
            &[],
            0x86dd,
            &ipv6(v6(src), 44, &v6_frag(6, 3, false, &[0; 16])),
        )
    };
    assert_eq!(verdict(run(&m, &frag6("2001:db8:bad::1"))), "drop");
    assert_eq!(verdict(run(&m, &frag6("2001:db8:900d::1"))), "pass");
    // Encapsulation: GRE and IP-in-IP hide the inner port.
    let gre = eth(&[], 0x0800, &ipv4(v4("192.0.2.1"), 47, 0, &[0u8; 24]));
    assert_eq!(verdict(run(&m, &gre)), "drop");
    let ipip = eth(&[], 0x0800, &ipv4(v4("203.0.113.1"), 4, 0, &[0u8; 24]));
    assert_eq!(verdict(run(&m, &ipip)), "pass");
    // More IPv6 extension headers than the bound: unparsed.
    let mut chain = tcp(443, SYN);
    for _ in 0..9 {
        chain = v6_opts(if chain.len() == 20 { 6 } else { 60 }, &chain);
    }
    let deep = |src: &str| eth(&[], 0x86dd, &ipv6(v6(src), 60, &chain));
    assert_eq!(verdict(run(&m, &deep("2001:db8:bad::2"))), "drop");
    assert_eq!(verdict(run(&m, &deep("2001:db8:900d::2"))), "pass");
    // Within the bound the SYN is read and judged.
    let mut short = tcp(443, SYN);
    for _ in 0..7 {
        short = v6_opts(if short.len() == 20 { 6 } else { 60 }, &short);
    }
    let ok = eth(&[], 0x86dd, &ipv6(v6("2001:db8:bad::3"), 60, &short));
    assert_eq!(verdict(run(&m, &ok)), "drop");

    let c = m.status().counters;
    assert_eq!((c.dropped_unparsed, c.dropped_cidr, c.passed), (5, 2, 4));
}

#[test]
fn a_policy_swap_is_all_or_nothing() {
    let Some(m) = load("swap") else {
        return;
    };
    let mut a = port(443);
    a.block = vec![net("192.0.2.0/24")];
    m.apply_policy(&[a]).unwrap();
    let live = m.live_set().unwrap();

    // Stage B: 443 unprotected listener, 8443 blocking another range.
    let mut b = port(8443);
    b.block = vec![net("198.51.100.0/24")];
    let policy_b = XdpPolicy {
        ports: vec![b],
        listener_ports: vec![443],
        ipv6_prefix_len: 64,
        drop_fragments: false,
    };
    m.stage(&policy_b).unwrap();
    assert_eq!(m.live_set().unwrap(), live, "staging does not flip");
    assert_eq!(verdict(run(&m, &syn("192.0.2.1", 443))), "drop");
    assert_eq!(verdict(run(&m, &syn("198.51.100.1", 8443))), "pass");

    m.commit().unwrap();
    assert_eq!(m.live_set().unwrap(), 1 - live, "one index write");
    assert_eq!(verdict(run(&m, &syn("192.0.2.1", 443))), "pass");
    assert_eq!(verdict(run(&m, &syn("198.51.100.1", 8443))), "drop");

    // An invalid policy changes nothing.
    let mut bad = port(8443);
    bad.syn_per_second = Some(5);
    bad.syn_burst = 0;
    let err = m.apply_policy(&[port(443), bad]).unwrap_err();
    assert!(err.to_string().contains("port 8443: syn_burst"), "{err}");
    assert_eq!(m.live_set().unwrap(), 1 - live);
    assert_eq!(verdict(run(&m, &syn("198.51.100.1", 8443))), "drop");

    // Swapping back reuses the idle set (only differences written) and flips again.
    let mut a = port(443);
    a.block = vec![net("192.0.2.0/24")];
    m.apply_policy(&[a]).unwrap();
    assert_eq!(m.live_set().unwrap(), live);
    assert_eq!(verdict(run(&m, &syn("192.0.2.1", 443))), "drop");
    assert_eq!(verdict(run(&m, &syn("198.51.100.1", 8443))), "pass");
    // An empty policy lets everything through.
    m.apply_policy(&[]).unwrap();
    assert_eq!(verdict(run(&m, &syn("192.0.2.1", 443))), "pass");
    let c = m.status().counters;
    assert_eq!((c.dropped_cidr, c.passed), (4, 4));
}

#[test]
fn dynamic_blocks_cover_listeners_until_their_deadline() {
    let Some(m) = load("dynamic") else {
        return;
    };
    let mut protected = port(443);
    protected.allow = vec![net("192.0.2.99/32")];
    m.apply(&XdpPolicy {
        ports: vec![protected],
        listener_ports: vec![8080],
        ipv6_prefix_len: 64,
        drop_fragments: false,
    })
    .unwrap();
    // The kernel's trie is derived from the engine's one set of `blockIp` entries.
    let now = now_ns();
    let blocks = DynamicBlocks::new();
    blocks.block(net("192.0.2.0/24"), Some(60_000), None, None, now);
    blocks.block(net("198.51.100.0/24"), None, None, Some(8080), now);
    blocks.block(net("203.0.113.0/24"), Some(1), None, None, now - 2_000_000); // expired
    blocks.block(net("2001:db8:d::/48"), None, None, None, now);
    m.sync_dynamic(&blocks.rules(None, now)).unwrap();

    assert_eq!(verdict(run(&m, &syn("192.0.2.1", 443))), "drop");
    assert_eq!(verdict(run(&m, &syn("192.0.2.1", 8080))), "drop"); // unprotected listener
    assert_eq!(verdict(run(&m, &syn("192.0.2.1", 22))), "pass"); // not a listener
    assert_eq!(verdict(run(&m, &syn("192.0.2.99", 443))), "pass"); // allowlist skips it
    assert_eq!(verdict(run(&m, &syn("198.51.100.1", 8080))), "drop");
    assert_eq!(verdict(run(&m, &syn("198.51.100.1", 443))), "pass"); // other port
    assert_eq!(verdict(run(&m, &syn("203.0.113.1", 443))), "pass"); // expired
    assert_eq!(verdict(run(&m, &syn("2001:db8:d:1::1", 443))), "drop");
    // A port-specific block still catches that source's unreadable fragments.
    let frag = eth(&[], 0x0800, &ipv4(v4("198.51.100.1"), 6, 185, &[0u8; 24]));
    assert_eq!(verdict(run(&m, &frag)), "drop");

    // A nested shorter deadline does not hide the longer one.
    blocks.block(net("192.0.2.1/32"), Some(1), None, None, now);
    m.sync_dynamic(&blocks.rules(None, now)).unwrap();
    assert_eq!(verdict(run(&m, &syn("192.0.2.1", 443))), "drop");
    assert!(blocks.unblock(net("192.0.2.0/24"), None));
    // The /32 expired 1 ms after `now`: at `now + 2 ms` only two rules are live.
    let later = now + 2_000_000;
    assert_eq!(blocks.rules(None, later).len(), 2);
    m.sync_dynamic(&blocks.rules(None, later)).unwrap();
    assert_eq!(verdict(run(&m, &syn("192.0.2.1", 443))), "pass");
    // Keys: 198.51.100.0/24 at scope 8080 and 0, 2001:db8:d::/48 at scope 0 (+ IPv4 marker
    // for neither: no IPv6 rule covers the mapped range).
    assert_eq!(m.dynamic_keys(), 3);
    m.sync_dynamic(&[]).unwrap();
    assert_eq!(m.dynamic_keys(), 0);

    let c = m.status().counters;
    assert_eq!((c.dropped_dynamic, c.dropped_unparsed), (5, 1));
}

#[test]
fn pins_from_another_layout_are_refused() {
    let Some(m) = load("stale") else {
        return;
    };
    let dir = m.pin_dir().to_path_buf();
    // Forge a pin written by "another build": same directory, different ABI in rampart_meta.
    {
        let data = aya::maps::MapData::from_pin(dir.join("rampart_meta")).unwrap();
        let mut meta: aya::maps::Array<_, rampart::xdp::abi::RampartMeta> =
            aya::maps::Array::try_from(aya::maps::Map::Array(data)).unwrap();
        let forged = rampart::xdp::abi::RampartMeta {
            abi_version: 0,
            layout: 7,
        };
        meta.set(0, forged, 0).unwrap();
    }
    let err = XdpManager::load_unattached(&pin_root(), "stale").unwrap_err();
    drop(m); // detaches and removes the pins
    assert!(matches!(err, XdpError::StalePins { .. }), "{err}");
    assert!(
        err.to_string().contains("rampart_meta holds ABI 0"),
        "{err}"
    );
    assert!(!dir.exists());
}

#[test]
fn pins_with_another_map_definition_are_refused() {
    let Some(m) = load("mismatch_src") else {
        return;
    };
    // Pin the SYN-state map (key 20, value 8) where another build's loader would look for the
    // ban map (key 16, value 16).
    let target = pin_root()
        .join(format!("v{}", rampart::xdp::abi::ABI_VERSION))
        .join("mismatch");
    std::fs::create_dir_all(&target).unwrap();
    aya::maps::MapData::from_pin(m.pin_dir().join("rampart_syn"))
        .unwrap()
        .pin(target.join("rampart_bans"))
        .unwrap();
    let err = XdpManager::load_unattached(&pin_root(), "mismatch").unwrap_err();
    std::fs::remove_file(target.join("rampart_bans")).unwrap();
    std::fs::remove_dir(&target).unwrap();
    assert!(matches!(err, XdpError::StalePins { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("rampart_bans is Some(LruHash) key 20 value 8"),
        "{text}"
    );
    assert!(text.contains("expects LruHash key 16 value 24"), "{text}");
}

#[test]
fn ipv6_sources_share_bans_by_the_configured_prefix() {
    let Some(m) = load("ipv6_prefix") else {
        return;
    };
    let later = now_ns() + 60 * SEC;
    for (prefix, banned, same, other) in [
        (60, "2001:db8:1:2::5", "2001:db8:1:f::1", "2001:db8:1:10::1"),
        (
            100,
            "2001:db8::1:2:3:4",
            "2001:db8::1:2:fff:ffff",
            "2001:db8::1:2:1000:0",
        ),
        (128, "2001:db8::7", "2001:db8::7", "2001:db8::8"),
    ] {
        let mut p = port(443);
        p.ipv6_prefix_len = prefix;
        m.apply(&XdpPolicy {
            ports: vec![p],
            listener_ports: Vec::new(),
            ipv6_prefix_len: prefix,
            drop_fragments: false,
        })
        .unwrap();
        m.ban(ip(banned), 443, later, BanReason::Penalty).unwrap();
        // The kernel masks the packet's source exactly as the loader masked the ban key.
        assert_eq!(verdict(run(&m, &syn(same, 443))), "drop", "/{prefix}");
        assert_eq!(verdict(run(&m, &syn(other, 443))), "pass", "/{prefix}");
        assert!(m.unban(ip(same), 443).unwrap(), "/{prefix}");
    }
    assert_eq!(m.status().counters.dropped_penalty, 3);
}

#[test]
fn each_port_bans_ipv6_by_its_own_prefix_and_a_ban_records_its_port() {
    let Some(m) = load("ipv6_per_port") else {
        return;
    };
    let (mut a, mut b) = (port(443), port(8443));
    a.ipv6_prefix_len = 48;
    b.ipv6_prefix_len = 64;
    m.apply(&XdpPolicy {
        ports: vec![a, b],
        listener_ports: Vec::new(),
        ipv6_prefix_len: 48,
        drop_fragments: false,
    })
    .unwrap();
    let later = now_ns() + 60 * SEC;
    // Banned on 8443 by its /64: another /64 of the same /48 still passes there.
    m.ban(ip("2001:db8:5:1::9"), 8443, later, BanReason::Penalty)
        .unwrap();
    assert_eq!(verdict(run(&m, &syn("2001:db8:5:1::77", 8443))), "drop");
    assert_eq!(verdict(run(&m, &syn("2001:db8:5:2::77", 8443))), "pass");
    // Banned on 443 by its /48: every /64 of that /48 is dropped there.
    m.ban(ip("2001:db8:6:1::9"), 443, later, BanReason::Penalty)
        .unwrap();
    assert_eq!(verdict(run(&m, &syn("2001:db8:6:ffff::1", 443))), "drop");
    let bans = m.bans();
    let shown: Vec<(String, u16)> = bans.iter().map(|b| (b.display(), b.port)).collect();
    assert_eq!(
        shown,
        vec![
            ("2001:db8:5:1::/64".to_string(), 8443),
            ("2001:db8:6::/48".to_string(), 443)
        ]
    );
}

// ---------------------------------------------------------------- real attach

/// Two network namespaces joined by a veth pair: `server` holds `srv_if` (198.18.213.1/30,
/// the RFC 2544 benchmarking range) with the XDP program and the listeners, `client` holds the
/// peer (198.18.213.2/30). Nothing touches the test host's own namespace; removed on drop.
struct VethNs {
    server: String,
    client: String,
    srv_if: String,
}

fn ip_cmd(args: &[&str]) -> Result<String, String> {
    let out = std::process::Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl VethNs {
    fn create() -> Result<VethNs, String> {
        let id = std::process::id();
        let v = VethNs {
            server: format!("rampart-xdp-{id}-s"),
            client: format!("rampart-xdp-{id}-c"),
            srv_if: format!("rpx{id}s"),
        };
        let cli_if = format!("rpx{id}c");
        let (s, c) = (v.server.as_str(), v.client.as_str());
        let steps: [&[&str]; 10] = [
            &["netns", "add", s],
            &["netns", "add", c],
            &[
                "link", "add", &v.srv_if, "netns", s, "type", "veth", "peer", "name", &cli_if,
                "netns", c,
            ],
            &["-n", s, "addr", "add", "198.18.213.1/30", "dev", &v.srv_if],
            &["-n", c, "addr", "add", "198.18.213.2/30", "dev", &cli_if],
            &["-n", s, "link", "set", &v.srv_if, "up"],
            &["-n", c, "link", "set", &cli_if, "up"],
            &["-n", s, "link", "set", "lo", "up"],
            &["-n", c, "link", "set", "lo", "up"],
            &["-n", s, "link", "show", &v.srv_if],
        ];
        for step in steps {
            ip_cmd(step)?; // on error `v` drops and cleans up
        }
        Ok(v)
    }

    /// Runs `f` on a thread that entered namespace `ns` (sockets it opens and interfaces it
    /// names are that namespace's).
    fn run<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> T {
        use std::os::fd::AsRawFd;
        std::thread::scope(|s| {
            s.spawn(|| {
                let file = std::fs::File::open(format!("/run/netns/{ns}")).expect("netns handle");
                // SAFETY: a valid namespace fd; affects only this thread.
                let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
                assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
                f()
            })
            .join()
            .expect("namespace thread")
        })
    }

    fn link(&self) -> String {
        ip_cmd(&["-n", &self.server, "link", "show", "dev", &self.srv_if]).unwrap_or_default()
    }

    /// Whether a TCP connect from the client namespace to the server's `port` completes.
    fn connects(&self, port: u16, timeout_ms: u64) -> bool {
        Self::run(&self.client, || {
            let addr = std::net::SocketAddr::from(([198, 18, 213, 1], port));
            let timeout = std::time::Duration::from_millis(timeout_ms);
            std::net::TcpStream::connect_timeout(&addr, timeout).is_ok()
        })
    }
}

impl Drop for VethNs {
    fn drop(&mut self) {
        let _ = ip_cmd(&["netns", "del", &self.server]); // takes the veth pair with it
        let _ = ip_cmd(&["netns", "del", &self.client]);
    }
}

#[test]
fn attaches_natively_to_a_veth_and_drops_real_syns() {
    if let Some(why) = skip_reason() {
        prereq::skip_or_fail(why);
        return;
    }
    let v = match VethNs::create() {
        Ok(v) => v,
        Err(e) => {
            prereq::skip_or_fail(format!("cannot create a veth pair between netns: {e}"));
            return;
        }
    };
    let (protected, open) = VethNs::run(&v.server, || {
        let l = || std::net::TcpListener::bind("198.18.213.1:0").unwrap();
        (l(), l())
    });
    let (p, q) = (
        protected.local_addr().unwrap().port(),
        open.local_addr().unwrap().port(),
    );
    let attach = |mode| {
        VethNs::run(&v.server, || {
            XdpManager::attach_with(
                &v.srv_if,
                mode,
                &pin_root(),
                rampart::xdp::XdpMapSizes::DEFAULT,
            )
        })
        .map(|m| Loaded(Some(m)))
    };

    let m = match attach(rampart::xdp::XdpMode::Auto) {
        Ok(m) => m,
        Err(e @ XdpError::PermissionDenied { .. }) => {
            prereq::skip_or_fail(e);
            return;
        }
        Err(e) => panic!("attach to {}: {e}", v.srv_if),
    };
    let status = m.status();
    assert!(status.attached);
    assert_eq!(status.interface, v.srv_if);
    assert_eq!(status.mode, "native", "veth supports native XDP");
    assert!(v.link().contains("prog/xdp id"), "{}", v.link());

    // With no policy everything passes.
    assert!(v.connects(p, 2_000));
    let mut policy = port(p);
    policy.block = vec![net("198.18.213.2/32")];
    m.apply_policy(&[policy]).unwrap();
    // The SYN is dropped before the stack sees it: no RST, the connect times out. One SYN is
    // sent within 300 ms (the initial retransmission timeout is 1 s).
    assert!(!v.connects(p, 300));
    assert_eq!(m.status().counters.dropped_cidr, 1);
    // Other ports (an operator's SSH) stay reachable while attached.
    assert!(v.connects(q, 2_000));
    m.apply_policy(&[]).unwrap();
    assert!(v.connects(p, 2_000));
    assert_eq!(m.status().counters.dropped_cidr, 1);

    let pins = m.pin_dir().to_path_buf();
    m.take().detach().unwrap();
    assert!(!v.link().contains("prog/xdp"), "{}", v.link());
    assert!(!pins.exists());

    // Generic mode on request.
    let m = attach(rampart::xdp::XdpMode::Generic).unwrap();
    assert_eq!(m.status().mode, "generic");
    assert!(v.link().contains("xdpgeneric"), "{}", v.link());
    m.take().detach().unwrap();
    assert!(!v.link().contains("prog/xdp"), "{}", v.link());
}

#[test]
fn attach_errors_name_the_cause() {
    if let Some(why) = skip_reason() {
        prereq::skip_or_fail(why);
        return;
    }
    let err = XdpManager::attach_with(
        "rpx-none0",
        rampart::xdp::XdpMode::Auto,
        &pin_root(),
        rampart::xdp::XdpMapSizes::DEFAULT,
    )
    .unwrap_err();
    assert_eq!(
        err,
        XdpError::InterfaceMissing {
            interface: "rpx-none0".to_string()
        }
    );
    assert_eq!(err.to_string(), "interface \"rpx-none0\" does not exist");
}

#[test]
fn a_missing_object_is_named_by_attach() {
    // build.rs sets RAMPART_XDP_MISSING when clang or the BPF headers were missing.
    match option_env!("RAMPART_XDP_MISSING") {
        Some(why) => {
            let want = XdpError::ObjectMissing {
                why: why.to_string(),
            };
            assert_eq!(object_available(), Err(want.clone()));
            assert_eq!(want.to_string(), format!("XDP object not built: {why}"));
            let err = XdpManager::attach(
                "lo",
                rampart::xdp::XdpMode::Auto,
                rampart::xdp::XdpMapSizes::DEFAULT,
            )
            .unwrap_err();
            assert_eq!(err, want);
        }
        None => assert_eq!(object_available(), Ok(())),
    }
}

// ---------------------------------------------------------------- the kernel layer, completed

/// A port with the listener's `rateLimit` mirrored (1/s, burst 3) and no `xdp.synPerSecond`.
fn rate_limited(p: u16) -> XdpPortPolicy {
    let mut pol = port(p);
    pol.ban_rate = Some(rampart::gcra::Gcra::new(SEC, 3));
    pol.penalty_ns = 60 * SEC;
    pol
}

#[test]
fn without_a_syn_limit_a_banned_source_is_extended_by_its_rate_limit() {
    let Some(m) = load("ban_rate") else {
        return;
    };
    let mut plain = port(8443); // no rateLimit mirrored: a ban there is never extended
    plain.penalty_ns = 60 * SEC;
    m.apply_policy(&[rate_limited(443), plain]).unwrap();

    for (src, vlans) in [
        ("203.0.113.70", &[][..]),
        ("2001:db8:70::1", &[0x8100u16][..]),
    ] {
        let boxed_until = now_ns() + 10 * SEC;
        m.ban(ip(src), 443, boxed_until, BanReason::Penalty)
            .unwrap();
        // No per-source SYN limit: a fresh source passes, the banned one is dropped.
        let frame = |s: &str| match ip(s) {
            IpAddr::V4(a) => eth(vlans, 0x0800, &ipv4(a, 6, 0, &tcp(443, SYN))),
            IpAddr::V6(a) => eth(vlans, 0x86dd, &ipv6(a, 6, &tcp(443, SYN))),
        };
        let t = now_ns();
        assert_eq!(verdict(run(&m, &frame(src))), "drop", "{src}");
        let ban = m.bans()[0];
        assert!(
            ban.deadline_ns > t + 60 * SEC && ban.deadline_ns <= now_ns() + 60 * SEC,
            "{src}: excess while banned extends to now + durationMs"
        );
        m.unban(ip(src), 443).unwrap();
    }
    assert_eq!(verdict(run(&m, &syn("203.0.113.71", 443))), "pass");
    assert_eq!(m.counter(counter::BAN_EXTENDED), 2);

    // On the port without a mirrored rate the deadline stays fixed however fast the SYNs come.
    let until = now_ns() + 10 * SEC;
    m.ban(ip("203.0.113.72"), 8443, until, BanReason::Penalty)
        .unwrap();
    for _ in 0..5 {
        assert_eq!(verdict(run(&m, &syn("203.0.113.72", 8443))), "drop");
    }
    assert_eq!(m.bans()[0].deadline_ns, until);
    // A dynamic ban (blockIp) is never extended, whatever the port.
    m.ban(ip("203.0.113.73"), 443, until, BanReason::Dynamic)
        .unwrap();
    for _ in 0..3 {
        assert_eq!(verdict(run(&m, &syn("203.0.113.73", 443))), "drop");
    }
    let b = m
        .bans()
        .into_iter()
        .find(|b| b.ip == ip("203.0.113.73"))
        .unwrap();
    assert_eq!(b.deadline_ns, until);

    let c = m.status().counters;
    assert_eq!(
        (
            c.dropped_penalty,
            c.dropped_dynamic,
            c.ban_extended,
            c.banned
        ),
        (7, 3, 2, 0)
    );
}

#[test]
fn boxed_prefixes_are_banned_by_prefix_and_extended_by_continued_excess() {
    let Some(m) = load("prefix_bans") else {
        return;
    };
    m.apply_policy(&[rate_limited(443)]).unwrap();
    let until = now_ns() + 10 * SEC;
    m.ban_prefix(net("203.0.113.0/24"), 443, until, BanReason::Penalty)
        .unwrap();
    m.ban_prefix(net("2001:db8:77::/48"), 443, until, BanReason::Penalty)
        .unwrap();

    assert_eq!(verdict(run(&m, &syn("203.0.113.9", 443))), "drop");
    assert_eq!(verdict(run(&m, &syn("203.0.114.9", 443))), "pass");
    assert_eq!(verdict(run(&m, &syn("2001:db8:77:5::1", 443))), "drop");
    assert_eq!(verdict(run(&m, &syn("2001:db8:78::1", 443))), "pass");
    // Unprotected ports are untouched.
    assert_eq!(verdict(run(&m, &syn("203.0.113.9", 22))), "pass");

    let mut listed: Vec<String> = m.bans().iter().map(|b| b.display()).collect();
    listed.sort();
    assert_eq!(listed, ["2001:db8:77::/48", "203.0.113.0/24"]);
    assert_eq!(
        m.status().banned_ips,
        ["2001:db8:77::/48", "203.0.113.0/24"]
    );
    // Each prefix's first SYN was excess (its box's burst was just exceeded): extended to
    // now + durationMs, never backwards.
    let v4 = m
        .bans()
        .into_iter()
        .find(|b| b.display() == "203.0.113.0/24")
        .unwrap();
    assert!(v4.deadline_ns > until + 40 * SEC);
    assert_eq!(v4.port, 443);
    assert!(v4.prefix);
    // A userspace re-ban with its earlier deadline keeps the extended one.
    m.ban_prefix(net("203.0.113.0/24"), 443, until, BanReason::Penalty)
        .unwrap();
    let again = m
        .bans()
        .into_iter()
        .find(|b| b.display() == "203.0.113.0/24")
        .unwrap();
    assert_eq!(again.deadline_ns, v4.deadline_ns);

    assert!(m.unban_prefix(net("203.0.113.0/24")).unwrap());
    assert!(!m.unban_prefix(net("203.0.113.0/24")).unwrap());
    assert_eq!(verdict(run(&m, &syn("203.0.113.9", 443))), "pass");
    // An expired prefix ban is swept.
    m.ban_prefix(
        net("198.51.100.0/24"),
        443,
        now_ns() - 1,
        BanReason::Penalty,
    )
    .unwrap();
    assert_eq!(verdict(run(&m, &syn("198.51.100.1", 443))), "pass");
    assert_eq!(m.sweep(now_ns()), 1);

    let c = m.status().counters;
    assert_eq!((c.dropped_penalty, c.ban_extended), (2, 2));
}

#[test]
fn the_syn_budget_admits_exactly_its_burst_and_known_good_sources_always_pass() {
    let Some(m) = load("syn_budget") else {
        return;
    };
    let mut p = port(443);
    // T = 500 ms, burst 2: the budget is spent until 500 ms after the first SYN, far beyond the
    // test's duration.
    p.syn_budget_per_second = Some(2);
    let mut other = port(8443);
    other.syn_budget_per_second = Some(1);
    m.apply_policy(&[p, other]).unwrap();
    let later = now_ns() + 60 * SEC;
    m.set_known_good(ip("192.0.2.10"), 443, later).unwrap();
    m.set_known_good(ip("2001:db8:10::1"), 443, later).unwrap();
    m.set_known_good(ip("192.0.2.11"), 443, now_ns() - 1)
        .unwrap(); // expired mark
    assert_eq!(m.known_good(ip("192.0.2.10"), 443), Some(later));

    // Spoofed sources, each new: exactly 2 pass, then the budget is spent.
    let verdicts: Vec<&str> = (0..8)
        .map(|i| verdict(run(&m, &syn(&format!("198.18.{i}.1"), 443))))
        .collect();
    assert_eq!(
        verdicts,
        ["pass", "pass", "drop", "drop", "drop", "drop", "drop", "drop"]
    );
    // VLAN-tagged and IPv6 spoofs are budgeted too.
    let tagged = eth(
        &[0x8100],
        0x0800,
        &ipv4(v4("198.18.9.1"), 6, 0, &tcp(443, SYN)),
    );
    assert_eq!(verdict(run(&m, &tagged)), "drop");
    assert_eq!(verdict(run(&m, &syn("2001:db8:99::1", 443))), "drop");
    // Known-good sources always pass (IPv6 by the port's /64), also VLAN-tagged.
    for _ in 0..10 {
        assert_eq!(verdict(run(&m, &syn("192.0.2.10", 443))), "pass");
    }
    assert_eq!(verdict(run(&m, &syn("2001:db8:10::2", 443))), "pass");
    let tagged = eth(
        &[0x8100],
        0x0800,
        &ipv4(v4("192.0.2.10"), 6, 0, &tcp(443, SYN)),
    );
    assert_eq!(verdict(run(&m, &tagged)), "pass");
    // An expired mark does not.
    assert_eq!(verdict(run(&m, &syn("192.0.2.11", 443))), "drop");
    // Each port has its own budget, and a mark its own port: on 8443 the known-good source of
    // 443 is budgeted like any other (and takes the one SYN of its budget).
    assert_eq!(verdict(run(&m, &syn("192.0.2.10", 8443))), "pass");
    assert_eq!(verdict(run(&m, &syn("192.0.2.10", 8443))), "drop");
    assert_eq!(verdict(run(&m, &syn("192.0.2.13", 8443))), "drop");
    assert!(m.budget_tat(443) > now_ns());
    // Established traffic is never budgeted.
    assert_eq!(verdict(run(&m, &segment("198.18.7.1", 443, ACK))), "pass");

    let c = m.status().counters;
    assert_eq!(
        (c.dropped_syn_budget, c.passed),
        (6 + 2 + 1 + 2, 2 + 10 + 1 + 1 + 1 + 1)
    );
}

#[test]
fn non_tcp_to_protected_ports_is_dropped_and_passes_elsewhere() {
    let Some(m) = load("non_tcp") else {
        return;
    };
    m.apply(&XdpPolicy {
        ports: vec![port(443)],
        listener_ports: vec![9000],
        ipv6_prefix_len: 64,
        drop_fragments: false,
    })
    .unwrap();
    let udp = |src: &str, dport: u16, vlans: &[u16], proto: u8| match ip(src) {
        IpAddr::V4(a) => eth(vlans, 0x0800, &ipv4(a, proto, 0, &tcp(dport, 0)[..8])),
        IpAddr::V6(a) => eth(vlans, 0x86dd, &ipv6(a, proto, &tcp(dport, 0)[..8])),
    };
    // UDP, UDP-Lite, SCTP, DCCP to the protected port: dropped, IPv4 and IPv6, tagged or not.
    assert_eq!(verdict(run(&m, &udp("203.0.113.1", 443, &[], 17))), "drop");
    assert_eq!(verdict(run(&m, &udp("2001:db8::1", 443, &[], 17))), "drop");
    assert_eq!(
        verdict(run(&m, &udp("203.0.113.1", 443, &[0x88a8, 0x8100], 17))),
        "drop"
    );
    assert_eq!(
        verdict(run(&m, &udp("2001:db8::1", 443, &[0x8100], 17))),
        "drop"
    );
    for proto in [136u8, 132, 33] {
        assert_eq!(
            verdict(run(&m, &udp("203.0.113.1", 443, &[], proto))),
            "drop",
            "{proto}"
        );
    }
    // IPv6 UDP behind a destination-options header is found too.
    let opts = eth(
        &[],
        0x86dd,
        &ipv6(v6("2001:db8::1"), 60, &v6_opts(17, &tcp(443, 0)[..8])),
    );
    assert_eq!(verdict(run(&m, &opts)), "drop");
    // To an unprotected listener port and to any other port: passed.
    assert_eq!(verdict(run(&m, &udp("203.0.113.1", 9000, &[], 17))), "pass");
    assert_eq!(verdict(run(&m, &udp("203.0.113.1", 53, &[], 17))), "pass");
    assert_eq!(
        verdict(run(&m, &udp("2001:db8::1", 9000, &[0x8100], 17))),
        "pass"
    );
    // ICMP has no port: passed (path MTU discovery needs it).
    let icmp = eth(
        &[],
        0x0800,
        &ipv4(v4("203.0.113.1"), 1, 0, &[8, 0, 0, 0, 0, 0, 0, 0]),
    );
    assert_eq!(verdict(run(&m, &icmp)), "pass");
    // A cut UDP header has nothing to judge.
    let cut = eth(&[], 0x0800, &ipv4(v4("203.0.113.1"), 17, 0, &[0, 53, 1]));
    assert_eq!(verdict(run(&m, &cut)), "pass");

    let c = m.status().counters;
    assert_eq!((c.dropped_non_tcp, c.passed), (8, 5));
}

#[test]
fn fragments_pass_by_default_and_are_all_dropped_with_drop_fragments() {
    let Some(m) = load("fragments") else {
        return;
    };
    let first_v4 = eth(
        &[],
        0x0800,
        &ipv4(v4("203.0.113.5"), 6, 0x2000, &tcp(443, SYN)),
    );
    let later_v4 = eth(&[], 0x0800, &ipv4(v4("203.0.113.5"), 6, 0x0010, &[0u8; 16]));
    let udp_v4 = eth(
        &[0x8100],
        0x0800,
        &ipv4(v4("203.0.113.5"), 17, 0x2000, &[0u8; 16]),
    );
    let first_v6 = eth(
        &[],
        0x86dd,
        &ipv6(v6("2001:db8::5"), 44, &v6_frag(6, 0, true, &tcp(443, SYN))),
    );
    let later_v6 = eth(
        &[0x8100],
        0x86dd,
        &ipv6(v6("2001:db8::5"), 44, &v6_frag(6, 2, false, &[0u8; 16])),
    );
    let frames = [&first_v4, &later_v4, &udp_v4, &first_v6, &later_v6];
    let policy = |drop_fragments| XdpPolicy {
        ports: vec![port(443)],
        listener_ports: Vec::new(),
        ipv6_prefix_len: 64,
        drop_fragments,
    };

    m.apply(&policy(false)).unwrap();
    let verdicts: Vec<&str> = frames.iter().map(|f| verdict(run(&m, f))).collect();
    assert_eq!(verdicts, ["pass", "pass", "pass", "pass", "pass"]);
    assert_eq!(m.status().counters.dropped_fragment, 0);

    m.apply(&policy(true)).unwrap();
    let verdicts: Vec<&str> = frames.iter().map(|f| verdict(run(&m, f))).collect();
    assert_eq!(verdicts, ["drop", "drop", "drop", "drop", "drop"]);
    // Whole packets still pass.
    assert_eq!(verdict(run(&m, &syn("203.0.113.5", 443))), "pass");
    assert_eq!(verdict(run(&m, &syn("2001:db8::5", 22))), "pass");
    let c = m.status().counters;
    assert_eq!((c.dropped_fragment, c.passed), (5, 7));
}

#[test]
fn sized_maps_are_created_at_the_size_asked_and_resized_on_the_next_load() {
    if let Some(why) = skip_reason() {
        prereq::skip_or_fail(why);
        return;
    }
    let info = |dir: &std::path::Path, name: &str| {
        aya::maps::MapInfo::from_pin(dir.join(name))
            .unwrap()
            .max_entries()
    };
    let sizes = rampart::xdp::XdpMapSizes::uniform(5000);
    let m = Loaded(Some(
        XdpManager::load_unattached_sized(&pin_root(), "sized", sizes).unwrap(),
    ));
    assert_eq!(m.sizes(), sizes);
    assert_eq!(m.status().maps, sizes);
    let dir = m.pin_dir().to_path_buf();
    for name in [
        "rampart_bans",
        "rampart_prefix_bans",
        "rampart_syn",
        "rampart_known_good",
    ] {
        assert_eq!(info(&dir, name), 5000, "{name}");
    }
    let mgr = m.take();
    drop(mgr); // keep the pins: the next load finds them at another size
    let bigger = rampart::xdp::XdpMapSizes::uniform(7000);
    let m = Loaded(Some(
        XdpManager::load_unattached_sized(&pin_root(), "sized", bigger).unwrap(),
    ));
    for name in [
        "rampart_bans",
        "rampart_prefix_bans",
        "rampart_syn",
        "rampart_known_good",
    ] {
        assert_eq!(info(&dir, name), 7000, "{name}");
    }
    assert_eq!(rampart::xdp::XdpMapSizes::uniform(10).bans, 1024);
    drop(m);
}
