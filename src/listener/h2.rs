//! The HTTP/2 guard in the pump phase (README: HTTP/2 guard): [`H2Inspector`] runs one [`H2Guard`] over
//! both directions of a terminated connection whose ALPN is `h2`, as the copy loop's
//! [`Inspector`].
//!
//! On a violation (enforce mode) it
//! 1. calls `on_violation` at once — the connection task counts it against the client
//!    (`boxAfterViolations`) before anything is written, so a reconnect that follows the GOAWAY
//!    already finds the client boxed;
//! 2. lets the client direction forward only the bytes before the violating frame and stop,
//!    which shuts the upstream's write side;
//! 3. stops the upstream direction at its next frame boundary (at once when it is on one), and
//!    has the GOAWAY (ENHANCE_YOUR_CALM, last forwarded stream id) written to the client after
//!    the last forwarded byte, before the client is shut;
//! 4. gives the two directions [`CLOSE_GRACE`] to finish, after which the pair is dropped as it
//!    is (an upstream stuck mid-frame gets no more time).
//!
//! A protocol error (no connection preface, an interrupted header block) ends the connection the
//! same way, with a PROTOCOL_ERROR GOAWAY (none after a bad preface: that client does not speak
//! HTTP/2), and is not a flood. In observe mode a violation is reported and the guard steps out
//! of the way: every later byte is forwarded as it is, uninspected.
//!
//! Cost per chunk: the guard's header walk, and one clock read when a frame needs the time (a new
//! stream, a reset, a control frame); nothing allocates except, once per ending connection, the
//! grace timer.

use crate::clock;
use crate::http2::{H2Guard, H2GuardConfig, Inspect, ProtocolError, Violation};
use crate::proxy::copy::{Dir, Flow, Inspector, FAREWELL_MAX};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Sleep;

/// How long an ending connection may take to forward its last frames and the GOAWAY.
pub const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// Why the guard ended a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum H2End {
    /// A limit was exceeded (`h2_flood`).
    Violation(Violation),
    /// Not HTTP/2 the guard can follow (`errorsByReason.h2_protocol_error`).
    Protocol(ProtocolError),
}

/// The guard as a copy-loop inspector; `on_violation` is called once, at the first violation.
pub struct H2Inspector<F: FnMut(Violation)> {
    guard: H2Guard,
    observe: bool,
    /// Observe mode after a violation: inspect nothing more.
    off: bool,
    reported: bool,
    on_violation: F,
    give_up: Option<Pin<Box<Sleep>>>,
}

impl<F: FnMut(Violation)> H2Inspector<F> {
    /// A guard for a new connection; `observe`: report violations but forward everything.
    pub fn new(config: &H2GuardConfig, observe: bool, on_violation: F) -> Self {
        H2Inspector {
            guard: H2Guard::new(config),
            observe,
            off: false,
            reported: false,
            on_violation,
            give_up: None,
        }
    }

    /// Why the guard ended the connection; `None` when it did not (and in observe mode).
    pub fn ended(&self) -> Option<H2End> {
        if self.off {
            return None;
        }
        let state = self.guard.state();
        match (state.violation(), state.protocol_error()) {
            (Some(v), _) => Some(H2End::Violation(v)),
            (None, Some(e)) => Some(H2End::Protocol(e)),
            (None, None) => None,
        }
    }

    fn ending(&mut self, at: usize) -> Flow {
        if self.give_up.is_none() {
            self.give_up = Some(Box::pin(tokio::time::sleep(CLOSE_GRACE)));
        }
        Flow::Stop(at)
    }
}

impl<F: FnMut(Violation)> Inspector for H2Inspector<F> {
    #[inline]
    fn inspect(&mut self, dir: Dir, chunk: &mut [u8]) -> Flow {
        if self.off {
            return Flow::All;
        }
        let outcome = match dir {
            Dir::ToUpstream => self.guard.inspect_client_clocked(chunk, clock::now_ns),
            Dir::ToClient => self.guard.inspect_upstream_clocked(chunk, clock::now_ns),
        };
        match outcome {
            Inspect::Forward => Flow::All,
            Inspect::Violation { at, violation } => {
                if !self.reported {
                    self.reported = true;
                    (self.on_violation)(violation);
                }
                if self.observe {
                    self.off = true;
                    return Flow::All;
                }
                self.ending(at)
            }
            Inspect::ProtocolError { at, .. } => self.ending(at),
        }
    }

    #[inline]
    fn stopped(&self, dir: Dir) -> bool {
        if self.off || !self.guard.state().is_closing() {
            return false;
        }
        match dir {
            Dir::ToUpstream => true,
            Dir::ToClient => self.guard.upstream().at_frame_boundary(),
        }
    }

    fn farewell(&self, dir: Dir, out: &mut [u8; FAREWELL_MAX]) -> usize {
        if self.off || dir != Dir::ToClient {
            return 0;
        }
        match self.guard.goaway() {
            Some(g) => {
                let b = g.as_bytes();
                out[..b.len()].copy_from_slice(b);
                b.len()
            }
            None => 0,
        }
    }

    fn poll_give_up(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        match self.give_up.as_mut() {
            Some(s) => s.as_mut().poll(cx),
            None => Poll::Pending,
        }
    }
}
