//! The per-connection state both inspectors update ([`ConnState`]), the lazily read time of a
//! chunk ([`Now`]), and the frame-header reader both directions share.

use super::frame::{FrameHeader, FRAME_HEADER_LEN};
use super::hooks::{Budget, ClientBudget, ShedReason, StreamHooks};
use super::limits::{Check, End, H2GuardConfig, Inspect, ProtocolError, Violation};
use super::streams::OpenStreams;
use crate::gcra::{Gcra, NS_PER_SEC};

/// The time a chunk is inspected at (CLOCK_MONOTONIC ns), asked for only by the decisions that
/// need one (opening a stream, a reset that ends an open stream, a control frame), so a chunk
/// with none — most of the upstream's — costs no clock read. A `u64` is a time given up front.
pub trait Now {
    /// The time of this chunk's decisions (the same value every time it is asked within one
    /// chunk).
    fn now(&mut self) -> u64;
}

impl Now for u64 {
    #[inline]
    fn now(&mut self) -> u64 {
        *self
    }
}

/// A [`Now`] that reads `clock` the first time a decision needs it and reuses that reading for
/// the rest of the chunk.
pub struct LazyNow<F: FnMut() -> u64> {
    clock: F,
    at: Option<u64>,
}

impl<F: FnMut() -> u64> LazyNow<F> {
    /// A reading of `clock` (CLOCK_MONOTONIC ns) deferred until a decision needs it.
    pub fn new(clock: F) -> Self {
        LazyNow { clock, at: None }
    }
}

impl<F: FnMut() -> u64> Now for LazyNow<F> {
    #[inline]
    fn now(&mut self) -> u64 {
        *self.at.get_or_insert_with(&mut self.clock)
    }
}

/// Per-connection state both directions update: the open client streams, the three GCRA words,
/// the last stream forwarded, and whether (and why) the connection is ending.
///
/// Memory: at most 144 bytes plus 8 bytes per open stream, reserved once (see `streams.rs`).
#[derive(Debug)]
pub struct ConnState {
    pub(super) max_concurrent_streams: u32,
    pub(super) max_header_block_bytes: u64,
    pub(super) max_continuation_frames: u32,
    pub(super) streams_gcra: Gcra,
    pub(super) resets_gcra: Gcra,
    pub(super) control_gcra: Gcra,
    pub(super) streams_tat: u64,
    pub(super) resets_tat: u64,
    pub(super) control_tat: u64,
    pub(super) streams: OpenStreams,
    /// Highest client stream id whose opening HEADERS was forwarded (0: none).
    pub(super) last_stream_id: u32,
    pub(super) end: Option<End>,
    pub(super) max_streams_per_connection: u32,
    /// Client streams opened so far.
    pub(super) opened: u32,
    /// The last-stream-id of the graceful GOAWAY of `max_streams_per_connection` (0: none due).
    pub(super) drain_last: u32,
    /// That GOAWAY still has to be written to the client.
    pub(super) goaway_due: bool,
    /// The upstream answered (sent its first HEADERS on) at least one client stream.
    pub(super) answered: bool,
}

impl ConnState {
    /// Fresh state for a connection (all budgets full).
    pub fn new(config: &H2GuardConfig) -> ConnState {
        let max = config.max_concurrent_streams;
        let twice = |rate: f64| (2.0 * rate).ceil().max(1.0) as u64;
        ConnState {
            max_concurrent_streams: max,
            max_header_block_bytes: u64::from(config.max_header_block_bytes),
            max_continuation_frames: config.max_continuation_frames,
            streams_gcra: Gcra::per_period(
                config.max_streams_per_second,
                NS_PER_SEC,
                u64::from(max.max(1)),
            ),
            resets_gcra: Gcra::per_period(
                config.max_resets_per_second,
                NS_PER_SEC,
                twice(config.max_resets_per_second),
            ),
            control_gcra: Gcra::per_period(
                config.max_control_frames_per_second,
                NS_PER_SEC,
                twice(config.max_control_frames_per_second),
            ),
            streams_tat: 0,
            resets_tat: 0,
            control_tat: 0,
            streams: OpenStreams::new(max),
            last_stream_id: 0,
            end: None,
            max_streams_per_connection: config.max_streams_per_connection.max(1),
            opened: 0,
            drain_last: 0,
            goaway_due: false,
            answered: false,
        }
    }

    /// Whether the upstream answered at least one client stream (its first HEADERS on it): a
    /// connection that moved only SETTINGS, PINGs and streams it reset has exchanged nothing a
    /// client's standing can rest on.
    pub fn answered(&self) -> bool {
        self.answered
    }

    /// Client streams open now (opened, not yet ended by both sides nor reset).
    pub fn open_streams(&self) -> usize {
        self.streams.len()
    }

    /// The highest client stream id forwarded to the upstream (0 before the first request): the
    /// GOAWAY's last stream id.
    pub fn last_stream_id(&self) -> u32 {
        self.last_stream_id
    }

