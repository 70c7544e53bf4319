use super::*;
use crate::http2::frame::{ty, ENHANCE_YOUR_CALM, NO_ERROR, PREFACE};
use crate::http2::{goaway_frame, Shed, ShedReason};
use std::cell::RefCell;
use std::rc::Rc;

const MS: u64 = crate::clock::NS_PER_MS;

/// The figures the module doc gives (per connection, besides the stream buffer).
#[test]
fn per_connection_state_stays_small() {
    assert!(std::mem::size_of::<ConnState>() <= 144);
    assert!(std::mem::size_of::<ClientToUpstream>() <= 48);
    assert!(std::mem::size_of::<UpstreamToClient>() <= 24);
    assert!(std::mem::size_of::<H2Guard>() <= 216);
    assert_eq!(std::mem::size_of::<Goaway>(), 27);
}

fn frame(t: u8, flags: u8, stream: u32, len: usize) -> Vec<u8> {
    let mut f = vec![0u8; 9 + len];
    f[..3].copy_from_slice(&(len as u32).to_be_bytes()[1..]);
    f[3] = t;
    f[4] = flags;
    f[5..9].copy_from_slice(&stream.to_be_bytes());
    f
}

/// A request HEADERS (END_HEADERS, END_STREAM) on `id`, 3 bytes of block.
fn request(id: u32) -> Vec<u8> {
    frame(ty::HEADERS, 0x5, id, 3)
}

fn rst(id: u32) -> Vec<u8> {
    frame(ty::RST_STREAM, 0, id, 4)
}

/// The upstream's response HEADERS on `id` (`end`: END_STREAM too).
fn response(id: u32, end: bool) -> Vec<u8> {
    frame(ty::HEADERS, if end { 0x5 } else { 0x4 }, id, 2)
}

fn client_start() -> Vec<u8> {
    let mut b = PREFACE.to_vec();
    b.extend(frame(ty::SETTINGS, 0, 0, 0));
    b
}

/// `(id, None)`: opened; `(id, Some(answered))`: closed.
type Log = Vec<(u32, Option<bool>)>;

/// Hooks that log every call as `(id, None)` for opened, `(id, Some(answered))` for closed,
/// and shed the stream `shed` names.
#[derive(Default, Clone)]
struct Rec {
    log: Rc<RefCell<Log>>,
    shed: Option<(u32, ShedReason)>,
}

impl StreamHooks for Rec {
    fn opened(&mut self, id: u32, _: u64) -> Result<(), Shed> {
        if let Some((s, reason)) = self.shed {
            if s == id {
                return Err(Shed { reason });
            }
        }
        self.log.borrow_mut().push((id, None));
        Ok(())
    }
    fn closed(&mut self, id: u32, answered: bool, _: u64) {
        self.log.borrow_mut().push((id, Some(answered)));
    }
}

impl Rec {
    fn take(&self) -> Log {
        std::mem::take(&mut *self.log.borrow_mut())
    }
}

#[test]
fn every_opened_stream_is_closed_exactly_once() {
    let rec = Rec::default();
    let mut g = H2Guard::with(&H2GuardConfig::default(), rec.clone(), ());
    let mut c = client_start();
    for id in [1, 3, 5, 7, 9] {
        c.extend(request(id));
    }
    assert_eq!(g.inspect_client(&c, MS), Inspect::Forward);
    let opened: Vec<_> = [1, 3, 5, 7, 9].map(|id| (id, None)).to_vec();
    assert_eq!(rec.take(), opened);
    // Stream 1: a 1xx then the final response — one `closed`, at the first HEADERS.
    let mut u = frame(ty::SETTINGS, 0, 0, 0);
    u.extend(response(1, false));
    u.extend(response(1, true));
    // Stream 3: reset by the upstream before any answer; stream 5 answered, then reset.
    u.extend(rst(3));
    u.extend(response(5, false));
    u.extend(rst(5));
    assert_eq!(g.inspect_upstream(&mut u, 2 * MS), Inspect::Forward);
    assert_eq!(
        rec.take(),
        [(1, Some(true)), (3, Some(false)), (5, Some(true))]
    );
    // Stream 7: reset by the client; its reset of stream 1 (closed) changes nothing.
    let mut c = rst(7);
    c.extend(rst(1));
    assert_eq!(g.inspect_client(&c, 3 * MS), Inspect::Forward);
    assert_eq!(rec.take(), [(7, Some(false))]);
    assert_eq!(g.state().open_streams(), 1);
    // The connection ends with stream 9 open: closed unanswered, once.
    g.finish(4 * MS);
    assert_eq!(rec.take(), [(9, Some(false))]);
    g.finish(5 * MS);
    drop(g);
    assert_eq!(rec.take(), []);
}

