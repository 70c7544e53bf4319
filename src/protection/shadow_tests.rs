use super::*;
use crate::protection::cidr::CidrSet;
use crate::protection::policy::{PrefixLimit, RateLimit};

const S: u64 = 1_000_000_000;

fn ip(n: u32) -> IpAddr {
    std::net::Ipv4Addr::from(0x0a00_0000 + n).into()
}

fn client(n: u32, active: u32) -> ShadowClient {
    ShadowClient {
        ip: ip(n),
        key: IpKey::new(ip(n), 64),
        active,
        known_good: false,
    }
}

fn reason(s: &Shadow, p: &ShadowPolicy, c: &ShadowClient, now: u64) -> Option<BlockReason> {
    s.decide(p, c, now).reason
}

#[test]
fn rates_then_concurrency_with_injected_time() {
    let s = Shadow::default();
    let p = ShadowPolicy {
        rate_limit: Some(RateLimit::new(1.0, S, 2)),
        max_concurrent_per_ip: 3,
        ..ShadowPolicy::default()
    };
    let t0 = 100 * S;
    assert_eq!(reason(&s, &p, &client(1, 0), t0), None);
    assert_eq!(reason(&s, &p, &client(1, 1), t0), None);
    assert_eq!(
        reason(&s, &p, &client(1, 2), t0),
        Some(BlockReason::RateLimited)
    );
    // Another client has its own budget.
    assert_eq!(reason(&s, &p, &client(2, 0), t0), None);
    // A second later the rate admits one; the concurrency limit reads the open count, and a
    // refused attempt is not debited.
    assert_eq!(
        reason(&s, &p, &client(1, 3), t0 + S),
        Some(BlockReason::TooManyConnections)
    );
    assert_eq!(s.verdict(&p, &client(1, 0), t0 + S), None);
    assert_eq!(reason(&s, &p, &client(1, 0), t0 + S), None);
    assert_eq!(
        s.verdict(&p, &client(1, 0), t0 + S),
        Some(BlockReason::RateLimited)
    );
    assert_eq!(s.clients.evicted(), 0);
}

#[test]
fn the_blocklist_comes_first_and_debits_nothing() {
    let s = Shadow::default();
    let p = ShadowPolicy {
        blocklist: CidrSet::new(vec!["10.0.0.0/31".parse().unwrap()]),
        rate_limit: Some(RateLimit::new(1.0, S, 1)),
        ..ShadowPolicy::default()
    };
    for _ in 0..3 {
        assert_eq!(
            reason(&s, &p, &client(1, 0), S),
            Some(BlockReason::CidrBlocked)
        );
    }
    assert!(s.clients.peek(client(1, 0).key).is_none());
    assert_eq!(reason(&s, &p, &client(2, 0), S), None);
    assert_eq!(
        reason(&s, &p, &client(2, 0), S),
        Some(BlockReason::RateLimited)
    );
}

#[test]
fn the_prefix_tier_counts_rate_and_open_connections_per_prefix() {
    let s = Shadow::default();
    let p = ShadowPolicy {
        prefix_limit: Some(PrefixLimit {
            ipv4_prefix_length: 24,
            ipv6_prefix_length: 48,
            rate: Some(RateLimit::new(1.0, S, 3)),
            max_concurrent: 2,
        }),
        ..ShadowPolicy::default()
    };
    // Two connections from two addresses of one /24 held open: the third is over the cap.
    let a = s.decide(&p, &client(1, 0), S);
    assert_eq!(a.reason, None);
    let h1 = a.prefix_way.and_then(|w| s.hold(w));
    let b = s.decide(&p, &client(2, 0), S);
    let h2 = b.prefix_way.and_then(|w| s.hold(w));
    assert!(h1.is_some() && h2.is_some());
    assert_eq!(
        reason(&s, &p, &client(3, 0), S),
        Some(BlockReason::PrefixTooManyConnections)
    );
    drop(h1);
    // One closed: the rate (burst 3) admits one more, then refuses.
    let c = s.decide(&p, &client(3, 0), S);
    assert_eq!(c.reason, None);
    drop(h2);
    assert_eq!(
        reason(&s, &p, &client(4, 0), S),
        Some(BlockReason::PrefixRateLimited)
    );
    // Another /24 has its own state.
    assert_eq!(reason(&s, &p, &client(0x100, 0), S), None);
}

#[test]
fn the_listener_rate_skips_known_good_clients() {
    let s = Shadow::default();
    let p = ShadowPolicy {
        listener_rate: Some(RateLimit::new(1.0, S, 1)),
        ..ShadowPolicy::default()
    };
    assert_eq!(reason(&s, &p, &client(1, 0), S), None);
    assert_eq!(
        reason(&s, &p, &client(2, 0), S),
        Some(BlockReason::ListenerOverloaded)
    );
    let good = ShadowClient {
        known_good: true,
        ..client(3, 0)
    };
    assert_eq!(reason(&s, &p, &good, S), None);
    assert_eq!(reason(&s, &p, &client(2, 0), 2 * S), None);
}

