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

/// A request of `class` at time 0 that must wait.
fn wait(cap: &Arc<Capacity>, class: Class) -> Queued<'_> {
    queued(cap.admit(class, 0, || true))
}

/// Whether `a` is a refusal.
fn refused(a: Admit<'_>) -> bool {
    matches!(a, Admit::Refused(_))
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
        let mut a = wait(&cap, Class::Other);
        let mut b = wait(&cap, Class::Other);
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
        let mut other = wait(&cap, Class::Other);
        assert!(poll_once(&mut other).is_pending());
        let mut prio = wait(&cap, Class::Priority);
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
fn a_waiter_wakes_at_its_own_deadline() {
    rt().block_on(async {
        let cap = fixed(1, 20, 8);
        let _first = cap.take_now(Class::Other, crate::clock::now_ns()).unwrap();
        let mut q = queued(cap.admit(Class::Other, crate::clock::now_ns(), || true));
        // Nothing ticks and nothing is released: only the waiter's timer can end the wait.
        let r = poll_fn(|cx| q.poll_permit(cx, crate::clock::now_ns())).await;
        assert!(r.is_err());
        assert_eq!(cap.snapshot(0).queue_timeouts, 1);
    });
}

#[test]
fn a_waiter_polled_without_a_wake_up_does_not_overtake_an_older_one() {
    rt().block_on(async {
        let cap = fixed(1, 1000, 8);
        let first = cap.take_now(Class::Other, 0).unwrap();
        let mut a = wait(&cap, Class::Other);
        let mut b = wait(&cap, Class::Other);
        assert!(poll_once(&mut a).is_pending());
        assert!(poll_once(&mut b).is_pending());
        drop(first);
        // b's task runs first (another of its streams, say): the room is a's, a waited longer.
        assert!(poll_once(&mut b).is_pending());
        assert_eq!(cap.in_flight(), 0);
        let pa = poll_fn(|cx| a.poll_permit(cx, 0)).await.unwrap();
        assert_eq!((cap.in_flight(), cap.snapshot(0).queued), (1, 1));
        drop(pa);
        let pb = poll_fn(|cx| b.poll_permit(cx, 0)).await.unwrap();
        drop(pb);
    });
}

#[test]
fn a_removed_route_refuses_its_waiters() {
    rt().block_on(async {
        let cap = fixed(1, 60_000, 8);
        let _first = cap.take_now(Class::Other, 0).unwrap();
        let mut q = wait(&cap, Class::Other);
        assert!(poll_once(&mut q).is_pending());
        cap.close_queue();
        assert!(poll_fn(|cx| q.poll_permit(cx, 0)).await.is_err());
        assert!(refused(cap.admit(Class::Other, 0, || true)));
    });
}

#[test]
fn no_queue_or_a_full_one_refuses_at_once() {
    rt().block_on(async {
        let cap = fixed(1, 0, 8);
        let _p = cap.take_now(Class::Other, 0).unwrap();
        assert!(refused(cap.admit(Class::Other, 0, || true)));
        let cap = fixed(1, 1000, 1);
        let _p = cap.take_now(Class::Other, 0).unwrap();
        let _q = wait(&cap, Class::Other);
        assert!(refused(cap.admit(Class::Other, 0, || true)));
        // `may_wait` false: refused rather than queued (and asked only when it could wait).
        let cap = fixed(1, 1000, 8);
        let _p = cap.take_now(Class::Other, 0).unwrap();
        assert!(refused(cap.admit(Class::Other, 0, || false)));
        let s = cap.snapshot(0);
        assert_eq!((s.waited, s.refused), (0, 1));
    });
}

#[test]
fn a_waiter_that_leaves_passes_its_wake_up_on() {
    rt().block_on(async {
        let cap = fixed(1, 1000, 8);
        let first = cap.take_now(Class::Other, 0).unwrap();
        let mut a = wait(&cap, Class::Other);
        let mut b = wait(&cap, Class::Other);
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
        let mut a = wait(&cap, Class::Other);
        let mut b = wait(&cap, Class::Other);
        assert!(poll_once(&mut a).is_pending());
        assert!(poll_once(&mut b).is_pending());
        cap.set_config(CapacityConfig { limit: 3, ..cfg });
        let pa = poll_fn(|cx| a.poll_permit(cx, 0)).await.unwrap();
        let pb = poll_fn(|cx| b.poll_permit(cx, 0)).await.unwrap();
        assert_eq!(cap.in_flight(), 3);
        drop((pa, pb));
    });
}

#[test]
fn a_batched_waiter_is_woken_once_a_batch_is_free_and_takes_it_whole() {
    rt().block_on(async {
        let cap = fixed(32, 1000, 8);
        assert_eq!(cap.wake_batch(), 2);
        let mut held: Vec<Permit> = (0..32)
            .map(|_| cap.take_now(Class::Other, 0).unwrap())
            .collect();
        let mut a = wait(&cap, Class::Other).batched();
        let mut b = wait(&cap, Class::Other).batched();
        assert!(poll_once(&mut a).is_pending());
        assert!(poll_once(&mut b).is_pending());
        // One free permit: less than a batch, nobody is woken.
        held.pop();
        assert!(poll_once(&mut a).is_pending());
        assert_eq!(cap.in_flight(), 31);
        // Two: a is woken, takes one, and its later stream the other.
        held.pop();
        let pa = poll_fn(|cx| a.poll_permit(cx, 0)).await.unwrap();
        let pa2 = cap.take_after_wait(Class::Other, 0).unwrap();
        cap.pass_on();
        assert_eq!((cap.in_flight(), cap.snapshot(0).queued), (32, 1));
        assert!(poll_once(&mut b).is_pending());
        drop((pa, pa2, held));
        let pb = poll_fn(|cx| b.poll_permit(cx, 0)).await.unwrap();
        drop(pb);
        assert_eq!(cap.in_flight(), 0);
    });
}

#[test]
fn parked_permits_count_until_their_time_and_a_removed_route_frees_them() {
    const MS: u64 = 1_000_000;
    let cap = fixed(4, 1000, 8);
    let a = cap.take_now(Class::Other, 0).unwrap();
    let b = cap.take_now(Class::Other, 0).unwrap();
    cap.park(vec![(300 * MS, a), (700 * MS, b)]);
    assert_eq!((cap.in_flight(), cap.parked()), (2, 2));
    // Parked slots hold no reference to their route (a removed route is freed whatever parks).
    assert_eq!(Arc::strong_count(&cap), 1);
    cap.tick(299 * MS);
    assert_eq!((cap.in_flight(), cap.parked()), (2, 2));
    cap.tick(300 * MS);
    assert_eq!((cap.in_flight(), cap.parked()), (1, 1));
    // The route goes away: what it still parks is released (and frees the capacity).
    cap.close_queue();
    assert_eq!((cap.in_flight(), cap.parked()), (0, 0));
    assert_eq!(Arc::strong_count(&cap), 1);
}