#[test]
fn dropping_the_guard_closes_the_streams_left_open() {
    let rec = Rec::default();
    let mut g = H2Guard::with(&H2GuardConfig::default(), rec.clone(), ());
    let mut c = client_start();
    c.extend(request(1));
    c.extend(request(3));
    assert_eq!(g.inspect_client(&c, MS), Inspect::Forward);
    let mut u = response(3, true);
    assert_eq!(g.inspect_upstream(&mut u, MS), Inspect::Forward);
    rec.take();
    drop(g);
    assert_eq!(rec.take(), [(1, Some(false))]);
}

#[test]
fn a_shed_stream_is_not_forwarded_and_the_goaway_names_the_last_forwarded() {
    for (reason, code) in [
        (ShedReason::UpstreamOverloaded, NO_ERROR),
        (ShedReason::RequestRateLimited, ENHANCE_YOUR_CALM),
    ] {
        let rec = Rec {
            shed: Some((5, reason)),
            ..Rec::default()
        };
        let mut g = H2Guard::with(&H2GuardConfig::default(), rec.clone(), ());
        g.server_preface_sent();
        let mut c = client_start();
        c.extend(request(1));
        c.extend(request(3));
        let at = c.len();
        c.extend(request(5));
        c.extend(request(7));
        assert_eq!(g.inspect_client(&c, MS), Inspect::Shed { at, reason });
        assert_eq!(g.state().shed(), Some(reason));
        assert_eq!(g.state().violation(), None);
        assert_eq!(
            g.goaway().map(|g| g.as_bytes().to_vec()),
            Some(goaway_frame(3, code).to_vec())
        );
        // Later chunks forward nothing.
        assert_eq!(
            g.inspect_client(&request(9), MS),
            Inspect::Shed { at: 0, reason }
        );
        g.finish(MS);
        // 5 was never opened, so it is never closed.
        assert_eq!(
            rec.take(),
            [(1, None), (3, None), (1, Some(false)), (3, Some(false))]
        );
    }
}

#[test]
fn max_streams_per_connection_sends_one_graceful_goaway_and_ends_past_it() {
    let config = H2GuardConfig {
        max_streams_per_connection: 3,
        ..H2GuardConfig::default()
    };
    let mut g = H2Guard::new(&config);
    g.server_preface_sent();
    let mut c = client_start();
    c.extend(request(1));
    c.extend(request(3));
    assert_eq!(g.inspect_client(&c, MS), Inspect::Forward);
    assert_eq!(g.interjection(), None);
    assert_eq!(g.inspect_client(&request(5), MS), Inspect::Forward);
    assert_eq!(g.state().draining(), Some(5));
    // Mid-frame on the upstream side: not yet.
    let mut u = response(1, true);
    assert_eq!(g.inspect_upstream(&mut u[..5], MS), Inspect::Forward);
    assert_eq!(g.interjection(), None);
    assert_eq!(g.inspect_upstream(&mut u[5..], MS), Inspect::Forward);
    let goaway = goaway_frame(5, NO_ERROR).to_vec();
    assert_eq!(
        g.interjection().map(|g| g.as_bytes().to_vec()),
        Some(goaway.clone())
    );
    assert_eq!(g.interjection(), None, "once");
    // In-flight streams go on: their answers, the client's resets and data pass.
    let mut u = response(3, true);
    assert_eq!(g.inspect_upstream(&mut u, MS), Inspect::Forward);
    assert_eq!(g.inspect_client(&rst(5), MS), Inspect::Forward);
    assert!(!g.state().is_closing());
    // A new stream after the GOAWAY is not forwarded; the connection ends, not a violation.
    let mut c = frame(ty::PING, 0, 0, 8);
    let at = c.len();
    c.extend(request(7));
    assert_eq!(g.inspect_client(&c, MS), Inspect::Drained { at });
    assert_eq!(g.state().violation(), None);
    assert_eq!(g.goaway().map(|g| g.as_bytes().to_vec()), Some(goaway));
    assert_eq!(g.state().streams_opened(), 3);
}

