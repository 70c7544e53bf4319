//! ProtectionConfig validation: every field, every kind of bad number, exact paths and messages,
//! all issues at once.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use rampart::config::error::Issues;
use rampart::config::protection::parse_protection;
use rampart::http2::H2GuardConfig;
use rampart::protection::policy::Http2Policy;
use rampart::protection::{Mode, ProtectionPolicy};
use rampart::tls::ja3::validate_ja3;
use rampart::tls::ja4::validate_ja4;
use serde_json::{json, Value};

const PATH: &str = "protection[1].protection";

fn nan() -> Value {
    json!({"$nonFinite": "NaN"})
}
fn inf() -> Value {
    json!({"$nonFinite": "Infinity"})
}
fn neg_inf() -> Value {
    json!({"$nonFinite": "-Infinity"})
}

/// The issues of a config, as "path: message" lines.
fn issues(v: Value) -> Vec<String> {
    let mut issues = Issues::default();
    let p = parse_protection(&v, PATH, &mut issues);
    assert_eq!(p.is_none(), !issues.is_empty());
    issues
        .0
        .iter()
        .map(|i| format!("{}: {}", i.path, i.message))
        .collect()
}

/// The single issue of `{ <field>: value }`.
fn one(v: Value) -> String {
    let all = issues(v);
    assert_eq!(all.len(), 1, "{all:?}");
    all[0].clone()
}

fn ok(v: Value) -> ProtectionPolicy {
    let mut issues = Issues::default();
    let p = parse_protection(&v, PATH, &mut issues);
    assert!(issues.is_empty(), "{:?}", issues.0);
    p.unwrap()
}

const POSITIVE: &str = "must be a finite number > 0";
const HANDSHAKE_TIMEOUT: &str = "must be a finite number >= 0 (0: the default, 10000)";

#[test]
fn defaults() {
    let p = ok(json!({}));
    assert!(p.rate_limit().is_none() && p.sustained().is_none() && !p.penalty_box());
    assert_eq!(p.max_concurrent_per_ip(), 0);
    assert_eq!(p.tls_handshake_timeout_ms(), 10_000);
    assert!(!p.require_sni());
    assert_eq!(p.ipv6_prefix_length(), 64);
    assert_eq!(p.max_tracked_ips(), 1_000_000);
    assert_eq!(p.slow_handshake().max_pending_per_ip, 64);
    assert_eq!(p.min_bytes_per_second(), 0);
    assert_eq!(p.mode(), Mode::Enforce);
    assert!(p.xdp().is_none());
    assert_eq!(p.xdp_ban_ms(), 600_000);
    let p = ok(json!({"penaltyBox": {}, "xdp": {"synPerSecond": 100}}));
    assert_eq!(p.penalty_duration_ms(), Some(600_000));
    assert_eq!(p.xdp().unwrap().syn_burst, 100);
    // null means "left out".
    let p = ok(json!({"rateLimit": null, "penaltyBox": null, "mode": null}));
    assert!(p.rate_limit().is_none() && !p.penalty_box());
}

