//! The wait queue on a real (current-thread) tokio runtime: who is served, in which order, and
//! what a timeout counts.

use super::*;
use crate::config::proxy::{CapacityConfig, ConcurrencyMode};
use std::future::poll_fn;

fn fixed(limit: u32, timeout_ms: u32, max_queue: u32) -> Arc<Capacity> {
    Arc::new(Capacity::new(CapacityConfig {
        mode: ConcurrencyMode::Fixed,
        limit,
        priority_share: 0.0,
        queue_timeout_ms: timeout_ms,
        max_queue,
        ..CapacityConfig::default_for(true)
    }))
}

fn queued(a: Admit<'_>) -> Queued<'_> {
    match a {
        Admit::Wait(q) => q,
        other => panic!("expected a wait, got {other:?}"),
    }
}

/// Polls `q` once, outside any wake-up.
fn poll_once(q: &mut Queued<'_>) -> Poll<Result<Permit, Overloaded>> {
    let waker = std::task::Waker::noop();
    q.poll_permit(&mut Context::from_waker(waker), 0)
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

#[test]
fn a_release_admits_the_oldest_waiter_and_nobody_overtakes_it() {
    rt().block_on(async {
        let cap = fixed(1, 1000, 8);
        let first = cap.take_now(Class::Other, 0).unwrap();
        let mut a = queued(cap.admit(Class::Other, 0, || true));
        let mut b = queued(cap.admit(Class::Other, 0, || true));
        assert_eq!(cap.snapshot(0).queued, 2);
        assert!(poll_once(&mut a).is_pending());
        drop(first);
        // The room is a's; a new request does not take it.
        assert!(cap.take_now(Class::Other, 0).is_none());
        let pa = poll_fn(|cx| a.poll_permit(cx, 0)).await.unwrap();
        assert!(poll_once(&mut b).is_pending());
        assert_eq!((cap.in_flight(), cap.snapshot(0).queued), (1, 1));
        drop(pa);
        let pb = poll_fn(|cx| b.poll_permit(cx, 0)).await.unwrap();
        let s = cap.snapshot(0);
        assert_eq!((s.in_flight, s.queued, s.waited, s.refused), (1, 0, 2, 0));
        drop(pb);
    });
}

#[test]
fn priority_waiters_are_served_first() {
    rt().block_on(async {
        let cap = fixed(1, 1000, 8);
        let first = cap.take_now(Class::Other, 0).unwrap();
        let mut other = queued(cap.admit(Class::Other, 0, || true));
        assert!(poll_once(&mut other).is_pending());
        let mut prio = queued(cap.admit(Class::Priority, 0, || true));
        assert!(poll_once(&mut prio).is_pending());
        drop(first);
        let p = poll_fn(|cx| prio.poll_permit(cx, 0)).await.unwrap();
        assert_eq!(p.class(), Class::Priority);
        assert!(poll_once(&mut other).is_pending());
        drop(p);
        let o = poll_fn(|cx| other.poll_permit(cx, 0)).await.unwrap();
        assert_eq!(o.class(), Class::Other);
    });
}

#[test]
fn a_wait_ends_at_queue_timeout_with_a_counted_refusal() {
    rt().block_on(async {
        const MS: u64 = crate::clock::NS_PER_MS;
        let cap = fixed(1, 250, 8);
        let _first = cap.take_now(Class::Other, 0).unwrap();
        let mut q = queued(cap.admit(Class::Other, 10 * MS, || true));
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        assert!(q.poll_permit(&mut cx, 259 * MS).is_pending());
        let err = match q.poll_permit(&mut cx, 260 * MS) {
            Poll::Ready(Err(e)) => e,
            other => panic!("expected the timeout, got {other:?}"),
        };
        assert_eq!((err.in_flight, err.limit), (1, 1));
        let s = cap.snapshot(260 * MS);
        assert_eq!(
            (
                s.queued,
                s.waited,
                s.queue_timeouts,
                s.refused,
                s.overloaded
            ),
            (0, 1, 1, 1, true)
        );
    });
}

#[test]
fn tick_wakes_waiters_so_they_see_their_deadline() {
    rt().block_on(async {
        let cap = fixed(1, 20, 8);
        let _first = cap.take_now(Class::Other, crate::clock::now_ns()).unwrap();
        let mut q = queued(cap.admit(Class::Other, crate::clock::now_ns(), || true));
        let ticker = {
            let cap = cap.clone();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                    cap.tick(crate::clock::now_ns());
                }
            })
        };
        let r = poll_fn(|cx| q.poll_permit(cx, crate::clock::now_ns())).await;
        ticker.abort();
        assert!(r.is_err());
        assert_eq!(cap.snapshot(0).queue_timeouts, 1);
    });
}

