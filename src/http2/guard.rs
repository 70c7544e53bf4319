//! The two inspectors and the per-connection state they share (see the module doc of
//! [`crate::http2`] for what is counted and why).
//!
//! Each inspector is a byte-at-a-time state machine over one direction of the decrypted stream:
//! it holds at most one partial 9-byte frame header and a few counters, skips payloads by length,
//! and tells the copy loop, per chunk, how much of the chunk may be forwarded ([`Inspect`]). Both
//! update one [`ConnState`] that they receive by `&mut`, so the caller decides how it is shared:
//! owned next to both inspectors in one task ([`H2Guard`], no lock), or behind a `Mutex` locked
//! once per chunk when the two directions run in two tasks.
//!
//! Why one file (925 lines, 13 of them tests): the two inspectors share [`ConnState`] field by
//! field, and every limit's check is read beside the frame walk that feeds it; split apart, each
//! half would need the other open. The frame walk itself lives in `frame.rs`, stream
//! bookkeeping in `streams.rs`, Rampart's own SETTINGS in `preface.rs`.

use super::frame::{
    flag, goaway_frame, ty, FrameHeader, EMPTY_SETTINGS, ENHANCE_YOUR_CALM, FRAME_HEADER_LEN,
    PREFACE, PROTOCOL_ERROR, SETTINGS_MAX_CONCURRENT_STREAMS, SETTING_LEN,
};
use super::streams::OpenStreams;
use crate::gcra::{Gcra, NS_PER_SEC};
use std::fmt;

/// Limits of the HTTP/2 guard for one listener (`protection.http2`), all per connection. The
/// config parser validates them (counts ≥ 1, rates > 0); this type only carries them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct H2GuardConfig {
    /// Client-opened streams open at once (streams; `maxConcurrentStreams`, default 100). The
    /// upstream's SETTINGS_MAX_CONCURRENT_STREAMS is lowered to this on its way to the client;
    /// it is enforced also when the upstream advertises no limit.
    pub max_concurrent_streams: u32,
    /// New client streams per second (streams/s; `maxStreamsPerSecond`, default 100000), a GCRA
    /// whose burst is `max_concurrent_streams`. The contract's table says 200, which honest
    /// clients measured through Rampart exceed on one connection: an honest client opens up to
    /// `max_concurrent_streams` streams per request round trip, so 100 streams over a 1 ms
    /// loopback round trip are 100k/s (node:http2 peaks at 10–20k/s, curl averages 2.2k/s,
    /// h2load -m 32 345/s); the shipped default is one they do not reach (README, HTTP/2 guard).
    pub max_streams_per_second: f64,
    /// RST_STREAM frames per second (resets/s; `maxResetsPerSecond`, default 50) that end an
    /// open client stream: those the client sends plus those the upstream sends
    /// (MadeYouReset). GCRA, burst 2 × rate.
    pub max_resets_per_second: f64,
    /// Bytes of one header block (bytes; `maxHeaderBlockBytes`, default 65536): the payload
    /// lengths of a HEADERS frame and its CONTINUATION frames, padding and priority fields
    /// included.
    pub max_header_block_bytes: u32,
    /// CONTINUATION frames in one header block (frames; `maxContinuationFrames`, default 16).
    pub max_continuation_frames: u32,
    /// Client control frames per second (frames/s; `maxControlFramesPerSecond`, default 100):
    /// SETTINGS, PING, PRIORITY, WINDOW_UPDATE with increment 0 and DATA with no payload and no
    /// END_STREAM. GCRA, burst 2 × rate.
    pub max_control_frames_per_second: f64,
}

impl Default for H2GuardConfig {
    fn default() -> Self {
        H2GuardConfig {
            max_concurrent_streams: 100,
            max_streams_per_second: 100_000.0,
            max_resets_per_second: 50.0,
            max_header_block_bytes: 65536,
            max_continuation_frames: 16,
            max_control_frames_per_second: 100.0,
        }
    }
}

