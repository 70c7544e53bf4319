//! `'ban'` events from the engine up, with injected time: the notes an engine gives its ban
//! sink (start, extension, escalation level, reason, origin) and what the tracker makes of them.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;
use common::engine::*;
use rampart::events::ban::{BanAction, BanChange, BanTracker};
use rampart::protection::{BanOrigin, Engine};
use serde_json::json;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

type Notes = Arc<Mutex<Vec<BanChange>>>;

fn collect(e: &Engine) -> Notes {
    let notes: Notes = Arc::default();
    let n = notes.clone();
    e.set_ban_sink(Some(Arc::new(move |note| {
        n.lock().unwrap().push(BanChange::from_note(443, note))
    })));
    notes
}

fn take(n: &Notes) -> Vec<BanChange> {
    std::mem::take(&mut *n.lock().unwrap())
}

#[test]
fn a_box_starts_extends_escalates_and_expires() {
    let e = engine(json!({
        "rateLimit": {"connectionsPerSecond": 1, "burst": 1},
        "penaltyBox": {"durationMs": 10_000,
                       "escalation": {"factor": 2, "maxDurationMs": 35_000, "memoryMs": 60_000}},
    }));
    let notes = collect(&e);
    let mut tracker = BanTracker::default();
    let a: IpAddr = "192.0.2.66".parse().unwrap();
    let t = T0;
    assert!(e.admit(a, t).verdict.is_none());
    assert!(e.admit(a, t).verdict.is_some()); // rate_limited: boxed 10 s
    let n = take(&notes);
    assert_eq!(n.len(), 1);
    assert!(n[0].started);
    assert_eq!(
        (n[0].level, n[0].reason, n[0].deadline_ns),
        (0, "rate_limited", Some(t + 10_000 * MS))
    );
    assert_eq!(n[0].origin, BanOrigin::Local);
    assert_eq!(n[0].net.to_string(), "192.0.2.66/32");
    let got = tracker.tick(n, t);
    assert_eq!(
        got.iter().map(|r| r.action).collect::<Vec<_>>(),
        [BanAction::Start]
    );

    // Knocking over the limit while boxed moves the deadline: extensions, coalesced per tick.
    for k in 1..=3 {
        assert!(e.admit(a, t + k * S / 4).verdict.is_some());
    }
    let n = take(&notes);
    assert_eq!(n.len(), 3);
    assert!(n.iter().all(|c| !c.started && c.level == 0));
    let got = tracker.tick(n, t + 2 * S);
    assert_eq!(
        got.iter().map(|r| r.action).collect::<Vec<_>>(),
        [BanAction::Extend]
    );
    assert_eq!(got[0].change.deadline_ns, Some(t + 3 * S / 4 + 10_000 * MS));

    // Quiet: the tracker notices the expiry at the deadline.
    let end = t + 3 * S / 4 + 10_000 * MS;
    assert!(tracker.tick(take(&notes), end - MS).is_empty());
    let got = tracker.tick(take(&notes), end);
    assert_eq!(
        got.iter().map(|r| r.action).collect::<Vec<_>>(),
        [BanAction::Expire]
    );

    // Boxed again within the memory: level 1, twice the duration.
    let t2 = end + 5 * S;
    assert!(e.admit(a, t2).verdict.is_none());
    assert!(e.admit(a, t2).verdict.is_some());
    let n = take(&notes);
    assert_eq!(n.len(), 1);
    assert!(n[0].started);
    assert_eq!((n[0].level, n[0].deadline_ns), (1, Some(t2 + 20_000 * MS)));
    let got = tracker.tick(n, t2);
    assert_eq!(
        got.iter().map(|r| r.action).collect::<Vec<_>>(),
        [BanAction::Escalate]
    );
}

#[test]
fn boxes_received_from_another_node_carry_its_id_and_prefixes_their_cidr() {
    let e = engine(json!({}));
    let notes = collect(&e);
    let a: IpAddr = "198.51.100.9".parse().unwrap();
    let node: Arc<str> = Arc::from("node-b");
    e.box_client_from(a, 5 * S, T0, BanOrigin::Cluster(Some(node.clone())));
    // The same deadline again is no change; a later one is an extension.
    e.box_client_from(a, 5 * S, T0, BanOrigin::Cluster(Some(node.clone())));
    e.box_client_from(a, 6 * S, T0, BanOrigin::Cluster(Some(node.clone())));
    e.box_prefix_from(
        "198.51.100.0/24".parse().unwrap(),
        5 * S,
        T0,
        BanOrigin::Cluster(None),
    );
    let n = take(&notes);
    let got: Vec<_> = n
        .iter()
        .map(|c| (c.net.to_string(), c.started, c.reason, c.origin.clone()))
        .collect();
    let from_b = BanOrigin::Cluster(Some(node));
    assert_eq!(
        got,
        [
            (
                "198.51.100.9/32".into(),
                true,
                "penalty_boxed",
                from_b.clone()
            ),
            ("198.51.100.9/32".into(), false, "penalty_boxed", from_b),
            (
                "198.51.100.0/24".into(),
                true,
                "penalty_boxed",
                BanOrigin::Cluster(None)
            ),
        ]
    );
    let mut tracker = BanTracker::default();
    let got = tracker.tick(n, T0);
    let evs: Vec<String> = got
        .iter()
        .map(|r| serde_json::to_string(&r.event(Some("l"), T0, 1_000)).unwrap())
        .collect();
    assert_eq!(
        evs,
        [
            r#"{"action":"start","origin":"cluster","node":"node-b","ip":"198.51.100.9","port":443,"listener":"l","reason":"penalty_boxed","note":null,"level":0,"remainingMs":6000,"expiresAt":7000}"#,
            r#"{"action":"start","origin":"cluster","node":null,"ip":"198.51.100.0/24","port":443,"listener":"l","reason":"penalty_boxed","note":null,"level":0,"remainingMs":5000,"expiresAt":6000}"#,
        ]
    );
}
