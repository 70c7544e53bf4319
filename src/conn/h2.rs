//! HTTP/2 in the pump phase (docs/protection.md: HTTP/2 guard): [`FirstAckFilter`] keeps the
//! client's acknowledgement of Rampart's own SETTINGS from the upstream on every terminated
//! connection whose ALPN is `h2`, and [`H2Inspector`] runs one [`H2Guard`] over both directions of
//! it, as the copy loop's [`Inspector`].
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
//! A shed stream ([`StreamHooks::opened`] refused it) ends the connection the same way, with
//! the shed reason's GOAWAY. Past `maxStreamsPerConnection` the guard writes a graceful GOAWAY
//! (NO_ERROR) between two upstream frames ([`Inspector::interject`]) and the connection goes on
//! until its streams are done; a stream opened after it ends the connection like a violation
//! but unreported.
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
use crate::http2::{
    ClientBudget, FirstSettingsAck, H2Guard, H2GuardConfig, Inspect, ProtocolError, ShedReason,
    StreamHooks, Violation, FRAME_HEADER_LEN,
};
use crate::proxy::copy::{Dir, Flow, Inspector, FAREWELL_MAX};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// How long an ending connection may take to forward its last frames and the GOAWAY.
pub(crate) const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// Why the guard ended a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum H2End {
    /// A limit was exceeded (`h2_flood`).
    Violation(Violation),
    /// Not HTTP/2 the guard can follow (`errorsByReason.h2_protocol_error`).
    Protocol(ProtocolError),
    /// The stream hooks shed a stream (reported with this reason).
    Shed(ShedReason),
}

/// The guard as a copy-loop inspector; `on_violation` is called once, at the first violation.
/// `hooks` hear of each client stream and may shed one ([`StreamHooks`]); `budget` is the
/// client's HTTP/2 budget over all its connections ([`ClientBudget`]); both `()` by default.
/// Dropping the inspector closes, for the hooks, every stream still open.
pub(crate) struct H2Inspector<F: FnMut(Violation), H: StreamHooks = (), B: ClientBudget = ()> {
    guard: H2Guard<H, B>,
    observe: bool,
    /// Observe mode after a violation: inspect nothing more.
    off: bool,
    reported: bool,
    on_violation: F,
    give_up: Option<Pin<Box<Sleep>>>,
}

impl<F: FnMut(Violation), H: StreamHooks, B: ClientBudget> H2Inspector<F, H, B> {
    /// A guard for a new connection whose client already received Rampart's SETTINGS (so a
    /// GOAWAY needs no server preface before it), with stream `hooks` and the client's `budget`;
    /// `observe`: report violations but forward everything.
    pub(crate) fn with(
        config: &H2GuardConfig,
        observe: bool,
        on_violation: F,
        hooks: H,
        budget: B,
    ) -> Self {
        let mut guard = H2Guard::with(config, hooks, budget);
        guard.server_preface_sent();
        H2Inspector {
            guard,
            observe,
            off: false,
            reported: false,
            on_violation,
            give_up: None,
        }
    }

    /// Why the guard ended the connection; `None` when it did not (and in observe mode), or
    /// when it closed a connection past `maxStreamsPerConnection` (not an error).
    pub(crate) fn ended(&self) -> Option<H2End> {
        if self.off {
            return None;
        }
        let state = self.guard.state();
        match (state.violation(), state.protocol_error(), state.shed()) {
            (Some(v), _, _) => Some(H2End::Violation(v)),
            (None, Some(e), _) => Some(H2End::Protocol(e)),
            (None, None, Some(r)) => Some(H2End::Shed(r)),
            (None, None, None) => None,
        }
    }

    fn ending(&mut self, at: usize) -> Flow {
        if self.give_up.is_none() {
            self.give_up = Some(Box::pin(tokio::time::sleep(CLOSE_GRACE)));
        }
        Flow::Stop(at)
    }
}