/// Hooks that hold stream `hold` until `ready` is set, and log what `ready` was told.
#[derive(Default, Clone)]
struct Holder {
    rec: Rec,
    hold: u32,
    ready: Rc<RefCell<bool>>,
    asked: Rc<RefCell<Vec<(u32, bool)>>>,
}

impl StreamHooks for Holder {
    fn ready(&mut self, id: u32, _: u64, may_wait: impl FnOnce() -> bool) -> bool {
        let wait = may_wait();
        self.asked.borrow_mut().push((id, wait));
        id != self.hold || *self.ready.borrow() || !wait
    }
    fn opened(&mut self, id: u32, now: u64) -> Result<(), Shed> {
        self.rec.opened(id, now)
    }
    fn closed(&mut self, id: u32, answered: bool, now: u64) {
        self.rec.closed(id, answered, now)
    }
}

/// A held HEADERS: the bytes before it go, nothing of it is counted, and inspecting it again
/// once the hooks are ready goes on as if it had never been held — whether its frame header
/// starts in the chunk or began in the one before.
#[test]
fn a_held_stream_is_inspected_again_from_its_frame_start() {
    for split in [false, true] {
        let hooks = Holder {
            hold: 3,
            ..Holder::default()
        };
        let mut g = H2Guard::with(&H2GuardConfig::default(), hooks.clone(), ());
        let mut first = client_start();
        first.extend(request(1));
        let mut second = request(3);
        second.extend(request(5));
        if split {
            // Four bytes of stream 3's frame header end the first chunk.
            first.extend(second.drain(..4));
        }
        assert_eq!(g.inspect_client(&first, MS), Inspect::Forward);
        let held = g.inspect_client(&second, MS);
        assert_eq!(held, Inspect::Hold { at: 0 }, "split {split}");
        assert_eq!(hooks.rec.take(), [(1, None)]);
        assert_eq!(g.state().streams_opened(), 1);
        // Asked again before it is ready: still held, nothing counted twice.
        assert_eq!(g.inspect_client(&second, MS), Inspect::Hold { at: 0 });
        *hooks.ready.borrow_mut() = true;
        assert_eq!(g.inspect_client(&second, MS), Inspect::Forward);
        assert_eq!(hooks.rec.take(), [(3, None), (5, None)]);
        assert_eq!(g.state().streams_opened(), 3);
        // Stream 1 ended its request (END_STREAM): holding was allowed each time.
        assert!(hooks.asked.borrow().iter().all(|(_, may_wait)| *may_wait));
    }
}

/// While one of the connection's streams still waits for client bytes (a request body),
/// `may_wait` is false: a held HEADERS would stall it.
#[test]
fn holding_is_not_allowed_while_a_request_body_is_pending() {
    let hooks = Holder {
        hold: 3,
        ..Holder::default()
    };
    let mut g = H2Guard::with(&H2GuardConfig::default(), hooks.clone(), ());
    let mut c = client_start();
    // Stream 1: HEADERS without END_STREAM (a body follows).
    c.extend(frame(ty::HEADERS, 0x4, 1, 3));
    c.extend(request(3));
    assert_eq!(g.inspect_client(&c, MS), Inspect::Forward);
    assert_eq!(*hooks.asked.borrow(), [(1, true), (3, false)]);
    assert_eq!(hooks.rec.take(), [(1, None), (3, None)]);
}
