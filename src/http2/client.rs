//! The client → upstream inspector: the connection preface, then every frame header (streams
//! opened, resets, control frames, header blocks).

use super::conn_state::{stop, ConnState, HeaderReader, Now};
use super::frame::{flag, ty, FrameHeader, PREFACE};
use super::hooks::{ClientBudget, StreamHooks};
use super::limits::{Check, End, Inspect, ProtocolError, Violation};

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
        self.inspect_at(conn, chunk, &mut { now_ns }, &mut (), &())
    }

    /// [`ClientToUpstream::inspect`] with the time asked for only when a decision needs it,
    /// telling `hooks` of each stream opened, reset or ended, and counting streams, resets and
    /// control frames against the client's `budget` too.
    pub fn inspect_at(
        &mut self,
        conn: &mut ConnState,
        chunk: &[u8],
        now: &mut impl Now,
        hooks: &mut impl StreamHooks,
        budget: &impl ClientBudget,
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
                    let r = self.read_increment(conn, &chunk[i..i + take], now, budget);
                    if let Err(end) = r {
                        return stop(conn, end, frame_start);
                    }
                }
                i += take;
                self.header.remaining = remaining - take as u32;
                continue;
            }
            // The reader as it was before this header, for a held frame (16 bytes).
            let before = self.header.clone();
            let Some(h) = self.header.read(chunk, &mut i, &mut frame_start) else {
                break;
            };
            match self.on_header(conn, &h, now, hooks, budget) {
                Ok(()) => {}
                Err(End::Hold) => {
                    // Inspected again from this frame's start once the hooks are ready.
                    self.header = before;
                    return Inspect::Hold {
                        at: frame_start.unwrap_or(0),
                    };
                }
                Err(end) => return stop(conn, end, frame_start),
            }
            self.header.remaining = h.len;
        }
        hooks.chunk_done();
        Inspect::Forward
    }

    /// Classifies one complete client frame header.
    #[inline]
    fn on_header(
        &mut self,
        conn: &mut ConnState,
        h: &FrameHeader,
        now: &mut impl Now,
        hooks: &mut impl StreamHooks,
        budget: &impl ClientBudget,
    ) -> Check {
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
                    conn.control_frame(now, budget)?;
                }
                if end_stream {
                    conn.client_ended(h.stream, now, hooks);
                }
            }
            ty::HEADERS => {
                let end_stream = h.has(flag::END_STREAM);
                // A client stream opens at its first HEADERS on a new odd id (§5.1.1); HEADERS
                // on an older id are trailers (or on a closed stream: the upstream's error).
                let opens = h.stream % 2 == 1 && h.stream > conn.last_stream_id;
                if opens {
                    if conn.drain_last != 0 {
                        // A new stream after the graceful GOAWAY (RFC 9113 §6.8: above its
                        // last-stream-id, so unprocessed and safe to retry).
                        return Err(End::Drained);
                    }
                    // Nothing of this frame is counted before the hooks let it go.
                    if !conn.stream_ready(h.stream, now, hooks) {
                        return Err(End::Hold);
                    }
                    conn.admit_stream(now, budget)?;
                }
                if u64::from(h.len) > conn.max_header_block_bytes {
                    return Err(End::Violation(Violation::HeaderBlock));
                }
                // Only now, when every check passed, are the hooks asked; once they accept, the
                // frame will be forwarded and the stream exists.
                if opens {
                    conn.open_stream(h.stream, end_stream, now, hooks)?;
                } else if end_stream {
                    conn.client_ended(h.stream, now, hooks);
                }
                if !h.has(flag::END_HEADERS) {
                    self.block = Some(Block {
                        stream: h.stream,
                        bytes: u64::from(h.len),
                        continuations: 0,
                    });
                }
            }
            ty::PRIORITY | ty::SETTINGS | ty::PING => conn.control_frame(now, budget)?,
            ty::RST_STREAM => conn.client_reset(h.stream, now, hooks, budget)?,
            ty::WINDOW_UPDATE => {
                if h.len < 4 {
                    // Malformed (FRAME_SIZE_ERROR for the upstream); no increment to read.
                    conn.control_frame(now, budget)?;
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
        budget: &impl ClientBudget,
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
            conn.control_frame(now, budget)?;
        }
        Ok(())
    }
}