#[test]
fn the_tables_are_bounded_and_evict_the_least_debt() {
    let s = Shadow::default();
    let p = ShadowPolicy {
        rate_limit: Some(RateLimit::new(1.0, S, 1)),
        ..ShadowPolicy::default()
    };
    let n = (SETS * WAYS * 2) as u32;
    for i in 0..n {
        s.decide(&p, &client(i, 0), S);
    }
    assert_eq!(s.clients.ways.get().map(|w| w.len()), Some(SETS * WAYS));
    assert!(s.clients.evicted() >= u64::from(n) - (SETS * WAYS) as u64);
}

#[test]
fn a_way_holding_open_connections_is_never_taken() {
    let t = ShadowTable::default();
    let k = |n: u32| IpKey::new(ip(n), 64);
    let (i, w) = t
        .way(k(0), S)
        .map(|(i, w)| (i, w.fp.load(Ordering::Relaxed)))
        .unwrap();
    let ways = t.ways.get().unwrap();
    ways[i].active.store(1, Ordering::Relaxed);
    // Fill every set twice over: the held way keeps its key.
    for n in 1..(SETS * WAYS * 2) as u32 {
        let _ = t.way(k(n), 10 * S);
    }
    assert_eq!(ways[i].fp.load(Ordering::Relaxed), w);
}

/// A shadow policy counting open connections per /24, with no rate (a way is free as soon as
/// it holds no connection).
fn prefix_cap(max_concurrent: u64) -> ShadowPolicy {
    ShadowPolicy {
        prefix_limit: Some(PrefixLimit {
            ipv4_prefix_length: 24,
            ipv6_prefix_length: 48,
            rate: None,
            max_concurrent,
        }),
        ..ShadowPolicy::default()
    }
}

/// A client of another /24 than `n`'s whose prefix falls in the same set of the prefix table.
fn same_prefix_set(s: &Shadow, p: &ShadowPolicy, n: u32) -> ShadowClient {
    let pl = p.prefix_limit.unwrap();
    let set = |n: u32| s.prefixes.fp_and_set(pl.key(ip(n))).1;
    (1..)
        .map(|k| n + (k << 8))
        .find(|&m| set(m) == set(n))
        .map(|m| client(m, 0))
        .unwrap()
}

#[test]
fn a_hold_on_a_way_taken_since_the_decision_counts_nothing() {
    let s = Shadow::default();
    let p = prefix_cap(1);
    let a = s.decide(&p, &client(1, 0), S);
    assert_eq!(a.reason, None);
    let (index, _) = a.prefix_way.unwrap();
    // Before `a`'s connection holds its way, another prefix of the set takes it.
    let other = same_prefix_set(&s, &p, 1);
    let b = s.decide(&p, &other, S);
    assert_eq!(b.reason, None);
    assert_eq!(b.prefix_way.map(|(i, _)| i), Some(index));
    let ways = s.prefixes.ways.get().unwrap();
    assert!(s.hold(a.prefix_way.unwrap()).is_none());
    assert_eq!(ways[index].active.load(Ordering::Relaxed), 0);
    // The other prefix's count is its own: one hold, then its cap, then none once released.
    let hb = s.hold(b.prefix_way.unwrap());
    assert!(hb.is_some());
    assert_eq!(ways[index].active.load(Ordering::Relaxed), 1);
    assert_eq!(
        reason(&s, &p, &other, S),
        Some(BlockReason::PrefixTooManyConnections)
    );
    drop(hb);
    assert_eq!(ways[index].active.load(Ordering::Relaxed), 0);
}

#[test]
fn a_hold_releases_its_count_even_when_a_racing_claim_took_its_way() {
    let s = Shadow::default();
    let p = prefix_cap(2);
    let a = s.decide(&p, &client(1, 0), S);
    let (index, fp) = a.prefix_way.unwrap();
    let h = s.hold((index, fp));
    assert!(h.is_some());
    // A claim that read the count before the hold's increment writes its fingerprint after the
    // hold's check (the race left open): the connection counts on the new key until it closes.
    let ways = s.prefixes.ways.get().unwrap();
    ways[index].fp.store(fp ^ 2, Ordering::Relaxed);
    assert_eq!(ways[index].active.load(Ordering::Relaxed), 1);
    drop(h);
    assert_eq!(ways[index].active.load(Ordering::Relaxed), 0);
}