/// Which limit a client exceeded: the `detail` of a `'blocked'` event with reason `h2_flood`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Violation {
    /// A new stream beyond `maxConcurrentStreams` open at once.
    ConcurrentStreams,
    /// New streams faster than `maxStreamsPerSecond`.
    StreamRate,
    /// RST_STREAM faster than `maxResetsPerSecond` (CVE-2023-44487 rapid reset, and MadeYouReset
    /// when the upstream does the resetting). Also reported for a stream-rate excess while the
    /// reset budget is spent: streams opened to be reset.
    RapidReset,
    /// A header block over `maxHeaderBlockBytes`.
    HeaderBlock,
    /// More than `maxContinuationFrames` CONTINUATION frames in one header block
    /// (CONTINUATION flood).
    Continuation,
    /// Control frames faster than `maxControlFramesPerSecond` (ping, settings, empty-frame
    /// floods: CVE-2019-9512, -9515, -9518).
    ControlFrames,
}

impl Violation {
    /// Every detail, in declaration order.
    pub const ALL: [Violation; 6] = [
        Violation::ConcurrentStreams,
        Violation::StreamRate,
        Violation::RapidReset,
        Violation::HeaderBlock,
        Violation::Continuation,
        Violation::ControlFrames,
    ];

    /// Position in [`Violation::ALL`] (for per-detail counter arrays).
    pub const fn index(self) -> usize {
        self as usize
    }

    /// The `detail` string of the `'blocked'` event.
    pub fn as_str(self) -> &'static str {
        match self {
            Violation::ConcurrentStreams => "concurrent_streams",
            Violation::StreamRate => "stream_rate",
            Violation::RapidReset => "rapid_reset",
            Violation::HeaderBlock => "header_block",
            Violation::Continuation => "continuation",
            Violation::ControlFrames => "control_frames",
        }
    }
}

// `index()` is the discriminant: `ALL` must list the variants in declaration order.
const _: () = {
    let mut i = 0;
    while i < Violation::ALL.len() {
        assert!(Violation::ALL[i].index() == i);
        i += 1;
    }
};

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The client is not speaking HTTP/2 the guard can follow. Not a flood: the upstream is bound to
/// treat each of these as a connection error of type PROTOCOL_ERROR anyway (the RFC 9113 section
/// is given), so the guard stops there rather than guess how the upstream recovers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProtocolError {
    /// The first 24 bytes are not the client connection preface (§3.4), e.g. HTTP/1.1 sent on a
    /// connection that negotiated ALPN `h2`.
    BadPreface,
    /// A frame other than a CONTINUATION on the same stream arrived inside a header block
    /// (§4.3, §6.10: a field block is a contiguous sequence of frames).
    HeaderBlockInterrupted,
    /// A CONTINUATION that does not continue a header block (§6.10).
    UnexpectedContinuation,
}

impl ProtocolError {
    /// A short name for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            ProtocolError::BadPreface => "bad_preface",
            ProtocolError::HeaderBlockInterrupted => "header_block_interrupted",
            ProtocolError::UnexpectedContinuation => "unexpected_continuation",
        }
    }
}

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the copy loop does with one chunk it read.
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inspect {
    /// Forward the whole chunk.
    Forward,
    /// A limit was exceeded: forward `chunk[..at]` (every byte before the violating frame's
    /// header, or `0` when that header began in an earlier chunk), forward nothing after, report
    /// `h2_flood` with `violation.as_str()`, send the client the GOAWAY and close both sides.
    Violation {
        /// Bytes of the chunk to forward.
        at: usize,
        /// The limit exceeded.
        violation: Violation,
    },
    /// Not HTTP/2 the guard can follow: forward `chunk[..at]` (or nothing) and close both sides;
    /// not an `h2_flood` (see [`ProtocolError`]).
    ProtocolError {
        /// Bytes of the chunk to forward.
        at: usize,
        /// What could not be followed.
        error: ProtocolError,
    },
}

/// Why a connection ends; the first one sticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Violation(Violation),
    Protocol(ProtocolError),
}

impl End {
    #[inline]
    fn at(self, at: usize) -> Inspect {
        match self {
            End::Violation(violation) => Inspect::Violation { at, violation },
            End::Protocol(error) => Inspect::ProtocolError { at, error },
        }
    }
}