impl<F: FnMut(Violation), H: StreamHooks, B: ClientBudget> Inspector for H2Inspector<F, H, B> {
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
            Inspect::Hold { at } => Flow::Hold(at),
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
            Inspect::ProtocolError { at, .. }
            | Inspect::Shed { at, .. }
            | Inspect::Drained { at } => self.ending(at),
        }
    }

    /// A stream answered, and no violation reported (observe mode goes on after one).
    #[inline]
    fn exchanged(&self) -> bool {
        !self.reported && self.guard.state().answered()
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

    fn interject(&mut self, dir: Dir, out: &mut [u8; FAREWELL_MAX]) -> usize {
        if self.off || dir != Dir::ToClient {
            return 0;
        }
        match self.guard.interjection() {
            Some(g) => {
                let b = g.as_bytes();
                out[..b.len()].copy_from_slice(b);
                b.len()
            }
            None => 0,
        }
    }

    fn poll_resume(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.guard.hooks_mut().poll_ready(cx)
    }

    fn poll_give_up(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        match self.give_up.as_mut() {
            Some(s) => s.as_mut().poll(cx),
            None => Poll::Pending,
        }
    }
}

/// The client's side of a terminated h2 connection, with its first SETTINGS ACK — the one that
/// acknowledges Rampart's SETTINGS — rewritten to a frame the upstream ignores
/// ([`FirstSettingsAck`]). Until that ACK has passed, each read is walked and a frame header
/// split over two reads (at most 8 bytes) is held back until it is whole, so the type byte is
/// never forwarded before its flags are known; then every read goes straight to the stream.
/// Writes pass through. Cost after the ACK: one branch per read.
pub(crate) struct FirstAckFilter<S> {
    inner: S,
    walk: FirstSettingsAck,
    held: [u8; FRAME_HEADER_LEN - 1],
    held_len: u8,
    /// Bytes already walked, delivered before everything else ([`FirstAckFilter::replay`]).
    replay: Vec<u8>,
    replay_pos: usize,
}

impl<S> FirstAckFilter<S> {
    /// Delivers `bytes` (already walked: the part of the head phase's buffer the HTTP/2 guard
    /// held, a stream waiting for room) before anything else, as they are.
    pub(crate) fn replay(&mut self, bytes: Vec<u8>) {
        self.replay = bytes;
        self.replay_pos = 0;
    }