#[test]
fn a_removed_route_refuses_its_waiters() {
    rt().block_on(async {
        let cap = fixed(1, 60_000, 8);
        let _first = cap.take_now(Class::Other, 0).unwrap();
        let mut q = queued(cap.admit(Class::Other, 0, || true));
        assert!(poll_once(&mut q).is_pending());
        cap.close_queue();
        assert!(poll_fn(|cx| q.poll_permit(cx, 0)).await.is_err());
        assert!(matches!(
            cap.admit(Class::Other, 0, || true),
            Admit::Refused(_)
        ));
    });
}

#[test]
fn no_queue_or_a_full_one_refuses_at_once() {
    rt().block_on(async {
        let cap = fixed(1, 0, 8);
        let _p = cap.take_now(Class::Other, 0).unwrap();
        assert!(matches!(
            cap.admit(Class::Other, 0, || true),
            Admit::Refused(_)
        ));
        let cap = fixed(1, 1000, 1);
        let _p = cap.take_now(Class::Other, 0).unwrap();
        let _q = queued(cap.admit(Class::Other, 0, || true));
        assert!(matches!(
            cap.admit(Class::Other, 0, || true),
            Admit::Refused(_)
        ));
        // `may_wait` false: refused rather than queued (and asked only when it could wait).
        let cap = fixed(1, 1000, 8);
        let _p = cap.take_now(Class::Other, 0).unwrap();
        assert!(matches!(
            cap.admit(Class::Other, 0, || false),
            Admit::Refused(_)
        ));
        let s = cap.snapshot(0);
        assert_eq!((s.waited, s.refused), (0, 1));
    });
}

#[test]
fn a_waiter_that_leaves_passes_its_wake_up_on() {
    rt().block_on(async {
        let cap = fixed(1, 1000, 8);
        let first = cap.take_now(Class::Other, 0).unwrap();
        let mut a = queued(cap.admit(Class::Other, 0, || true));
        let mut b = queued(cap.admit(Class::Other, 0, || true));
        assert!(poll_once(&mut a).is_pending());
        assert!(poll_once(&mut b).is_pending());
        drop(first); // wakes a …
        drop(a); // … which leaves: b gets the room
        let pb = poll_fn(|cx| b.poll_permit(cx, 0)).await.unwrap();
        assert_eq!((cap.in_flight(), cap.snapshot(0).queued), (1, 0));
        drop(pb);
    });
}

#[test]
fn a_larger_limit_lets_waiters_in() {
    rt().block_on(async {
        let cfg = CapacityConfig {
            mode: ConcurrencyMode::Fixed,
            limit: 1,
            priority_share: 0.0,
            ..CapacityConfig::default_for(true)
        };
        let cap = Arc::new(Capacity::new(cfg));
        let _first = cap.take_now(Class::Other, 0).unwrap();
        let mut a = queued(cap.admit(Class::Other, 0, || true));
        let mut b = queued(cap.admit(Class::Other, 0, || true));
        assert!(poll_once(&mut a).is_pending());
        assert!(poll_once(&mut b).is_pending());
        cap.set_config(CapacityConfig { limit: 3, ..cfg });
        let pa = poll_fn(|cx| a.poll_permit(cx, 0)).await.unwrap();
        let pb = poll_fn(|cx| b.poll_permit(cx, 0)).await.unwrap();
        assert_eq!(cap.in_flight(), 3);
        drop((pa, pb));
    });
}