#[test]
fn full_config_compiles() {
    let p = ok(json!({
        "rateLimit": {"connectionsPerSecond": 20, "burst": 40},
        "sustained": {"connectionsPerMinute": 300},
        "penaltyBox": {"durationMs": 120000},
        "maxConcurrentPerIp": 50,
        "allowlist": ["10.0.0.0/8", "::1"],
        "blocklist": ["192.0.2.0/24", "::ffff:198.51.100.0/120"],
        "ja3Blocklist": ["E7D705A3286E19EA42F587B344EE6865"],
        "ja4Blocklist": ["t13d1516h2_8daaf6152771_b186095e22b6"],
        "tlsHandshakeTimeoutMs": 5000,
        "requireSni": true,
        "ipv6PrefixLength": 56,
        "maxTrackedIps": 250000,
        "slowHandshake": {"maxPendingPerIp": 8, "minBytesPerSecond": 100},
        "mode": "observe",
        "xdp": {"synPerSecond": 200, "synBurst": 400},
    }));
    let r = p.rate_limit().unwrap();
    assert_eq!(
        (r.rate, r.burst, r.gcra.interval_ns()),
        (20.0, 40, 50_000_000)
    );
    let s = p.sustained().unwrap();
    assert_eq!((s.burst, s.gcra.interval_ns()), (300, 200_000_000));
    assert_eq!(p.penalty_duration_ns(), Some(120_000_000_000));
    assert_eq!(p.max_concurrent_per_ip(), 50);
    let nets = |v: Vec<ipnet::IpNet>| v.iter().map(|n| n.to_string()).collect::<Vec<_>>();
    assert_eq!(nets(p.allowlist_nets()), vec!["10.0.0.0/8", "::1/128"]);
    assert_eq!(
        nets(p.blocklist_nets()),
        vec!["192.0.2.0/24", "198.51.100.0/24"]
    );
    assert_eq!(
        p.ja3_blocklist().list(),
        ["e7d705a3286e19ea42f587b344ee6865"]
    );
    assert!(p
        .ja3_blocklist()
        .contains("e7d705a3286e19ea42f587b344ee6865"));
    assert!(p
        .ja4_blocklist()
        .contains("T13D1516H2_8DAAF6152771_B186095E22B6"));
    assert_eq!(p.tls_handshake_timeout_ms(), 5_000);
    assert!(p.require_sni());
    assert_eq!(p.ipv6_prefix_length(), 56);
    assert_eq!(p.max_tracked_ips(), 250_000);
    assert_eq!(p.slow_handshake().max_pending_per_ip, 8);
    assert_eq!(p.min_bytes_per_second(), 100);
    assert_eq!(p.mode(), Mode::Observe);
    let x = p.xdp().unwrap();
    assert_eq!((x.syn_per_second, x.syn_burst), (200, 400));
    assert_eq!(p.xdp_ban_ms(), 120_000);
}

#[test]
fn design_example_message() {
    assert_eq!(
        one(json!({"penaltyBox": {"durationMs": nan()}})),
        "protection[1].protection.penaltyBox.durationMs: must be a finite number > 0, got NaN"
    );
}

#[test]
fn rates_reject_nan_infinity_negative_zero_and_too_large() {
    for (field, sub, max) in [
        ("rateLimit", "connectionsPerSecond", "1000000000"),
        ("sustained", "connectionsPerMinute", "60000000000"),
    ] {
        let at = format!("{PATH}.{field}.{sub}");
        for (v, shown) in [
            (nan(), "NaN"),
            (inf(), "Infinity"),
            (neg_inf(), "-Infinity"),
            (json!(-1), "-1"),
            (json!(0), "0"),
            (json!("5"), "\"5\""),
            (json!(true), "true"),
        ] {
            assert_eq!(
                one(json!({field: {sub: v}})),
                format!("{at}: {POSITIVE}, got {shown}")
            );
        }
        assert_eq!(
            one(json!({field: {sub: 1e12}})),
            format!("{at}: must be at most {max}, got 1000000000000.0")
        );
        assert_eq!(
            one(json!({field: {}})),
            format!("{at}: is required: a finite number > 0")
        );
        assert_eq!(
            one(json!({field: {sub: 1, "burts": 2}})),
            format!("{PATH}.{field}.burts: unknown field; expected one of: {sub}, burst")
        );
        assert_eq!(
            one(json!({field: 5})),
            format!("{PATH}.{field}: must be an object, got 5")
        );
        // Fractional rates are allowed.
        ok(json!({field: {sub: 2.5}}));
    }
}

