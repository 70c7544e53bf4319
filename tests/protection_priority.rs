//! `Engine::is_priority`: a client may use a route's reserved capacity only when it was
//! known-good before the overload episode (minus the seasoning) began — with injected time.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;
use common::engine::{engine, v4, S, T0};
use rampart::capacity::PRIORITY_SEASONING_NS;
use serde_json::json;

#[test]
fn standing_earned_before_the_overload_buys_priority_and_is_kept_on_refresh() {
    let e = engine(json!({ "knownGoodTtlMs": 60_000 }));
    let (old, late) = (v4(0x0a00_0001), v4(0x0a00_0002));
    drop(e.admit(old, T0));
    assert!(e.mark_known_good(old, T0));
    // The overload begins at T0 + 30 s: `since` = its start minus the 10 s seasoning.
    let start = T0 + 30 * S;
    let since = start - PRIORITY_SEASONING_NS;
    assert!(e.is_priority(old, start, since));
    // Earned 5 s before the overload: inside the seasoning, no priority.
    drop(e.admit(late, start - 5 * S));
    assert!(e.mark_known_good(late, start - 5 * S));
    assert!(e.is_known_good(late, start));
    assert!(!e.is_priority(late, start, since));
    // Refreshing the old mark during the flood keeps its first-marked time; the late one's
    // refresh does not make it older.
    for t in [start + S, start + 50 * S] {
        assert!(e.mark_known_good(old, t));
        assert!(e.mark_known_good(late, t));
        assert!(e.is_priority(old, t, since));
        assert!(!e.is_priority(late, t, since));
    }
    // A later episode (starting at T0 + 100 s) sees the late client seasoned.
    let since2 = T0 + 100 * S - PRIORITY_SEASONING_NS;
    assert!(e.is_priority(late, T0 + 100 * S, since2));
    // Unknown clients and clients without a policy are never priority.
    assert!(!e.is_priority(v4(0x0a00_0003), start, since));
}

#[test]
fn a_lapsed_mark_earned_again_starts_over() {
    let e = engine(json!({ "knownGoodTtlMs": 10_000 }));
    let a = v4(0x0a00_0010);
    drop(e.admit(a, T0));
    assert!(e.mark_known_good(a, T0));
    // Marked at T0: priority for an episode whose `since` is T0 or later, not earlier.
    assert!(e.is_priority(a, T0 + S, T0));
    assert!(!e.is_priority(a, T0 + S, T0 - S));
    // The mark lapses at T0 + 10 s: no priority whatever `since`.
    assert!(!e.is_priority(a, T0 + 10 * S, T0 + 10 * S));
    // Earned again at T0 + 20 s: its age starts there.
    drop(e.admit(a, T0 + 20 * S));
    assert!(e.mark_known_good(a, T0 + 20 * S));
    assert!(!e.is_priority(a, T0 + 21 * S, T0 + 19 * S));
    assert!(e.is_priority(a, T0 + 21 * S, T0 + 20 * S));
}
