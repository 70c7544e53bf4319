//! What the guard asks and tells outside the connection: [`StreamHooks`] hears each client
//! stream open (and may shed it) and close, [`ClientBudget`] holds the client's HTTP/2 budgets
//! over all its connections. Both have a no-op `()` implementation, the default of
//! [`H2Guard`](super::H2Guard).

use super::frame::{ENHANCE_YOUR_CALM, NO_ERROR};
use std::task::{Context, Poll};

/// Why a stream was shed (its HEADERS not forwarded, the connection ended with a GOAWAY).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ShedReason {
    /// The client is over its request budget (`request_rate_limited`): GOAWAY
    /// ENHANCE_YOUR_CALM, the same answer as a guard violation.
    RequestRateLimited,
    /// The route's upstream is at its concurrency limit (`upstream_overloaded`): GOAWAY
    /// NO_ERROR, the graceful shutdown of RFC 9113 §6.8 — the stream and every later one are
    /// above the last-stream-id, so the client knows they were not processed and may retry them
    /// on a new connection (§8.7); the fault is not the client's.
    UpstreamOverloaded,
}

impl ShedReason {
    /// The reason string of the report (`request_rate_limited`, `upstream_overloaded`).
    pub fn as_str(self) -> &'static str {
        match self {
            ShedReason::RequestRateLimited => "request_rate_limited",
            ShedReason::UpstreamOverloaded => "upstream_overloaded",
        }
    }

    /// The GOAWAY error code (RFC 9113 §7).
    pub fn error_code(self) -> u32 {
        match self {
            ShedReason::RequestRateLimited => ENHANCE_YOUR_CALM,
            ShedReason::UpstreamOverloaded => NO_ERROR,
        }
    }
}

/// A stream the hooks refused ([`StreamHooks::opened`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shed {
    /// Why.
    pub reason: ShedReason,
}

/// Told about each client stream of one connection, in the order the guard sees them.
///
/// Every stream `opened` accepted gets exactly one `closed`: at the upstream's first HEADERS on
/// it (`answered = true`; a 1xx informational HEADERS counts), or unanswered (`false`) when it
/// is reset in either direction, ended by both sides without a response HEADERS, or still open
/// when the connection ends ([`H2Guard::finish`](super::H2Guard::finish)). At most
/// `maxConcurrentStreams` streams are open at once, so at most that many are waiting for
/// `closed`.
pub trait StreamHooks {
    /// Whether the hooks read `now_ns`: when false (the no-op `()`), the guard passes 0 and
    /// reads no clock for them.
    const TIMED: bool = true;
    /// The client opened stream `id` (its HEADERS frame is about to be forwarded), at `now_ns`
    /// (CLOCK_MONOTONIC ns). Err(shed): the HEADERS frame is not forwarded; the connection ends
    /// with a GOAWAY whose last-stream-id is the last forwarded stream (RFC 9113 §6.8: the client
    /// may retry it) and whose error code is [`ShedReason::error_code`]. A shed stream gets no
    /// `closed`. (A single stream cannot be refused alone: its header block already changed
    /// the client's HPACK state, which the upstream would then miss.)
    fn opened(&mut self, id: u32, now_ns: u64) -> Result<(), Shed>;
    /// Asked for a HEADERS frame that opens stream `id`, before any check of it: `false` holds
    /// the frame and every byte after it (the copy loop forwards what came before, then waits
    /// for [`StreamHooks::poll_ready`] and inspects the frame again from its start, asking
    /// again). A stream waiting for room at the upstream. `may_wait()` is false when holding
    /// could stall the connection's own streams (one of them still waits for client bytes:
    /// a request body behind the held frame; a scan of the open streams, so ask it only when
    /// about to hold); the hooks must then say `true`. Default: `true`.
    #[inline(always)]
    fn ready(&mut self, _id: u32, _now_ns: u64, _may_wait: impl FnOnce() -> bool) -> bool {
        true
    }
    /// Ready once a frame held by [`StreamHooks::ready`] may be inspected again (it registers
    /// `cx` to be woken). Default: ready.
    #[inline(always)]
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<()> {
        Poll::Ready(())
    }
    /// The guard finished a chunk read from the client (everything in it inspected; not called
    /// for a chunk it held or ended the connection in). Default: nothing.
    #[inline(always)]
    fn chunk_done(&mut self) {}
    /// Stream `id` got its response HEADERS (`answered`) or was reset / closed (`!answered`).
    fn closed(&mut self, id: u32, answered: bool, now_ns: u64);
}

impl StreamHooks for () {
    const TIMED: bool = false;
    #[inline(always)]
    fn opened(&mut self, _: u32, _: u64) -> Result<(), Shed> {
        Ok(())
    }
    #[inline(always)]
    fn closed(&mut self, _: u32, _: bool, _: u64) {}
}

/// One of the three rates the guard counts per connection and per client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Budget {
    /// New client streams (`maxStreamsPerSecond`).
    Streams = 0,
    /// RST_STREAM frames that end an open client stream, either direction (`maxResetsPerSecond`).
    Resets = 1,
    /// Client control frames (`maxControlFramesPerSecond`).
    ControlFrames = 2,
}

/// The client's budgets over all its connections (the protection engine's per-client table).
/// Asked after the connection's own budget admitted the event, so a refusal by either consumes
/// nothing of the client's.
pub trait ClientBudget {
    /// Admits one event of `kind` at `now_ns` and debits it; false: over the client's budget.
    fn admit(&self, kind: Budget, now_ns: u64) -> bool;
    /// Whether one event of `kind` would be admitted at `now_ns` (nothing debited).
    fn conforms(&self, kind: Budget, now_ns: u64) -> bool;
}

impl ClientBudget for () {
    #[inline(always)]
    fn admit(&self, _: Budget, _: u64) -> bool {
        true
    }
    #[inline(always)]
    fn conforms(&self, _: Budget, _: u64) -> bool {
        true
    }
}