#[test]
fn bursts_are_integers_of_at_least_one() {
    let at = format!("{PATH}.rateLimit.burst");
    let msg = |shown: &str| format!("{at}: must be an integer in [1, 1000000000], got {shown}");
    for (v, shown) in [
        (json!(0), "0"),
        (json!(0.5), "0.5"),
        (json!(-3), "-3"),
        (json!(2.5), "2.5"),
        (nan(), "NaN"),
        (inf(), "Infinity"),
        (json!(1e10), "10000000000.0"),
    ] {
        assert_eq!(
            one(json!({"rateLimit": {"connectionsPerSecond": 5, "burst": v}})),
            msg(shown)
        );
    }
    // Default burst: the rate rounded up.
    assert_eq!(
        ok(json!({"rateLimit": {"connectionsPerSecond": 2.5}}))
            .rate_limit()
            .unwrap()
            .burst,
        3
    );
    assert_eq!(
        ok(json!({"rateLimit": {"connectionsPerSecond": 0.1}}))
            .rate_limit()
            .unwrap()
            .burst,
        1
    );
}

#[test]
fn durations() {
    for field in ["tlsHandshakeTimeoutMs"] {
        let at = format!("{PATH}.{field}");
        for (v, shown) in [(nan(), "NaN"), (inf(), "Infinity"), (json!(-5), "-5")] {
            assert_eq!(
                one(json!({field: v})),
                format!("{at}: {HANDSHAKE_TIMEOUT}, got {shown}")
            );
        }
        // 0 is Symphony's "the default".
        assert_eq!(ok(json!({field: 0})).tls_handshake_timeout_ms(), 10_000);
        assert_eq!(
            one(json!({field: 9007199254740992.0_f64})),
            format!("{at}: must be at most 9007199254740991, got 9007199254740992.0")
        );
    }
    let at = format!("{PATH}.penaltyBox.durationMs");
    for (v, shown) in [
        (inf(), "Infinity"),
        (neg_inf(), "-Infinity"),
        (json!(-1), "-1"),
        (json!(0), "0"),
    ] {
        assert_eq!(
            one(json!({"penaltyBox": {"durationMs": v}})),
            format!("{at}: {POSITIVE}, got {shown}")
        );
    }
    assert_eq!(
        one(json!({"penaltyBox": {"durationMs": 1e300}})),
        format!("{at}: must be at most 9007199254740991, got 1e+300")
    );
    assert_eq!(
        one(json!({"penaltyBox": {"duration": 5}})),
        format!(
            "{PATH}.penaltyBox.duration: unknown field; expected one of: durationMs, escalation"
        )
    );
    assert_eq!(
        one(json!({"penaltyBox": true})),
        format!("{PATH}.penaltyBox: must be an object, got true")
    );
    // Fractional milliseconds are kept to the nanosecond.
    assert_eq!(
        ok(json!({"penaltyBox": {"durationMs": 1.5}})).penalty_duration_ns(),
        Some(1_500_000)
    );
}

#[test]
fn counts() {
    let cases: [(&str, Value, &str); 10] = [
        (
            "maxConcurrentPerIp",
            json!(-1),
            "must be an integer in [0, 1000000], got -1",
        ),
        (
            "maxConcurrentPerIp",
            json!(1.5),
            "must be an integer in [0, 1000000], got 1.5",
        ),
        (
            "maxConcurrentPerIp",
            nan(),
            "must be an integer in [0, 1000000], got NaN",
        ),
        (
            "ipv6PrefixLength",
            json!(0),
            "must be an integer in [1, 128], got 0",
        ),
        (
            "ipv6PrefixLength",
            json!(129),
            "must be an integer in [1, 128], got 129",
        ),
        (
            "ipv6PrefixLength",
            json!(64.5),
            "must be an integer in [1, 128], got 64.5",
        ),
        (
            "maxTrackedIps",
            json!(0),
            "must be an integer in [1, 1000000000], got 0",
        ),
        (
            "maxTrackedIps",
            inf(),
            "must be an integer in [1, 1000000000], got Infinity",
        ),
        (
            "maxTrackedIps",
            json!(10.25),
            "must be an integer in [1, 1000000000], got 10.25",
        ),
        (
            "maxTrackedIps",
            json!("1000"),
            "must be an integer in [1, 1000000000], got \"1000\"",
        ),
    ];
    for (field, v, msg) in cases {
        assert_eq!(one(json!({field: v})), format!("{PATH}.{field}: {msg}"));
    }
    assert_eq!(
        ok(json!({"maxConcurrentPerIp": 0})).max_concurrent_per_ip(),
        0
    );
}

