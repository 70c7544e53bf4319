//! The per-connection state both inspectors update ([`ConnState`]), the lazily read time of a
//! chunk ([`Now`]), and the frame-header reader both directions share.

use super::frame::{FrameHeader, FRAME_HEADER_LEN};
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
/// Memory: 128 bytes plus 8 bytes per open stream, reserved once (see `streams.rs`).
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
        }
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

    /// Whether a violation or a protocol error was seen in either direction: the client
    /// inspector forwards nothing more, the upstream one stops at the next frame boundary.
    pub fn is_closing(&self) -> bool {
        self.end.is_some()
    }

    /// Whether the connection may open one more client stream at `now`: first the concurrency
    /// cap, then the stream rate.
    #[inline]
    pub(super) fn admit_stream(&mut self, now: &mut impl Now) -> Check {
        if self.streams.is_full() {
            return Err(End::Violation(Violation::ConcurrentStreams));
        }
        let now = now.now();
        if self.streams_gcra.admit(&mut self.streams_tat, now) {
            return Ok(());
        }
        // Streams opened faster than allowed while the reset budget is spent too: the streams
        // are being opened to be reset (CVE-2023-44487), which is what the operator should read.
        Err(End::Violation(
            if self.resets_gcra.conforms(self.resets_tat, now) {
                Violation::StreamRate
            } else {
                Violation::RapidReset
            },
        ))
    }

    #[inline]
    pub(super) fn control_frame(&mut self, now: &mut impl Now) -> Check {
        if self.control_gcra.admit(&mut self.control_tat, now.now()) {
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
    pub(super) fn client_reset(&mut self, stream: u32, now: &mut impl Now) -> Check {
        self.reset(stream, now)
    }

    /// A RST_STREAM from the upstream: counted when it ends an open client stream, which is
    /// what a client provokes with MadeYouReset; resets of pushed (even) streams, of streams
    /// already closed or never opened are the server's business.
    #[inline]
    pub(super) fn upstream_reset(&mut self, stream: u32, now: &mut impl Now) -> Check {
        self.reset(stream, now)
    }

    #[inline]
    fn reset(&mut self, stream: u32, now: &mut impl Now) -> Check {
        if !self.streams.is_open(stream) {
            return Ok(());
        }
        if !self.resets_gcra.admit(&mut self.resets_tat, now.now()) {
            return Err(End::Violation(Violation::RapidReset));
        }
        self.streams.reset(stream);
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