    /// The violation that is ending the connection, if any.
    pub fn violation(&self) -> Option<Violation> {
        match self.end {
            Some(End::Violation(v)) => Some(v),
            _ => None,
        }
    }

    /// The protocol error that is ending the connection, if any.
    pub fn protocol_error(&self) -> Option<ProtocolError> {
        match self.end {
            Some(End::Protocol(e)) => Some(e),
            _ => None,
        }
    }

    /// The shed that is ending the connection, if any.
    pub fn shed(&self) -> Option<ShedReason> {
        match self.end {
            Some(End::Shed(r)) => Some(r),
            _ => None,
        }
    }

    /// Whether a violation, a protocol error, a shed or a stream past
    /// `maxStreamsPerConnection` was seen: the client inspector forwards nothing more, the
    /// upstream one stops at the next frame boundary.
    pub fn is_closing(&self) -> bool {
        self.end.is_some()
    }

    /// Client streams opened over the connection's lifetime.
    pub fn streams_opened(&self) -> u32 {
        self.opened
    }

    /// The last-stream-id of the graceful GOAWAY sent (or due) once `maxStreamsPerConnection`
    /// streams were opened; `None` before.
    pub fn draining(&self) -> Option<u32> {
        (self.drain_last != 0).then_some(self.drain_last)
    }

    /// The connection ended: every stream still open and unanswered gets
    /// `hooks.closed(id, false, now_ns)`, in id order; the set is emptied. Call it once, when the
    /// copy loop is done.
    pub fn finish(&mut self, hooks: &mut impl StreamHooks, now_ns: u64) {
        self.streams
            .drain_unanswered(|id| hooks.closed(id, false, now_ns));
    }

    /// Whether `hooks` let the HEADERS opening stream `id` go now ([`StreamHooks::ready`]);
    /// holding is allowed only while no open stream waits for client bytes.
    #[inline]
    pub(super) fn stream_ready<H: StreamHooks>(
        &mut self,
        id: u32,
        now: &mut impl Now,
        hooks: &mut H,
    ) -> bool {
        if !H::TIMED {
            return true;
        }
        let t = hook_time::<H>(now);
        let streams = &self.streams;
        hooks.ready(id, t, || !streams.awaiting_client())
    }

    /// Opens client stream `id` (its HEADERS passed every check) once `hooks` accept it;
    /// `end_stream`: the HEADERS carried END_STREAM. The stream that reaches
    /// `max_streams_per_connection` schedules the graceful GOAWAY.
    #[inline]
    pub(super) fn open_stream<H: StreamHooks>(
        &mut self,
        id: u32,
        end_stream: bool,
        now: &mut impl Now,
        hooks: &mut H,
    ) -> Check {
        let t = hook_time::<H>(now);
        hooks.opened(id, t).map_err(|shed| End::Shed(shed.reason))?;
        self.streams.open(id, end_stream);
        self.last_stream_id = id;
        self.opened += 1;
        if self.opened >= self.max_streams_per_connection {
            self.drain_last = id;
            self.goaway_due = true;
        }
        Ok(())
    }

    /// The client sent END_STREAM on `id`.
    #[inline]
    pub(super) fn client_ended<H: StreamHooks>(
        &mut self,
        id: u32,
        now: &mut impl Now,
        hooks: &mut H,
    ) {
        if self.streams.end_client(id) {
            hooks.closed(id, false, hook_time::<H>(now));
        }
    }

    /// The upstream sent END_STREAM on `id`.
    #[inline]
    pub(super) fn server_ended<H: StreamHooks>(
        &mut self,
        id: u32,
        now: &mut impl Now,
        hooks: &mut H,
    ) {
        if self.streams.end_server(id) {
            hooks.closed(id, false, hook_time::<H>(now));
        }
    }

    /// The upstream sent HEADERS on `id`: its answer, the first time on an open client stream.
    #[inline]
    pub(super) fn server_headers<H: StreamHooks>(
        &mut self,
        id: u32,
        now: &mut impl Now,
        hooks: &mut H,
    ) {
        if self.streams.answer(id) {
            self.answered = true;
            hooks.closed(id, true, hook_time::<H>(now));
        }
    }

    /// Whether the connection may open one more client stream at `now`: first the concurrency
    /// cap, then the connection's stream rate, then the client's.
    #[inline]
    pub(super) fn admit_stream(&mut self, now: &mut impl Now, budget: &impl ClientBudget) -> Check {
        if self.streams.is_full() {
            return Err(End::Violation(Violation::ConcurrentStreams));
        }
        let now = now.now();
        if self.streams_gcra.conforms(self.streams_tat, now) && budget.admit(Budget::Streams, now) {
            self.streams_tat = self.streams_gcra.next_tat(self.streams_tat, now);
            return Ok(());
        }
        // Streams opened faster than allowed while the reset budget (the connection's or the
        // client's) is spent too: the streams are being opened to be reset (CVE-2023-44487),
        // which is what the operator should read.
        let resets_left =
            self.resets_gcra.conforms(self.resets_tat, now) && budget.conforms(Budget::Resets, now);
        Err(End::Violation(if resets_left {
            Violation::StreamRate
        } else {
            Violation::RapidReset
        }))
    }