    /// `inner`, read from the point where `walk` left the client's stream; `held` are the bytes
    /// its last [`FirstSettingsAck::filter`] left undecided (at most 8), delivered (decided)
    /// before anything read from `inner`.
    pub(crate) fn new(inner: S, walk: FirstSettingsAck, held: &[u8]) -> Self {
        let mut f = FirstAckFilter {
            inner,
            walk,
            held: [0; FRAME_HEADER_LEN - 1],
            held_len: 0,
            replay: Vec::new(),
            replay_pos: 0,
        };
        let n = held.len().min(f.held.len());
        f.held[..n].copy_from_slice(&held[..n]);
        f.held_len = n as u8;
        f
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for FirstAckFilter<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.replay.is_empty() {
            let n = buf.remaining().min(this.replay.len() - this.replay_pos);
            buf.put_slice(&this.replay[this.replay_pos..this.replay_pos + n]);
            this.replay_pos += n;
            if this.replay_pos == this.replay.len() {
                this.replay = Vec::new();
            }
            return Poll::Ready(Ok(()));
        }
        if this.walk.is_done() && this.held_len == 0 {
            return Pin::new(&mut this.inner).poll_read(cx, buf);
        }
        loop {
            let h = this.held_len as usize;
            let out = buf.initialize_unfilled();
            if out.len() <= h {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "read buffer smaller than an HTTP/2 frame header",
                )));
            }
            out[..h].copy_from_slice(&this.held[..h]);
            let mut rest = ReadBuf::new(&mut out[h..]);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut rest))?;
            let n = rest.filled().len();
            if n == 0 {
                // End of stream: the held bytes are a header cut short, not an ACK.
                this.held_len = 0;
                buf.advance(h);
                return Poll::Ready(Ok(()));
            }
            let total = h + n;
            let decided = this.walk.filter(&mut out[..total]);
            let undecided = total - decided;
            this.held[..undecided].copy_from_slice(&out[decided..total]);
            this.held_len = undecided as u8;
            if decided > 0 {
                buf.advance(decided);
                return Poll::Ready(Ok(()));
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for FirstAckFilter<S> {
    #[inline]
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, data)
    }

    #[inline]
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    #[inline]
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    #[inline]
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    #[inline]
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http2::{ACK_STAND_IN, PREFACE};
    use std::collections::VecDeque;
    use tokio::io::AsyncReadExt;

    /// A client that delivers one chunk per read, with a `Pending` (woken at once) before each.
    struct Chunks {
        chunks: VecDeque<Vec<u8>>,
        pending: bool,
    }

    impl AsyncRead for Chunks {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            self.pending = !self.pending;
            if self.pending {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            if let Some(c) = self.chunks.pop_front() {
                let n = c.len().min(buf.remaining());
                buf.put_slice(&c[..n]);
                if n < c.len() {
                    self.chunks.push_front(c[n..].to_vec());
                }
            }
            Poll::Ready(Ok(()))
        }
    }

    const ACK: [u8; 9] = [0, 0, 0, 4, 1, 0, 0, 0, 0];

    fn stream() -> (Vec<u8>, usize) {
        let mut b = PREFACE.to_vec();
        b.extend([0, 0, 6, 4, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0xff, 0xff]);
        b.extend([0, 0, 3, 1, 5, 0, 0, 0, 1, 0x82, 0x87, 0x84]);
        let ack = b.len();
        b.extend(ACK);
        b.extend([0, 0, 3, 1, 5, 0, 0, 0, 3, 0x82, 0x87, 0x84]);
        b.extend(ACK);
        (b, ack)
    }

    async fn read_all(head: &[u8], rest: Vec<Vec<u8>>, read_size: usize) -> Vec<u8> {
        let mut walk = FirstSettingsAck::new();
        let mut head = head.to_vec();
        let decided = walk.filter(&mut head);
        let held = head.split_off(decided);
        let inner = Chunks {
            // An empty read is the end of the stream.
            chunks: rest.into_iter().filter(|c| !c.is_empty()).collect(),
            pending: false,
        };
        let mut f = FirstAckFilter::new(inner, walk, &held);
        let mut out = head;
        let mut buf = vec![0u8; read_size];
        loop {
            let n = f.read(&mut buf).await.expect("read");
            if n == 0 {
                return out;
            }
            out.extend_from_slice(&buf[..n]);
        }
    }

    #[tokio::test]
    async fn the_first_ack_is_rewritten_however_head_and_reads_split_it() {
        let (b, ack) = stream();
        let mut want = b.clone();
        want[ack + 3] = ACK_STAND_IN;
        for head_len in [0, 24, 30, ack, ack + 2, ack + 4, ack + 5, ack + 9, b.len()] {
            for cut in head_len..=b.len() {
                let rest = vec![b[head_len..cut].to_vec(), b[cut..].to_vec()];
                for read_size in [9, 16, 512] {
                    let got = read_all(&b[..head_len], rest.clone(), read_size).await;
                    assert_eq!(
                        got, want,
                        "head {head_len}, cut {cut}, reads of {read_size}"
                    );
                }
            }
        }
        // One byte per read.
        let rest = b.iter().map(|&x| vec![x]).collect();
        assert_eq!(read_all(&[], rest, 512).await, want);
    }

    #[tokio::test]
    async fn a_stream_that_ends_mid_header_delivers_what_it_held() {
        let mut b = PREFACE.to_vec();
        b.extend(&ACK[..5]);
        assert_eq!(read_all(&[], vec![b.clone()], 512).await, b);
        assert_eq!(read_all(&b, vec![], 512).await, b);
    }
}