#[test]
fn slow_handshake() {
    let at = format!("{PATH}.slowHandshake");
    assert_eq!(
        one(json!({"slowHandshake": {"maxPendingPerIp": 0}})),
        format!("{at}.maxPendingPerIp: must be an integer in [1, 65535], got 0")
    );
    assert_eq!(
        one(json!({"slowHandshake": {"maxPendingPerIp": 2.5}})),
        format!("{at}.maxPendingPerIp: must be an integer in [1, 65535], got 2.5")
    );
    assert_eq!(
        one(json!({"slowHandshake": {"minBytesPerSecond": -1}})),
        format!("{at}.minBytesPerSecond: must be an integer in [0, 2^53-1], got -1")
    );
    assert_eq!(
        one(json!({"slowHandshake": {"minBytesPerSecond": nan()}})),
        format!("{at}.minBytesPerSecond: must be an integer in [0, 2^53-1], got NaN")
    );
    assert_eq!(
        one(json!({"slowHandshake": {"maxPending": 1}})),
        format!(
            "{at}.maxPending: unknown field; expected one of: maxPendingPerIp, minBytesPerSecond"
        )
    );
    assert_eq!(
        one(json!({"slowHandshake": {"minBytesPerSecond": 1.5}})),
        format!("{at}.minBytesPerSecond: must be an integer in [0, 2^53-1], got 1.5")
    );
    let p = ok(json!({"slowHandshake": {"minBytesPerSecond": 0}}));
    assert_eq!(p.slow_handshake().max_pending_per_ip, 64);
}

#[test]
fn booleans_modes_lists_and_xdp() {
    assert_eq!(
        one(json!({"requireSni": "yes"})),
        format!("{PATH}.requireSni: must be a boolean, got \"yes\"")
    );
    assert_eq!(
        one(json!({"mode": "dry-run"})),
        format!("{PATH}.mode: must be one of 'enforce', 'observe', got \"dry-run\"")
    );
    assert_eq!(
        one(json!({"blocklist": "10.0.0.0/8"})),
        format!("{PATH}.blocklist: must be an array, got \"10.0.0.0/8\"")
    );
    assert_eq!(
        issues(json!({"allowlist": ["10.0.0.0/8", 7, "10.1.2.3/8"]})),
        vec![
            format!("{PATH}.allowlist[1]: must be a string, got 7"),
            format!("{PATH}.allowlist[2]: host bits are set in \"10.1.2.3/8\"; did you mean 10.0.0.0/8?"),
        ]
    );
    // Fingerprint entries carry the TLS module's own validation message.
    assert_eq!(
        one(json!({"ja3Blocklist": ["abc"]})),
        format!(
            "{PATH}.ja3Blocklist[0]: {}",
            validate_ja3("abc").unwrap_err()
        )
    );
    assert_eq!(
        one(json!({"ja4Blocklist": ["short"]})),
        format!(
            "{PATH}.ja4Blocklist[0]: {}",
            validate_ja4("short").unwrap_err()
        )
    );
    assert_eq!(
        one(json!({"xdp": {"synBurst": 5}})),
        format!("{PATH}.xdp.synPerSecond: is required with synBurst: an integer in [1, 1000000000] (SYNs per second per source)")
    );
    assert_eq!(
        one(json!({"xdp": {"synBudgetPerSecond": -1}})),
        format!("{PATH}.xdp.synBudgetPerSecond: must be an integer in [1, 1000000000], got -1")
    );
    assert_eq!(
        one(json!({"xdp": {"maxBans": 10}})),
        format!("{PATH}.xdp.maxBans: must be an integer in [1024, 16777216], got 10")
    );
    assert_eq!(
        one(json!({"xdp": {"dropFragments": "yes"}})),
        format!("{PATH}.xdp.dropFragments: must be a boolean, got \"yes\"")
    );
    assert_eq!(
        one(json!({"xdp": {"synPerSecond": 0}})),
        format!("{PATH}.xdp.synPerSecond: must be an integer in [1, 1000000000], got 0")
    );
    assert_eq!(
        one(json!({"xdp": {"synPerSecond": 10, "synBurst": 0.5}})),
        format!("{PATH}.xdp.synBurst: must be an integer in [1, 1000000000], got 0.5")
    );
    assert_eq!(
        one(json!({"xdp": {"synPerSecond": 10, "synburst": 5}})),
        format!("{PATH}.xdp.synburst: unknown field; expected one of: synPerSecond, synBurst, synBudgetPerSecond, maxBans, dropFragments")
    );
}

