//! The guard's limits ([`H2GuardConfig`]) and the outcomes it reports: which limit a client
//! exceeded ([`Violation`]), what it could not follow ([`ProtocolError`]) and what the copy loop
//! does with a chunk ([`Inspect`]).

use super::hooks::ShedReason;
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
    /// h2load -m 32 345/s); the shipped default is one they do not reach (docs/protection.md:
    /// HTTP/2 guard).
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
    /// Client streams over the connection's lifetime (streams; `maxStreamsPerConnection`,
    /// default 10000, like HAProxy's `tune.h2.fe.max-total-streams` and nginx's
    /// `keepalive_requests`): the stream that reaches it is forwarded and followed by a graceful
    /// GOAWAY (NO_ERROR, last-stream-id = that stream) to the client; in-flight streams finish,
    /// the client opens a new connection for more. Not a violation. A client that opens a
    /// stream anyway (one it sent before the GOAWAY reached it) ends the connection with the
    /// same GOAWAY; that stream is not forwarded, so it is safe to retry.
    pub max_streams_per_connection: u32,
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
            max_streams_per_connection: 10_000,
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
    /// The stream hooks shed the stream whose HEADERS starts at `at`: forward `chunk[..at]`,
    /// nothing after, report `reason`, send the client the GOAWAY (error code
    /// [`ShedReason::error_code`]) and close both sides.
    Shed {
        /// Bytes of the chunk to forward.
        at: usize,
        /// Why.
        reason: ShedReason,
    },
    /// The stream hooks hold the HEADERS frame that starts at `at` (or began in an earlier
    /// chunk: `0`) until they are ready ([`super::StreamHooks::ready`]): forward `chunk[..at]`,
    /// then inspect `chunk[at..]` again once they are. Nothing ended.
    Hold {
        /// Bytes of the chunk to forward before the held frame.
        at: usize,
    },
    /// The client opened a stream after the graceful GOAWAY of `maxStreamsPerConnection`:
    /// forward `chunk[..at]` (not that HEADERS), send the GOAWAY (NO_ERROR) again and close both
    /// sides. Not reported: the client may retry the stream on a new connection.
    Drained {
        /// Bytes of the chunk to forward.
        at: usize,
    },
}

/// Why a connection ends; the first one sticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum End {
    Violation(Violation),
    Protocol(ProtocolError),
    Shed(ShedReason),
    Drained,
    /// Not an end: the hooks hold the frame ([`Inspect::Hold`]); never stored as the end.
    Hold,
}

impl End {
    #[inline]
    pub(super) fn at(self, at: usize) -> Inspect {
        match self {
            End::Violation(violation) => Inspect::Violation { at, violation },
            End::Protocol(error) => Inspect::ProtocolError { at, error },
            End::Shed(reason) => Inspect::Shed { at, reason },
            End::Drained => Inspect::Drained { at },
            End::Hold => Inspect::Hold { at },
        }
    }
}

pub(super) type Check = Result<(), End>;
