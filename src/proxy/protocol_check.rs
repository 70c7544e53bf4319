//! The upstream answers in the protocol the connection speaks, or the connection ends with a
//! report (`errorsByReason.upstream_protocol_mismatch` and an `'error'` event), never with the
//! client getting bytes it cannot parse and the operator nothing.
//!
//! Checked on the first bytes the upstream sends, by an [`Inspector`] around the connection's own:
//! - an HTTP/2 connection: the upstream's server connection preface is a SETTINGS frame (RFC 9113
//!   §3.4), so its first frame header starts with a zero length byte (a SETTINGS payload is a
//!   few dozen bytes) and has type 0x4; an HTTP/1.x reply (`HTTP/1.1 400 ...`) starts with `H`.
//!   The client gets a GOAWAY (last stream 0: nothing was processed, it may retry;
//!   INTERNAL_ERROR; debug data `upstream not h2`) instead of the upstream's bytes.
//! - an HTTP/1.x request on a route that carries HTTP: a reply starts with `HTTP/`; an h2c
//!   upstream answers a frame (its SETTINGS), whose first byte is zero. The client gets
//!   `HTTP/1.1 502 Bad Gateway` (closed at its end) instead.
//!
//! The check costs one branch per chunk after the first upstream chunk.

use crate::proxy::copy::{Dir, Flow, Inspector, FAREWELL_MAX};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Sleep;

/// RFC 9113 §7 INTERNAL_ERROR: what the GOAWAY after a mismatch carries.
pub(crate) const INTERNAL_ERROR: u32 = 0x2;

/// GOAWAY debug data after a mismatch on an HTTP/2 connection.
pub(crate) const H2_DEBUG: &[u8] = b"upstream not h2";

/// What an HTTP/1.x client gets after a mismatch (the body ends at the close).
pub(crate) const HTTP1_BAD_GATEWAY: &[u8] = b"HTTP/1.1 502 Bad Gateway\r\n\r\n";

/// How long the ending connection may take to write the farewell.
const GRACE: Duration = Duration::from_secs(1);

/// The protocol the upstream must answer in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Expect {
    /// HTTP/2 with prior knowledge: a SETTINGS frame first.
    H2,
    /// HTTP/1.x: `HTTP/` first, at least not an HTTP/2 frame.
    Http1,
}

/// How the upstream's first bytes went against [`Expect`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mismatch {
    /// What was expected.
    pub expected: Expect,
    /// The upstream's first bytes (at most 16), as received.
    pub first_bytes: Vec<u8>,
}

impl Mismatch {
    /// A sentence for the `'error'` event, naming the upstream (`upstream`, as
    /// [`crate::proxy::upstream::describe`] writes it) and what to change.
    pub(crate) fn message(&self, upstream: &str) -> String {
        let shown: String = self.first_bytes.escape_ascii().to_string();
        match self.expected {
            Expect::H2 => format!(
                "upstream {upstream} did not answer HTTP/2 to an h2 connection (its first bytes: \"{shown}\"): it does not speak h2c; give it protocol: 'http/1.1' (h2 clients then go to 'h2' upstreams only) or take http2 off the route"
            ),
            Expect::Http1 => format!(
                "upstream {upstream} answered HTTP/2 frames to an HTTP/1.1 request (its first bytes: \"{shown}\"): it speaks h2c only; give it protocol: 'h2'"
            ),
        }
    }
}

/// An [`Inspector`] that checks the upstream's first bytes against `expect` before `inner` sees
/// anything of that direction, and ends the pair on a mismatch.
pub(crate) struct ProtocolCheck<I: Inspector> {
    inner: I,
    expect: Expect,
    /// The first upstream byte was judged.
    decided: bool,
    mismatch: Option<Mismatch>,
    give_up: Option<Pin<Box<Sleep>>>,
}

impl<I: Inspector> ProtocolCheck<I> {
    /// `inner` behind the check.
    pub(crate) fn new(inner: I, expect: Expect) -> Self {
        ProtocolCheck {
            inner,
            expect,
            decided: false,
            mismatch: None,
            give_up: None,
        }
    }

    /// The wrapped inspector.
    pub(crate) fn inner(&self) -> &I {
        &self.inner
    }

    /// The mismatch that ended the pair, if one did.
    pub(crate) fn mismatch(&self) -> Option<&Mismatch> {
        self.mismatch.as_ref()
    }

    /// Whether `first` (the upstream's first chunk, not empty) is the protocol expected.
    fn speaks(&self, first: &[u8]) -> bool {
        match self.expect {
            // A frame header: 24-bit length (a SETTINGS payload < 65536: first byte 0), then
            // the type, SETTINGS.
            Expect::H2 => first[0] == 0 && first.get(3).is_none_or(|&t| t == 0x4),
            Expect::Http1 => first[0] != 0,
        }
    }
}