#[test]
fn http2_defaults_are_design_7_3_also_without_the_field() {
    let h = *ok(json!({})).http2();
    assert_eq!(h, Http2Policy::default());
    assert!(h.enabled);
    assert_eq!(h.box_after_violations, 3);
    let g = h.guard;
    assert_eq!(g.max_concurrent_streams, 100);
    assert_eq!(g.max_streams_per_second, 100_000.0);
    assert_eq!(g.max_resets_per_second, 50.0);
    assert_eq!(g.max_header_block_bytes, 65536);
    assert_eq!(g.max_continuation_frames, 16);
    assert_eq!(g.max_control_frames_per_second, 100.0);
    // Without a penalty box an h2 box lasts 10 minutes; with one, its duration.
    assert_eq!(ok(json!({})).box_duration_ns(), 600_000_000_000);
    assert_eq!(
        ok(json!({"penaltyBox": {"durationMs": 1500}})).box_duration_ns(),
        1_500_000_000
    );
    // Fields left out keep their defaults; null means left out.
    let h = *ok(json!({"http2": {"maxResetsPerSecond": 10, "enabled": null}})).http2();
    assert!(h.enabled);
    assert_eq!(h.guard.max_resets_per_second, 10.0);
    assert_eq!(h.guard.max_concurrent_streams, 100);
}

#[test]
fn http2_every_field_compiles() {
    let h = *ok(json!({"http2": {
        "enabled": false,
        "maxConcurrentStreams": 250,
        "maxStreamsPerSecond": 0.5,
        "maxResetsPerSecond": 12.5,
        "maxHeaderBlockBytes": 131072,
        "maxContinuationFrames": 4,
        "maxControlFramesPerSecond": 1000,
        "boxAfterViolations": 1,
        "maxStreamsPerConnection": 7,
        "clientFactor": 1.5,
    }}))
    .http2();
    assert!(!h.enabled);
    assert_eq!(h.box_after_violations, 1);
    assert_eq!(h.client_factor, 1.5);
    assert_eq!(
        h.guard,
        H2GuardConfig {
            max_concurrent_streams: 250,
            max_streams_per_second: 0.5,
            max_resets_per_second: 12.5,
            max_header_block_bytes: 131072,
            max_continuation_frames: 4,
            max_control_frames_per_second: 1000.0,
            max_streams_per_connection: 7,
        }
    );
}

