//! The upstream → client inspector: END_STREAM and RST_STREAM on client streams, and the
//! in-place rewrite of SETTINGS_MAX_CONCURRENT_STREAMS in the upstream's SETTINGS.

use super::conn_state::{stop, ConnState, HeaderReader, Now};
use super::frame::{
    flag, goaway_frame, ty, FrameHeader, EMPTY_SETTINGS, ENHANCE_YOUR_CALM, NO_ERROR,
    PROTOCOL_ERROR, SETTINGS_MAX_CONCURRENT_STREAMS, SETTING_LEN,
};
use super::goaway::Goaway;
use super::hooks::{ClientBudget, StreamHooks};
use super::limits::{Check, End, Inspect, ProtocolError};

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
        self.inspect_at(conn, chunk, &mut { now_ns }, &mut (), &())
    }

    /// [`UpstreamToClient::inspect`] with the time asked for only when a decision needs it (a
    /// RST_STREAM on an open client stream): most upstream chunks need none.
    pub fn inspect_at(
        &mut self,
        conn: &mut ConnState,
        chunk: &mut [u8],
        now: &mut impl Now,
        hooks: &mut impl StreamHooks,
        budget: &impl ClientBudget,
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
            if let Err(end) = self.on_header(conn, &h, now, hooks, budget) {
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
            End::Shed(reason) => reason.error_code(),
            End::Drained => NO_ERROR,
            End::Hold => return None,
        };
        if !self.at_frame_boundary() {
            return None;
        }
        Some(self.frames(conn.last_stream_id, error_code))
    }

    /// The graceful GOAWAY (NO_ERROR, last-stream-id = the stream that reached
    /// `maxStreamsPerConnection`) to write to the client now, between two upstream frames:
    /// `Some` once, when it is due, this direction is at a frame boundary and the connection is
    /// not closing (a closing connection writes [`UpstreamToClient::goaway`] instead).
    pub fn interjection(&mut self, conn: &mut ConnState) -> Option<Goaway> {
        if !conn.goaway_due || conn.end.is_some() || !self.at_frame_boundary() {
            return None;
        }
        conn.goaway_due = false;
        let g = self.frames(conn.drain_last, NO_ERROR);
        // The client has a server preface now (the SETTINGS before the GOAWAY, if any).
        self.frames_seen = true;
        Some(g)
    }

    /// A GOAWAY, after an empty SETTINGS when the client has no server preface yet.
    fn frames(&self, last_stream_id: u32, error_code: u32) -> Goaway {
        let mut g = Goaway {
            bytes: [0; 26],
            len: 0,
        };
        let mut n = 0;
        if !self.frames_seen {
            g.bytes[..9].copy_from_slice(&EMPTY_SETTINGS);
            n = 9;
        }
        g.bytes[n..n + 17].copy_from_slice(&goaway_frame(last_stream_id, error_code));
        g.len = (n + 17) as u8;
        g
    }

    /// Classifies one complete upstream frame header.
    #[inline]
    fn on_header(
        &mut self,
        conn: &mut ConnState,
        h: &FrameHeader,
        now: &mut impl Now,
        hooks: &mut impl StreamHooks,
        budget: &impl ClientBudget,
    ) -> Check {
        self.frames_seen = true;
        self.in_settings = false;
        match h.ty {
            ty::HEADERS => {
                conn.server_headers(h.stream, now, hooks);
                if h.has(flag::END_STREAM) {
                    conn.server_ended(h.stream, now, hooks);
                }
            }
            ty::DATA if h.has(flag::END_STREAM) => conn.server_ended(h.stream, now, hooks),
            ty::RST_STREAM => conn.upstream_reset(h.stream, now, hooks, budget)?,
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