impl<I: Inspector> Inspector for ProtocolCheck<I> {
    #[inline]
    fn inspect(&mut self, dir: Dir, chunk: &mut [u8]) -> Flow {
        if self.mismatch.is_some() {
            return Flow::Stop(0);
        }
        if dir == Dir::ToClient && !self.decided && !chunk.is_empty() {
            self.decided = true;
            if !self.speaks(chunk) {
                self.mismatch = Some(Mismatch {
                    expected: self.expect,
                    first_bytes: chunk[..chunk.len().min(16)].to_vec(),
                });
                self.give_up = Some(Box::pin(tokio::time::sleep(GRACE)));
                return Flow::Stop(0);
            }
        }
        self.inner.inspect(dir, chunk)
    }

    #[inline]
    fn stopped(&self, dir: Dir) -> bool {
        self.mismatch.is_some() || self.inner.stopped(dir)
    }

    fn farewell(&self, dir: Dir, out: &mut [u8; FAREWELL_MAX]) -> usize {
        match (&self.mismatch, dir) {
            (Some(m), Dir::ToClient) => {
                let bytes = match m.expected {
                    Expect::H2 => goaway_with_debug(),
                    Expect::Http1 => {
                        let mut b = [0u8; FAREWELL_MAX];
                        b[..HTTP1_BAD_GATEWAY.len()].copy_from_slice(HTTP1_BAD_GATEWAY);
                        (b, HTTP1_BAD_GATEWAY.len())
                    }
                };
                out[..bytes.1].copy_from_slice(&bytes.0[..bytes.1]);
                bytes.1
            }
            (Some(_), Dir::ToUpstream) => 0,
            (None, _) => self.inner.farewell(dir, out),
        }
    }

    fn interject(&mut self, dir: Dir, out: &mut [u8; FAREWELL_MAX]) -> usize {
        if self.mismatch.is_some() {
            return 0;
        }
        self.inner.interject(dir, out)
    }

    #[inline]
    fn exchanged(&self) -> bool {
        self.inner.exchanged()
    }
    #[inline]
    fn poll_resume(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.inner.poll_resume(cx)
    }

    fn poll_give_up(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        match self.give_up.as_mut() {
            Some(s) => s.as_mut().poll(cx),
            None => self.inner.poll_give_up(cx),
        }
    }
}

/// GOAWAY (RFC 9113 §6.8): last stream 0, INTERNAL_ERROR, debug data [`H2_DEBUG`].
fn goaway_with_debug() -> ([u8; FAREWELL_MAX], usize) {
    let mut f = [0u8; FAREWELL_MAX];
    let mut g = crate::http2::goaway_frame(0, INTERNAL_ERROR);
    g[2] = (8 + H2_DEBUG.len()) as u8;
    f[..g.len()].copy_from_slice(&g);
    f[g.len()..g.len() + H2_DEBUG.len()].copy_from_slice(H2_DEBUG);
    (f, g.len() + H2_DEBUG.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::copy::Pass;

    #[tokio::test]
    async fn first_upstream_bytes_decide() {
        let mut c = ProtocolCheck::new(Pass, Expect::H2);
        assert_eq!(
            c.inspect(Dir::ToUpstream, &mut b"PRI * HTTP/2.0".to_vec()),
            Flow::All
        );
        let settings = &mut [0, 0, 6, 4, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 100];
        assert_eq!(c.inspect(Dir::ToClient, settings), Flow::All);
        assert_eq!(
            c.inspect(Dir::ToClient, &mut b"HTTP/1.1".to_vec()),
            Flow::All
        );
        assert!(c.mismatch().is_none());

        let mut c = ProtocolCheck::new(Pass, Expect::H2);
        let reply = &mut b"HTTP/1.1 400 Bad Request\r\n\r\n".to_vec();
        assert_eq!(c.inspect(Dir::ToClient, reply), Flow::Stop(0));
        assert!(c.stopped(Dir::ToUpstream));
        let m = c.mismatch().unwrap();
        assert_eq!(m.first_bytes, b"HTTP/1.1 400 Bad");
        assert!(m.message("unix:/run/h1.sock").starts_with(
            "upstream unix:/run/h1.sock did not answer HTTP/2 to an h2 connection (its first bytes: \"HTTP/1.1 400 Bad\")"
        ));
        let mut out = [0u8; FAREWELL_MAX];
        let n = c.farewell(Dir::ToClient, &mut out);
        assert_eq!(
            &out[..n],
            b"\x00\x00\x17\x07\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02upstream not h2"
        );

        let mut c = ProtocolCheck::new(Pass, Expect::Http1);
        let frame = &mut [0u8, 0, 0, 4, 0, 0, 0, 0, 0];
        assert_eq!(c.inspect(Dir::ToClient, frame), Flow::Stop(0));
        let n = c.farewell(Dir::ToClient, &mut out);
        assert_eq!(&out[..n], HTTP1_BAD_GATEWAY);
        let mut c = ProtocolCheck::new(Pass, Expect::Http1);
        assert_eq!(
            c.inspect(Dir::ToClient, &mut b"HTTP/1.1 200".to_vec()),
            Flow::All
        );
    }
}