#[test]
fn http2_rejects_bad_numbers_with_their_path() {
    let at = format!("{PATH}.http2");
    let counts = [
        ("maxConcurrentStreams", "[1, 10000]"),
        ("maxHeaderBlockBytes", "[1, 1000000000]"),
        ("maxContinuationFrames", "[1, 1000000]"),
        ("boxAfterViolations", "[1, 1000]"),
        ("maxStreamsPerConnection", "[1, 1073741824]"),
    ];
    for (field, range) in counts {
        for (v, shown) in [
            (nan(), "NaN"),
            (inf(), "Infinity"),
            (json!(-1), "-1"),
            (json!(0), "0"),
            (json!(2.5), "2.5"),
            (json!(1e10), "10000000000.0"),
            (json!("3"), "\"3\""),
        ] {
            assert_eq!(
                one(json!({"http2": {field: v}})),
                format!("{at}.{field}: must be an integer in {range}, got {shown}")
            );
        }
    }
    for field in [
        "maxStreamsPerSecond",
        "maxResetsPerSecond",
        "maxControlFramesPerSecond",
    ] {
        for (v, shown) in [
            (nan(), "NaN"),
            (neg_inf(), "-Infinity"),
            (json!(-5), "-5"),
            (json!(0), "0"),
            (json!(null), ""),
        ] {
            if shown.is_empty() {
                ok(json!({"http2": {field: v}}));
                continue;
            }
            assert_eq!(
                one(json!({"http2": {field: v}})),
                format!("{at}.{field}: {POSITIVE}, got {shown}")
            );
        }
        assert_eq!(
            one(json!({"http2": {field: 2e9}})),
            format!("{at}.{field}: must be at most 1000000000, got 2000000000.0")
        );
    }
    assert_eq!(
        one(json!({"http2": {"enabled": "no"}})),
        format!("{at}.enabled: must be a boolean, got \"no\"")
    );
    assert_eq!(
        one(json!({"http2": true})),
        format!("{at}: must be an object, got true")
    );
    assert_eq!(
        one(json!({"http2": {"maxResets": 5}})),
        format!(
            "{at}.maxResets: unknown field; expected one of: enabled, maxConcurrentStreams, \
             maxStreamsPerSecond, maxResetsPerSecond, maxHeaderBlockBytes, \
             maxContinuationFrames, maxControlFramesPerSecond, boxAfterViolations, \
             maxStreamsPerConnection, clientFactor"
        )
    );
    // Every problem at once.
    let got = issues(json!({"http2": {
        "maxConcurrentStreams": 0, "maxResetsPerSecond": nan(), "boxAfterViolations": -1
    }}));
    assert_eq!(got.len(), 3, "{got:?}");
}

#[test]
fn unknown_fields_and_non_objects() {
    assert_eq!(
        one(json!({"rateLimits": {}})),
        format!(
            "{PATH}.rateLimits: unknown field; expected one of: rateLimit, sustained, penaltyBox, \
             maxConcurrentPerIp, allowlist, blocklist, ja3Blocklist, ja4Blocklist, \
             tlsHandshakeTimeoutMs, requireSni, ipv6PrefixLength, maxTrackedIps, slowHandshake, \
             mode, xdp, http2, prefixLimit, listenerLimit, knownGoodTtlMs, defense, slowRequest, \
             clusterRateLimit, requestLimit, shadow"
        )
    );
    assert_eq!(
        one(json!([])),
        format!("{PATH}: must be an object, got an array")
    );
    assert_eq!(one(nan()), format!("{PATH}: must be an object, got NaN"));
}

#[test]
fn every_issue_is_reported_at_once() {
    let got = issues(json!({
        "rateLimit": {"connectionsPerSecond": nan(), "burst": 0},
        "sustained": {"connectionsPerMinute": -1},
        "penaltyBox": {"durationMs": nan()},
        "maxConcurrentPerIp": 2.5,
        "blocklist": ["10.0.0.0/33", " 1.2.3.4"],
        "tlsHandshakeTimeoutMs": inf(),
        "ipv6PrefixLength": 0,
        "mode": "off",
        "extra": 1,
    }));
    assert_eq!(
        got,
        vec![
            format!(
                "{PATH}.extra: unknown field; expected one of: rateLimit, sustained, penaltyBox, \
                 maxConcurrentPerIp, allowlist, blocklist, ja3Blocklist, ja4Blocklist, \
                 tlsHandshakeTimeoutMs, requireSni, ipv6PrefixLength, maxTrackedIps, \
                 slowHandshake, mode, xdp, http2, prefixLimit, listenerLimit, knownGoodTtlMs, \
                 defense, slowRequest, clusterRateLimit, requestLimit, shadow"
            ),
            format!("{PATH}.rateLimit.connectionsPerSecond: {POSITIVE}, got NaN"),
            format!("{PATH}.rateLimit.burst: must be an integer in [1, 1000000000], got 0"),
            format!("{PATH}.sustained.connectionsPerMinute: {POSITIVE}, got -1"),
            format!("{PATH}.penaltyBox.durationMs: {POSITIVE}, got NaN"),
            format!("{PATH}.maxConcurrentPerIp: must be an integer in [0, 1000000], got 2.5"),
            format!("{PATH}.blocklist[0]: prefix length 33 is out of range for IPv4 (0-32), got \"10.0.0.0/33\""),
            format!("{PATH}.blocklist[1]: must not contain spaces, got \" 1.2.3.4\""),
            format!("{PATH}.tlsHandshakeTimeoutMs: {HANDSHAKE_TIMEOUT}, got Infinity"),
            format!("{PATH}.ipv6PrefixLength: must be an integer in [1, 128], got 0"),
            format!("{PATH}.mode: must be one of 'enforce', 'observe', got \"off\""),
        ]
    );
}

