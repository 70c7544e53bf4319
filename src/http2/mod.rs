//! HTTP/2 guard: per-connection flood limits read off frame headers, for terminated connections
//! whose ALPN is `h2` (docs/protection.md: HTTP/2 guard).
//!
//! # What it counts
//! Two pure state machines watch the decrypted bytes the copy loop moves, one per direction, and
//! share one [`ConnState`]. Time is a parameter (`now_ns`, CLOCK_MONOTONIC ns); nothing sleeps.
//!
//! | limit ([`H2GuardConfig`]) | counted on | [`Violation`] |
//! |---|---|---|
//! | `max_concurrent_streams` (100) | client streams open at once: a stream opens at the client's first HEADERS on a new odd id above the last (RFC 9113 §5.1.1) and closes when both sides sent END_STREAM, or on RST_STREAM in either direction (§5.1) | `concurrent_streams` |
//! | `max_streams_per_second` (100000; §7.3 says 200, see [`H2GuardConfig`]) | new client streams, GCRA with burst `max_concurrent_streams` | `stream_rate` |
//! | `max_resets_per_second` (50) | RST_STREAM that ends an open client stream, from the client or from the upstream (MadeYouReset), GCRA burst 2 × rate; a reset of a stream that is not open ends nothing and is not counted | `rapid_reset` |
//! | `max_header_block_bytes` (65536) | payload bytes of one HEADERS and its CONTINUATIONs (§6.2, §6.10) | `header_block` |
//! | `max_continuation_frames` (16) | CONTINUATION frames in one header block | `continuation` |
//! | `max_control_frames_per_second` (100) | client SETTINGS (ACK too), PING (ACK too), PRIORITY, WINDOW_UPDATE with increment 0, DATA of length 0 without END_STREAM; GCRA burst 2 × rate | `control_frames` |
//!
//! The three rates are also counted per client over all its connections through
//! [`ClientBudget`] (the engine's table, rate and burst × `clientFactor`), asked after the
//! connection's own budget admitted the event. `max_streams_per_connection` (10000) is not a
//! violation: the stream that reaches it is followed by a graceful GOAWAY (NO_ERROR) written
//! between two upstream frames ([`H2Guard::interjection`]); a stream opened after it ends the
//! connection ([`Inspect::Drained`]). [`StreamHooks`] hear each stream open (and may shed it,
//! [`Inspect::Shed`]) and close, exactly once (see `hooks.rs`).
//!
//! A HEADERS that opens a stream is checked for concurrency, then stream rate, then size (so the
//! HEADERS of a 101st stream is `concurrent_streams` even if its rate is spent too); a
//! CONTINUATION for its count, then the block size. One exception names the attack: a
//! stream-rate excess while the reset budget is also spent is reported `rapid_reset` (the
//! CVE-2023-44487 pattern HEADERS, RST_STREAM, HEADERS, … spends both budgets at the same pair).
//! The rates reuse [`Gcra`](crate::gcra::Gcra)'s plain-word form (`admit` on a
//! `u64`): exact, one compare and one store, and the state is owned by the connection, so no
//! atomic is needed.
//!
//! # Choices
//! - **Preface** (§3.4): the client's first 24 bytes must be the preface; anything else is
//!   [`Inspect::ProtocolError`] with [`ProtocolError::BadPreface`] at the first differing byte —
//!   not a violation, no `h2_flood`. The caller closes the connection (the upstream would answer
//!   PROTOCOL_ERROR); a caller that prefers to let the upstream decide may stop inspecting and
//!   forward, but then the guard protects nothing on that connection.
//! - **Header blocks** must be contiguous (§4.3, §6.10): a frame other than CONTINUATION on the
//!   same stream inside a block, or a CONTINUATION outside one, is a [`ProtocolError`] too, so
//!   the block counters always have one meaning.
//! - **Padding and priority fields count** as header-block bytes: the guard adds the HEADERS and
//!   CONTINUATION payload lengths without reading the Pad Length byte (it overcounts a padded
//!   block by at most 261 bytes, and the upstream does receive and parse those bytes).
//! - **Empty DATA** means length 0. A padded DATA frame with no data is not "empty": padding is
//!   flow-controlled (§6.1), so such frames are bounded by the upstream's window; length 0
//!   frames are not, which is what makes them a flood.
//! - **WINDOW_UPDATE** is the one client payload read: its first 4 bytes (the increment, reserved
//!   bit ignored). A WINDOW_UPDATE shorter than 4 bytes (malformed) counts as a control frame.
//! - **SETTINGS_MAX_CONCURRENT_STREAMS**: the client learns the cap from Rampart's own SETTINGS
//!   ([`server_settings`], written by the connection before any upstream byte; see `preface.rs`),
//!   so an upstream that omits the setting leaves the client at the cap (§6.5.2). In the
//!   upstream's non-ACK SETTINGS a larger value is lowered in place to `max_concurrent_streams`
//!   (byte by byte as it passes, so any split works; no other byte is ever changed): the guard
//!   never inserts bytes into the upstream's stream (that would shift every later offset and the
//!   frame length).
//! - **Stream-state bounds**: the open set holds at most `max_concurrent_streams` entries (the
//!   stream that would exceed it is the violation), 8 bytes each, reserved once; no slack is
//!   needed because the guard sees a close before the client does (the upstream's END_STREAM and
//!   RST_STREAM pass through it on their way), so its count never exceeds the client's own.
//! - **Resets** count only when they end an open client stream, in either direction: that is
//!   the work rapid reset and MadeYouReset make the upstream abandon. A RST_STREAM on a stream
//!   both sides ended, one already reset, or one never opened (a pushed stream, an idle id)
//!   ends nothing at the upstream (RFC 9113 §5.1: it ignores or refuses it) and is not counted:
//!   curl 7.88 sends RST_STREAM(STREAM_CLOSED) for every stream it finished, which would
//!   otherwise trip the budget after 100 requests.
//!
//! # Outcome offsets
//! [`Inspect::Violation`]'s `at` is the offset in the chunk of the violating frame's first header
//! byte: the caller forwards `chunk[..at]` and nothing after. When that header (or a
//! WINDOW_UPDATE's increment) began in an earlier chunk, those bytes were already forwarded and
//! `at` is 0: the upstream then holds a partial frame it cannot act on and sees the connection
//! close. In the upstream → client direction the GOAWAY must follow a whole frame, so there the
//! inspector never stops mid-frame: a violating frame whose header began earlier is finished, and
//! after a client-side violation the upstream direction runs to its next frame boundary.
//!
//! # Memory and cost
//! Per connection: [`H2Guard`] is at most 216 bytes — [`ConnState`] 144, [`ClientToUpstream`] 48,
//! [`UpstreamToClient`] 24 — plus the open-stream buffer, 8 bytes per stream reserved at
//! construction (800 bytes at the default 100, so about 1 KiB in all). Nothing
//! allocates after construction at the default cap (a larger cap grows the stream set at most
//! when it reaches a new high-water mark). The only buffer is one partial 9-byte frame header per
//! direction. Per frame: parse a 9-byte header, a few compares, at most one GCRA step; payload
//! bytes are skipped by length, except the 4 increment bytes of a WINDOW_UPDATE and the SETTINGS
//! payload of the upstream (a few dozen bytes, read once). Stream opens append; stream closes are
//! a binary search and a move of at most `max_concurrent_streams` 8-byte entries.
//!
//! # Use from the copy loop
//! Both directions of `proxy::copy` are pumped in one task, so it holds one [`H2Guard`] (no lock)
//! and, after each read of `n` bytes into `buf`:
//! - client → upstream: `guard.inspect_client(&buf[..n], now_ns)`;
//! - upstream → client: `guard.inspect_upstream(&mut buf[..n], now_ns)` (may rewrite bytes).
//!
//! The `_clocked` forms take the clock instead of the time and read it only when a decision
//! needs it ([`Now`]): a clock read (40 ns in this VM) is a large part of what a chunk of a few
//! small frames costs, and most upstream chunks need none.
//!
//! On `Forward` the pump writes all `n` bytes. On `Violation { at, violation }` or
//! `ProtocolError { at, .. }` it writes `buf[..at]` and reads no more from that side. The client
//! side then stops reading the client and shuts the upstream; the upstream side keeps pumping
//! until its own inspect returns the outcome (at most the rest of one frame), or does so at once
//! when [`UpstreamToClient::at_frame_boundary`] already holds. Once the upstream side's bytes up
//! to `at` are written, the pump writes [`H2Guard::goaway`]'s bytes (if `Some`) to the client,
//! shuts both sides and the connection reports `h2_flood` with `violation.as_str()` (protocol
//! errors are closed without the report). A caller that runs the two directions in two tasks
//! keeps [`ClientToUpstream`] and [`UpstreamToClient`] in their tasks and the [`ConnState`] in a
//! `Mutex`, locked once per chunk around `inspect`.

mod client;
mod conn_state;
mod frame;
mod goaway;
mod guard;
mod hooks;
mod limits;
mod preface;
mod streams;
mod upstream;

pub use client::ClientToUpstream;
pub use conn_state::{ConnState, LazyNow, Now};
pub use frame::{
    goaway_frame, EMPTY_SETTINGS, ENHANCE_YOUR_CALM, FRAME_HEADER_LEN, NO_ERROR, PREFACE,
    PROTOCOL_ERROR,
};
pub use goaway::Goaway;
pub use guard::H2Guard;
pub use hooks::{Budget, ClientBudget, Shed, ShedReason, StreamHooks};
pub use limits::{H2GuardConfig, Inspect, ProtocolError, Violation};
pub use preface::{server_settings, FirstSettingsAck, ACK_STAND_IN, SERVER_SETTINGS_LEN};
pub use upstream::UpstreamToClient;