type Check = Result<(), End>;

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
    max_concurrent_streams: u32,
    max_header_block_bytes: u64,
    max_continuation_frames: u32,
    streams_gcra: Gcra,
    resets_gcra: Gcra,
    control_gcra: Gcra,
    streams_tat: u64,
    resets_tat: u64,
    control_tat: u64,
    streams: OpenStreams,
    /// Highest client stream id whose opening HEADERS was forwarded (0: none).
    last_stream_id: u32,
    end: Option<End>,
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
    fn admit_stream(&mut self, now: &mut impl Now) -> Check {
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
    fn control_frame(&mut self, now: &mut impl Now) -> Check {
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
    fn client_reset(&mut self, stream: u32, now: &mut impl Now) -> Check {
        self.reset(stream, now)
    }

    /// A RST_STREAM from the upstream: counted when it ends an open client stream, which is
    /// what a client provokes with MadeYouReset; resets of pushed (even) streams, of streams
    /// already closed or never opened are the server's business.
    #[inline]
    fn upstream_reset(&mut self, stream: u32, now: &mut impl Now) -> Check {
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
struct HeaderReader {
    buf: [u8; FRAME_HEADER_LEN],
    len: u8,
    /// Payload bytes of the current frame still to pass.
    remaining: u32,
}

impl HeaderReader {
    /// At a frame boundary: no partial header, no payload pending.
    #[inline]
    fn at_boundary(&self) -> bool {
        self.len == 0 && self.remaining == 0
    }

    /// Reads header bytes from `chunk[*i..]` (the caller saw `remaining == 0`). Sets
    /// `*frame_start` when a new header begins in this chunk; returns the header once complete.
    #[inline]
    fn read(
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

/// An open header block on the client side (HEADERS without END_HEADERS, then CONTINUATIONs).
#[derive(Debug, Clone, Copy)]
struct Block {
    stream: u32,
    bytes: u64,
    continuations: u32,
}

/// Inspects the client → upstream direction: the preface, then every frame header.
#[derive(Debug, Clone, Default)]
pub struct ClientToUpstream {
    /// Preface bytes matched so far (24: done).
    preface: u8,
    header: HeaderReader,
    /// In a WINDOW_UPDATE payload whose increment is still being read.
    increment_pending: bool,
    increment: u32,
    increment_bytes: u8,
    block: Option<Block>,
}

impl ClientToUpstream {
    /// An inspector expecting the client connection preface.
    pub fn new() -> ClientToUpstream {
        ClientToUpstream::default()
    }

    /// Inspects the next `chunk` read from the client at `now_ns` (CLOCK_MONOTONIC ns). Once it
    /// returned anything but [`Inspect::Forward`] (or the upstream direction did), every later
    /// call returns the same outcome with `at: 0`.
    pub fn inspect(&mut self, conn: &mut ConnState, chunk: &[u8], now_ns: u64) -> Inspect {
        self.inspect_at(conn, chunk, &mut { now_ns })
    }

    /// [`ClientToUpstream::inspect`] with the time asked for only when a decision needs it.
    pub fn inspect_at(
        &mut self,
        conn: &mut ConnState,
        chunk: &[u8],
        now: &mut impl Now,
    ) -> Inspect {
        if let Some(end) = conn.end {
            return end.at(0);
        }
        let mut i = 0;
        if (self.preface as usize) < PREFACE.len() {
            let want = &PREFACE[self.preface as usize..];
            let n = want.len().min(chunk.len());
            if let Some(k) = (0..n).find(|&k| chunk[k] != want[k]) {
                return stop(conn, End::Protocol(ProtocolError::BadPreface), Some(k));
            }
            self.preface += n as u8;
            i = n;
        }
        // Where the current frame's header began in this chunk; `None` while finishing a frame
        // that began in an earlier chunk.
        let mut frame_start = None;
        while i < chunk.len() {
            let remaining = self.header.remaining;
            if remaining > 0 {
                let take = (remaining as usize).min(chunk.len() - i);
                if self.increment_pending {
                    let r = self.read_increment(conn, &chunk[i..i + take], now);
                    if let Err(end) = r {
                        return stop(conn, end, frame_start);
                    }
                }
                i += take;
                self.header.remaining = remaining - take as u32;
                continue;
            }
            let Some(h) = self.header.read(chunk, &mut i, &mut frame_start) else {
                break;
            };
            if let Err(end) = self.on_header(conn, &h, now) {
                return stop(conn, end, frame_start);
            }
            self.header.remaining = h.len;
        }
        Inspect::Forward
    }

    /// Classifies one complete client frame header.
    #[inline]
    fn on_header(&mut self, conn: &mut ConnState, h: &FrameHeader, now: &mut impl Now) -> Check {
        if let Some(block) = &mut self.block {
            if h.ty != ty::CONTINUATION || h.stream != block.stream {
                return Err(End::Protocol(ProtocolError::HeaderBlockInterrupted));
            }
            block.continuations += 1;
            if block.continuations > conn.max_continuation_frames {
                return Err(End::Violation(Violation::Continuation));
            }
            block.bytes += u64::from(h.len);
            if block.bytes > conn.max_header_block_bytes {
                return Err(End::Violation(Violation::HeaderBlock));
            }
            if h.has(flag::END_HEADERS) {
                self.block = None;
            }
            return Ok(());
        }
        match h.ty {
            ty::DATA => {
                let end_stream = h.has(flag::END_STREAM);
                if h.len == 0 && !end_stream {
                    conn.control_frame(now)?;
                }
                if end_stream {
                    conn.streams.end_client(h.stream);
                }
            }
            ty::HEADERS => {
                let end_stream = h.has(flag::END_STREAM);
                // A client stream opens at its first HEADERS on a new odd id (§5.1.1); HEADERS
                // on an older id are trailers (or on a closed stream: the upstream's error).
                let opens = h.stream % 2 == 1 && h.stream > conn.last_stream_id;
                if opens {
                    conn.admit_stream(now)?;
                }
                if u64::from(h.len) > conn.max_header_block_bytes {
                    return Err(End::Violation(Violation::HeaderBlock));
                }
                // Only now, when the frame will be forwarded, does the stream exist.
                if opens {
                    conn.streams.open(h.stream, end_stream);
                    conn.last_stream_id = h.stream;
                } else if end_stream {
                    conn.streams.end_client(h.stream);
                }
                if !h.has(flag::END_HEADERS) {
                    self.block = Some(Block {
                        stream: h.stream,
                        bytes: u64::from(h.len),
                        continuations: 0,
                    });
                }
            }
            ty::PRIORITY | ty::SETTINGS | ty::PING => conn.control_frame(now)?,
            ty::RST_STREAM => conn.client_reset(h.stream, now)?,
            ty::WINDOW_UPDATE => {
                if h.len < 4 {
                    // Malformed (FRAME_SIZE_ERROR for the upstream); no increment to read.
                    conn.control_frame(now)?;
                } else {
                    self.increment_pending = true;
                    self.increment = 0;
                    self.increment_bytes = 0;
                }
            }
            ty::CONTINUATION => return Err(End::Protocol(ProtocolError::UnexpectedContinuation)),
            // PUSH_PROMISE (a client may not send it; the upstream refuses), GOAWAY and unknown
            // types (ignored by the upstream, §4.1) pass by length.
            _ => {}
        }
        Ok(())
    }

    /// Reads WINDOW_UPDATE increment bytes from the start of the payload; a zero increment is a
    /// control frame.
    #[inline]
    fn read_increment(
        &mut self,
        conn: &mut ConnState,
        payload: &[u8],
        now: &mut impl Now,
    ) -> Check {
        let need = (4 - self.increment_bytes) as usize;
        for &b in &payload[..need.min(payload.len())] {
            self.increment = self.increment << 8 | u32::from(b);
            self.increment_bytes += 1;
        }
        if self.increment_bytes < 4 {
            return Ok(());
        }
        self.increment_pending = false;
        if self.increment & 0x7fff_ffff == 0 {
            conn.control_frame(now)?;
        }
        Ok(())
    }
}

/// Records the first reason the connection ends and returns the outcome for this chunk.
#[inline]
fn stop(conn: &mut ConnState, end: End, at: Option<usize>) -> Inspect {
    let end = *conn.end.get_or_insert(end);
    end.at(at.unwrap_or(0))
}

/// Where the value of a SETTINGS_MAX_CONCURRENT_STREAMS entry stands against the cap, decided
/// most significant byte first (the value is big-endian).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Cmp {
    /// Bytes so far equal the cap's: pass them (they are the cap's bytes too).
    #[default]
    Equal,
    /// Smaller than the cap: pass the rest unchanged.
    Less,
    /// Larger: write the cap's bytes from here on.
    Greater,
}

/// Inspects the upstream → client direction: END_STREAM and RST_STREAM on client streams, and
/// rewrites SETTINGS_MAX_CONCURRENT_STREAMS in the upstream's SETTINGS in place.
#[derive(Debug, Clone, Default)]
pub struct UpstreamToClient {
    header: HeaderReader,
    /// In the payload of a non-ACK SETTINGS frame.
    in_settings: bool,
    /// Byte position within the current 6-byte setting entry.
    entry_pos: u8,
    entry_id: u16,
    cmp: Cmp,
    /// The client received a server connection preface (§3.4): the upstream's first frame
    /// header passed, or the caller wrote one itself ([`UpstreamToClient::server_preface_sent`]).
    frames_seen: bool,
    saw_max_concurrent_streams: bool,
}

impl UpstreamToClient {
    /// An inspector at the start of the upstream's byte stream (its first frame is its SETTINGS).
    pub fn new() -> UpstreamToClient {
        UpstreamToClient::default()
    }

    /// Inspects (and, for SETTINGS_MAX_CONCURRENT_STREAMS, rewrites) the next `chunk` read from
    /// the upstream at `now_ns`. A RST_STREAM on a client stream over the reset budget is a
    /// violation at that frame's header. Once the connection is closing (a violation or protocol
    /// error in either direction), returns that outcome at the next frame boundary, so that
    /// whatever the caller writes after `chunk[..at]` (the GOAWAY) starts on a frame boundary;
    /// until then frames pass as usual.
    pub fn inspect(&mut self, conn: &mut ConnState, chunk: &mut [u8], now_ns: u64) -> Inspect {
        self.inspect_at(conn, chunk, &mut { now_ns })
    }

    /// [`UpstreamToClient::inspect`] with the time asked for only when a decision needs it (a
    /// RST_STREAM on an open client stream): most upstream chunks need none.
    pub fn inspect_at(
        &mut self,
        conn: &mut ConnState,
        chunk: &mut [u8],
        now: &mut impl Now,
    ) -> Inspect {
        let mut i = 0;
        let mut frame_start = None;
        loop {
            if self.header.at_boundary() {
                if let Some(end) = conn.end {
                    return end.at(i);
                }
            }
            if i == chunk.len() {
                return Inspect::Forward;
            }
            let remaining = self.header.remaining;
            if remaining > 0 {
                let take = (remaining as usize).min(chunk.len() - i);
                if self.in_settings {
                    self.rewrite(&mut chunk[i..i + take], conn.max_concurrent_streams);
                }
                i += take;
                self.header.remaining = remaining - take as u32;
                continue;
            }
            let Some(h) = self.header.read(chunk, &mut i, &mut frame_start) else {
                return Inspect::Forward;
            };
            if let Err(end) = self.on_header(conn, &h, now) {
                if frame_start.is_some() {
                    return stop(conn, end, frame_start);
                }
                // The header's first bytes already reached the client: finish this frame so
                // the GOAWAY follows a whole frame; the boundary check above stops there.
                conn.end.get_or_insert(end);
            }
            self.header.remaining = h.len;
        }
    }

    /// Whether the bytes inspected so far end on a frame boundary: once they are written, the
    /// caller may write a frame of its own (the GOAWAY).
    pub fn at_frame_boundary(&self) -> bool {
        self.header.at_boundary()
    }

    /// Whether the client received a server connection preface: the upstream's first frame (a
    /// SETTINGS frame) began, or [`UpstreamToClient::server_preface_sent`] said one was written.
    /// Until then, a GOAWAY must be preceded by [`EMPTY_SETTINGS`](super::EMPTY_SETTINGS) for
    /// the client to read a valid server preface (§3.4).
    pub fn server_preface_seen(&self) -> bool {
        self.frames_seen
    }

    /// Records that the client already received a server connection preface written by the
    /// caller before any upstream byte (Rampart's own SETTINGS,
    /// [`server_settings`](super::server_settings)): a GOAWAY then follows without
    /// [`EMPTY_SETTINGS`](super::EMPTY_SETTINGS).
    pub fn server_preface_sent(&mut self) {
        self.frames_seen = true;
    }

    /// Whether any upstream SETTINGS carried SETTINGS_MAX_CONCURRENT_STREAMS. When none did the
    /// client keeps the limit of Rampart's own SETTINGS (§6.5.2), or, without them, may believe
    /// streams are unlimited (§5.1.2); the guard never inserts the setting into the upstream's
    /// frames (it never adds bytes) and enforces `maxConcurrentStreams` either way.
    pub fn saw_max_concurrent_streams(&self) -> bool {
        self.saw_max_concurrent_streams
    }

    /// The frames to write to the client once the connection is closing and the bytes inspected
    /// so far are written: `None` while this direction is mid-frame, when nothing is ending, or
    /// after a bad preface (the client does not speak HTTP/2).
    pub fn goaway(&self, conn: &ConnState) -> Option<Goaway> {
        let error_code = match conn.end? {
            End::Violation(_) => ENHANCE_YOUR_CALM,
            End::Protocol(ProtocolError::BadPreface) => return None,
            End::Protocol(_) => PROTOCOL_ERROR,
        };
        if !self.at_frame_boundary() {
            return None;
        }
        let mut g = Goaway {
            bytes: [0; 26],
            len: 0,
        };
        let mut n = 0;
        if !self.frames_seen {
            g.bytes[..9].copy_from_slice(&EMPTY_SETTINGS);
            n = 9;
        }
        g.bytes[n..n + 17].copy_from_slice(&goaway_frame(conn.last_stream_id, error_code));
        g.len = (n + 17) as u8;
        Some(g)
    }

    /// Classifies one complete upstream frame header.
    #[inline]
    fn on_header(&mut self, conn: &mut ConnState, h: &FrameHeader, now: &mut impl Now) -> Check {
        self.frames_seen = true;
        self.in_settings = false;
        match h.ty {
            ty::HEADERS | ty::DATA if h.has(flag::END_STREAM) => conn.streams.end_server(h.stream),
            ty::RST_STREAM => conn.upstream_reset(h.stream, now)?,
            ty::SETTINGS if !h.has(flag::ACK) => {
                self.in_settings = true;
                self.entry_pos = 0;
            }
            _ => {}
        }
        Ok(())
    }

    /// Passes SETTINGS payload bytes, lowering SETTINGS_MAX_CONCURRENT_STREAMS values above
    /// `cap` to `cap`. The identifier precedes the value and the value is big-endian, so each
    /// byte can be decided as it passes: while the value's bytes equal the cap's nothing changes;
    /// at the first byte that is larger, it and the rest become the cap's bytes; at the first
    /// that is smaller, the value stands. No lookahead, so any split of the entry works.
    #[inline]
    fn rewrite(&mut self, payload: &mut [u8], cap: u32) {
        let cap = cap.to_be_bytes();
        for b in payload {
            match self.entry_pos {
                0 => self.entry_id = u16::from(*b) << 8,
                1 => {
                    self.entry_id |= u16::from(*b);
                    if self.entry_id == SETTINGS_MAX_CONCURRENT_STREAMS {
                        self.cmp = Cmp::Equal;
                        self.saw_max_concurrent_streams = true;
                    }
                }
                p if self.entry_id == SETTINGS_MAX_CONCURRENT_STREAMS => {
                    let c = cap[(p - 2) as usize];
                    match self.cmp {
                        Cmp::Equal if *b > c => {
                            self.cmp = Cmp::Greater;
                            *b = c;
                        }
                        Cmp::Equal if *b < c => self.cmp = Cmp::Less,
                        Cmp::Greater => *b = c,
                        Cmp::Equal | Cmp::Less => {}
                    }
                }
                _ => {}
            }
            self.entry_pos = (self.entry_pos + 1) % SETTING_LEN;
        }
    }
}

/// The bytes a closing connection writes to the client: GOAWAY (17 bytes), preceded by an empty
/// SETTINGS (9 bytes) when the upstream had not sent its preface yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Goaway {
    bytes: [u8; 26],
    len: u8,
}

impl Goaway {
    /// The frame's bytes (9-byte header and payload), to write to the client.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

/// Both inspectors and their shared state, for a copy loop that pumps both directions in one
/// task (as `proxy::copy` does): no lock, each call borrows the whole guard for one chunk.
#[derive(Debug)]
pub struct H2Guard {
    conn: ConnState,
    client: ClientToUpstream,
    upstream: UpstreamToClient,
}

impl H2Guard {
    /// A guard for a new connection.
    pub fn new(config: &H2GuardConfig) -> H2Guard {
        H2Guard {
            conn: ConnState::new(config),
            client: ClientToUpstream::new(),
            upstream: UpstreamToClient::new(),
        }
    }

    /// [`ClientToUpstream::inspect`] on a chunk read from the client.
    #[inline]
    pub fn inspect_client(&mut self, chunk: &[u8], now_ns: u64) -> Inspect {
        self.client.inspect(&mut self.conn, chunk, now_ns)
    }

    /// [`UpstreamToClient::inspect`] on a chunk read from the upstream.
    #[inline]
    pub fn inspect_upstream(&mut self, chunk: &mut [u8], now_ns: u64) -> Inspect {
        self.upstream.inspect(&mut self.conn, chunk, now_ns)
    }

    /// [`H2Guard::inspect_client`] reading `clock` (CLOCK_MONOTONIC ns) at most once, and only
    /// when a decision needs the time.
    #[inline]
    pub fn inspect_client_clocked(&mut self, chunk: &[u8], clock: impl FnMut() -> u64) -> Inspect {
        self.client
            .inspect_at(&mut self.conn, chunk, &mut LazyNow::new(clock))
    }

    /// [`H2Guard::inspect_upstream`] reading `clock` at most once, and only when a decision
    /// needs the time (most upstream chunks need none).
    #[inline]
    pub fn inspect_upstream_clocked(
        &mut self,
        chunk: &mut [u8],
        clock: impl FnMut() -> u64,
    ) -> Inspect {
        self.upstream
            .inspect_at(&mut self.conn, chunk, &mut LazyNow::new(clock))
    }

    /// [`UpstreamToClient::goaway`].
    pub fn goaway(&self) -> Option<Goaway> {
        self.upstream.goaway(&self.conn)
    }

    /// The shared state (open streams, last stream id, why it ends).
    pub fn state(&self) -> &ConnState {
        &self.conn
    }

    /// The upstream → client inspector (frame boundary, server preface, SETTINGS seen).
    pub fn upstream(&self) -> &UpstreamToClient {
        &self.upstream
    }

    /// [`UpstreamToClient::server_preface_sent`]: the caller wrote Rampart's SETTINGS to the
    /// client before any upstream byte.
    pub fn server_preface_sent(&mut self) {
        self.upstream.server_preface_sent();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The figures the module doc gives (per connection, besides the stream buffer).
    #[test]
    fn per_connection_state_stays_small() {
        assert!(std::mem::size_of::<ConnState>() <= 128);
        assert!(std::mem::size_of::<ClientToUpstream>() <= 48);
        assert!(std::mem::size_of::<UpstreamToClient>() <= 24);
        assert!(std::mem::size_of::<H2Guard>() <= 200);
        assert_eq!(std::mem::size_of::<Goaway>(), 27);
    }
}