#[test]
fn the_path_is_the_callers() {
    let mut issues = Issues::default();
    parse_protection(
        &json!({"maxTrackedIps": 0}),
        "listeners[0].protection",
        &mut issues,
    );
    assert_eq!(issues.0[0].path, "listeners[0].protection.maxTrackedIps");
}

#[test]
fn second_round_fields_compile_with_their_defaults() {
    let p = ok(json!({
        "prefixLimit": {"connectionsPerSecond": 50},
        "listenerLimit": {"maxPendingHandshakes": 500},
        "defense": {"mode": "auto"},
        "penaltyBox": {"escalation": {}},
    }));
    let pl = p.prefix_limit().unwrap();
    assert_eq!((pl.ipv4_prefix_length, pl.ipv6_prefix_length), (24, 48));
    assert_eq!(pl.rate.map(|r| (r.rate, r.burst)), Some((50.0, 50)));
    assert_eq!(pl.max_concurrent, 0);
    let ll = p.listener_limit().unwrap();
    assert!(ll.rate.is_none());
    assert_eq!(ll.max_pending_handshakes, 500);
    assert_eq!(p.known_good_ttl_ns(), 3_600_000 * 1_000_000);
    let d = p.defense();
    assert_eq!(
        (d.sigma, d.min_connections_per_second, d.hold_ns, d.factor),
        (3.0, 100, 30_000_000_000, 0.25)
    );
    assert_eq!(
        (d.new_client_max_pending, d.handshake_timeout_ns),
        (1, 3_000_000_000)
    );
    assert_eq!(p.head_timeout_ns(), 10_000_000_000);
    let esc = p.escalation().unwrap();
    assert_eq!(
        (esc.factor, esc.max_duration_ns, esc.memory_ns),
        (2.0, 86_400_000_000_000, 86_400_000_000_000)
    );
    // Without the fields: off, defaults kept.
    let p = ok(json!({}));
    assert!(p.prefix_limit().is_none() && p.listener_limit().is_none() && p.escalation().is_none());
    assert_eq!(p.defense().mode, rampart::protection::DefenseMode::Off);
}