    /// One client control frame: the connection's budget, then the client's.
    #[inline]
    pub(super) fn control_frame(
        &mut self,
        now: &mut impl Now,
        budget: &impl ClientBudget,
    ) -> Check {
        let now = now.now();
        if self.control_gcra.conforms(self.control_tat, now)
            && budget.admit(Budget::ControlFrames, now)
        {
            self.control_tat = self.control_gcra.next_tat(self.control_tat, now);
            Ok(())
        } else {
            Err(End::Violation(Violation::ControlFrames))
        }
    }

    /// A RST_STREAM from the client: counted when it ends a stream that is open, i.e. abandons
    /// work the upstream took on (CVE-2023-44487). A reset of a stream that is not open — ended
    /// by both sides, already reset, never opened — ends nothing at the upstream, which ignores
    /// it (RFC 9113 §5.1), and is not counted: curl 7.88 resets every stream it has finished.
    #[inline]
    pub(super) fn client_reset(
        &mut self,
        stream: u32,
        now: &mut impl Now,
        hooks: &mut impl StreamHooks,
        budget: &impl ClientBudget,
    ) -> Check {
        self.reset(stream, now, hooks, budget)
    }

    /// A RST_STREAM from the upstream: counted when it ends an open client stream, which is
    /// what a client provokes with MadeYouReset; resets of pushed (even) streams, of streams
    /// already closed or never opened are the server's business.
    #[inline]
    pub(super) fn upstream_reset(
        &mut self,
        stream: u32,
        now: &mut impl Now,
        hooks: &mut impl StreamHooks,
        budget: &impl ClientBudget,
    ) -> Check {
        self.reset(stream, now, hooks, budget)
    }

    /// A reset that ends open stream `stream` spends one of the connection's resets, then one
    /// of the client's.
    #[inline]
    fn reset(
        &mut self,
        stream: u32,
        now: &mut impl Now,
        hooks: &mut impl StreamHooks,
        budget: &impl ClientBudget,
    ) -> Check {
        if !self.streams.is_open(stream) {
            return Ok(());
        }
        let now = now.now();
        if !(self.resets_gcra.conforms(self.resets_tat, now) && budget.admit(Budget::Resets, now)) {
            return Err(End::Violation(Violation::RapidReset));
        }
        self.resets_tat = self.resets_gcra.next_tat(self.resets_tat, now);
        if self.streams.reset(stream) {
            hooks.closed(stream, false, now);
        }
        Ok(())
    }
}

/// Collects a frame header that may arrive split over several chunks. Shared by both directions.
#[derive(Debug, Clone, Default)]
pub(super) struct HeaderReader {
    pub(super) buf: [u8; FRAME_HEADER_LEN],
    pub(super) len: u8,
    /// Payload bytes of the current frame still to pass.
    pub(super) remaining: u32,
}

impl HeaderReader {
    /// At a frame boundary: no partial header, no payload pending.
    #[inline]
    pub(super) fn at_boundary(&self) -> bool {
        self.len == 0 && self.remaining == 0
    }

    /// Reads header bytes from `chunk[*i..]` (the caller saw `remaining == 0`). Sets
    /// `*frame_start` when a new header begins in this chunk; returns the header once complete.
    #[inline]
    pub(super) fn read(
        &mut self,
        chunk: &[u8],
        i: &mut usize,
        frame_start: &mut Option<usize>,
    ) -> Option<FrameHeader> {
        if self.len == 0 {
            *frame_start = Some(*i);
            if let Some(b) = chunk[*i..].first_chunk::<FRAME_HEADER_LEN>() {
                *i += FRAME_HEADER_LEN;
                return Some(FrameHeader::parse(b));
            }
        }
        let have = self.len as usize;
        let n = (FRAME_HEADER_LEN - have).min(chunk.len() - *i);
        self.buf[have..have + n].copy_from_slice(&chunk[*i..*i + n]);
        *i += n;
        if have + n < FRAME_HEADER_LEN {
            self.len = (have + n) as u8;
            return None;
        }
        self.len = 0;
        Some(FrameHeader::parse(&self.buf))
    }
}

/// Records the first reason the connection ends and returns the outcome for this chunk.
#[inline]
pub(super) fn stop(conn: &mut ConnState, end: End, at: Option<usize>) -> Inspect {
    let end = *conn.end.get_or_insert(end);
    end.at(at.unwrap_or(0))
}

/// The time the hooks `H` are told (CLOCK_MONOTONIC ns): read only when they use it
/// ([`StreamHooks::TIMED`]), 0 for the no-op hooks.
#[inline(always)]
fn hook_time<H: StreamHooks>(now: &mut impl Now) -> u64 {
    if H::TIMED {
        now.now()
    } else {
        0
    }
}