#[test]
fn second_round_fields_are_validated_with_paths() {
    assert_eq!(
        issues(json!({
            "prefixLimit": {"ipv4PrefixLength": 33, "ipv6PrefixLength": 0, "burst": 0},
            "listenerLimit": {},
            "knownGoodTtlMs": 0,
            "defense": {"mode": "sometimes", "sigma": -1, "minConnectionsPerSecond": 0.5,
                        "holdMs": nan(), "factor": 1.5, "newClientMaxPending": 0,
                        "handshakeTimeoutMs": -3},
            "slowRequest": {"headTimeoutMs": inf(), "bodyTimeoutMs": 1},
            "penaltyBox": {"durationMs": 60_000,
                           "escalation": {"factor": 0.5, "maxDurationMs": 1_000, "memoryMs": 0}},
        })),
        vec![
            format!("{PATH}.penaltyBox.escalation.factor: must be a finite number in [1, 1000000], got 0.5"),
            format!("{PATH}.penaltyBox.escalation.maxDurationMs: must be at least penaltyBox.durationMs (60000 ms), got 1000"),
            format!("{PATH}.penaltyBox.escalation.memoryMs: must be a finite number > 0, got 0"),
            format!("{PATH}.prefixLimit.ipv4PrefixLength: must be an integer in [1, 32], got 33"),
            format!("{PATH}.prefixLimit.ipv6PrefixLength: must be an integer in [1, 128], got 0"),
            format!("{PATH}.prefixLimit.burst: must be an integer in [1, 1000000000], got 0"),
            format!("{PATH}.prefixLimit: needs connectionsPerSecond or maxConcurrent (or both): a finite number > 0, an integer in [1, 1000000]"),
            format!("{PATH}.listenerLimit: needs connectionsPerSecond or maxPendingHandshakes (or both): a finite number > 0, an integer in [1, 1000000000]"),
            format!("{PATH}.knownGoodTtlMs: must be a finite number > 0, got 0"),
            format!("{PATH}.defense.mode: must be one of 'off', 'auto', 'on', got \"sometimes\""),
            format!("{PATH}.defense.sigma: must be a finite number in [0, 1000], got -1"),
            format!("{PATH}.defense.minConnectionsPerSecond: must be an integer in [1, 1000000000], got 0.5"),
            format!("{PATH}.defense.holdMs: must be a finite number > 0, got NaN"),
            format!("{PATH}.defense.factor: must be a finite number in (0, 1] (a rate multiplier), got 1.5"),
            format!("{PATH}.defense.newClientMaxPending: must be an integer in [1, 65535], got 0"),
            format!("{PATH}.defense.handshakeTimeoutMs: must be a finite number > 0, got -3"),
            format!("{PATH}.slowRequest.bodyTimeoutMs: unknown field; expected one of: headTimeoutMs, keepAliveTimeoutMs, maxRequestsPerConnection"),
            format!("{PATH}.slowRequest.headTimeoutMs: must be a finite number > 0, got Infinity"),
        ]
    );
    assert_eq!(
        one(json!({"ipv6PrefixLength": 56, "prefixLimit": {"ipv6PrefixLength": 64, "maxConcurrent": 10}})),
        format!("{PATH}.prefixLimit.ipv6PrefixLength: must be at most ipv6PrefixLength (56), got 64: a prefix holds whole clients")
    );
    assert_eq!(
        one(json!({"listenerLimit": {"burst": 5, "maxPendingHandshakes": 1}})),
        format!("{PATH}.listenerLimit.burst: needs connectionsPerSecond")
    );
    assert_eq!(
        one(json!({"prefixLimit": {"maxConcurrent": 0}})),
        format!("{PATH}.prefixLimit.maxConcurrent: must be an integer in [1, 1000000], got 0")
    );
}

#[test]
fn xdp_kernel_fields_beside_syn_per_second() {
    let p = ok(json!({"xdp": {"synBudgetPerSecond": 200, "maxBans": 5000, "dropFragments": true}}));
    assert_eq!(p.xdp(), None, "synPerSecond is optional");
    let k = p.xdp_kernel();
    assert_eq!(
        (k.syn_budget_per_second, k.max_bans, k.drop_fragments),
        (Some(200), Some(5000), true)
    );
    let k = ok(json!({"xdp": {}})).xdp_kernel();
    assert_eq!(
        (k.syn_budget_per_second, k.max_bans, k.drop_fragments),
        (None, None, false)
    );
    // Every offending field is named at once.
    assert_eq!(
        issues(
            json!({"xdp": {"synBudgetPerSecond": nan(), "maxBans": 100_000_000, "dropFragments": 1}})
        ),
        vec![
            format!(
                "{PATH}.xdp.synBudgetPerSecond: must be an integer in [1, 1000000000], got NaN"
            ),
            format!("{PATH}.xdp.maxBans: must be an integer in [1024, 16777216], got 100000000"),
            format!("{PATH}.xdp.dropFragments: must be a boolean, got 1"),
        ]
    );
}
