//! The first request head of a terminated HTTP connection (`slowRequest`): when is
//! it complete?
//!
//! - **HTTP/1.x**: the request line and header fields up to the empty line (`\r\n\r\n`), parsed
//!   with `httparse` (which also accepts bare `\n` line ends and skips leading empty lines, as
//!   RFC 9112 §2.2 allows). A body is not waited for.
//! - **HTTP/2** (ALPN `h2`): the 24-byte client preface (RFC 9113 §3.4), then frames until the
//!   end of the first header block: a HEADERS frame with END_HEADERS, or the CONTINUATION that
//!   carries it (§6.2, §6.10), received whole. Frames before it (SETTINGS, WINDOW_UPDATE,
//!   PRIORITY, ...) are skipped by their 9-byte header's length.
//!
//! Only frame headers and the HTTP/1 head are read: nothing is decoded (no HPACK). Bytes that
//! cannot begin such a head (not a request line, a wrong preface, a CONTINUATION outside a
//! block) are [`Head::Invalid`]: the connection path closes them rather than connect an upstream
//! for a client that sends no HTTP at all. The buffer is at most [`MAX_HEAD_BYTES`]; a head that
//! is still incomplete at that size is [`Head::Full`] — so much data in time is not a slow client,
//! and the upstream decides about an oversized head. Cost: one `httparse` pass per read (at most
//! 16 KiB), or a walk over the frame headers.

/// Most bytes buffered while waiting for the head (16 KiB).
pub const MAX_HEAD_BYTES: usize = 16 * 1024;

/// Header fields `httparse` is given room for; more is still a complete head (see [`Head::Full`]).
pub const MAX_FIELDS: usize = 128;

const PREFACE: &[u8] = crate::http2::PREFACE;
const FRAME_HEADER: usize = crate::http2::FRAME_HEADER_LEN;
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_HEADERS: u8 = 0x4;

/// How far the head is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Head {
    /// Complete within the first `n` bytes.
    Complete(usize),
    /// Needs more bytes.
    Partial,
    /// [`MAX_HEAD_BYTES`] buffered and still not complete: forward it as it is.
    Full,
    /// Not the beginning of a request of this protocol.
    Invalid,
}

/// The state of an HTTP/1.x request head in `buf`.
pub fn http1(buf: &[u8]) -> Head {
    let mut fields = [httparse::EMPTY_HEADER; MAX_FIELDS];
    let mut req = httparse::Request::new(&mut fields);
    match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => Head::Complete(n),
        Ok(httparse::Status::Partial) => full_or_partial(buf),
        // More fields than there is room for: the head is all there (or nearly); let it through.
        Err(httparse::Error::TooManyHeaders) => Head::Full,
        Err(_) => Head::Invalid,
    }
}

/// The state of an HTTP/2 client preface plus first header block in `buf`.
pub fn http2(buf: &[u8]) -> Head {
    if buf.len() < PREFACE.len() {
        return if PREFACE.starts_with(buf) {
            Head::Partial
        } else {
            Head::Invalid
        };
    }
    if &buf[..PREFACE.len()] != PREFACE {
        return Head::Invalid;
    }
    let mut pos = PREFACE.len();
    let mut in_block = false;
    loop {
        let Some(h) = buf.get(pos..pos + FRAME_HEADER) else {
            return full_or_partial(buf);
        };
        let len = u32::from_be_bytes([0, h[0], h[1], h[2]]) as usize;
        let (ty, flags) = (h[3], h[4]);
        let end = pos + FRAME_HEADER + len;
        let ends_block = flags & END_HEADERS != 0;
        match ty {
            HEADERS if !in_block => in_block = !ends_block,
            CONTINUATION if in_block => in_block = !ends_block,
            // A frame inside a header block, or a CONTINUATION outside one (§6.10).
            _ if in_block => return Head::Invalid,
            CONTINUATION => return Head::Invalid,
            _ => {}
        }
        if buf.len() < end {
            return full_or_partial(buf);
        }
        if matches!(ty, HEADERS | CONTINUATION) && ends_block {
            return Head::Complete(end);
        }
        pos = end;
    }
}

/// How a request's body is delimited (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No `Content-Length` and no `Transfer-Encoding`: no body.
    None,
    /// `Content-Length` bytes.
    Length(u64),
    /// `Transfer-Encoding` whose last coding is `chunked`.
    Chunked,
}

/// Whether `token` is one of the comma-separated elements of `value` (any case).
pub fn lists(value: &[u8], token: &str) -> bool {
    value
        .split(|&b| b == b',')
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
}

/// The body framing of a request with `fields`, `None` when two parsers could read it
/// differently (nginx and HAProxy answer these with 400): a `Content-Length` that is not one
/// decimal number (copies that differ, `3, 3`, a sign, past 2^64), one beside
/// `Transfer-Encoding`, a `Transfer-Encoding` whose last coding is not `chunked`.
pub fn framing(fields: &[httparse::Header]) -> Option<Framing> {
    let named = |name: &'static str| {
        fields
            .iter()
            .filter(move |h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value.trim_ascii())
    };
    let mut lengths = named("content-length");
    let te = named("transfer-encoding").next_back();
    match (lengths.next(), te) {
        (None, None) => Some(Framing::None),
        (Some(_), Some(_)) => None,
        (None, Some(te)) => {
            let last = te.rsplit(|&b| b == b',').next().unwrap_or(te).trim_ascii();
            last.eq_ignore_ascii_case(b"chunked")
                .then_some(Framing::Chunked)
        }
        (Some(l), None) => {
            if l.is_empty() || !l.iter().all(u8::is_ascii_digit) || lengths.any(|o| o != l) {
                return None;
            }
            std::str::from_utf8(l)
                .ok()?
                .parse()
                .ok()
                .map(Framing::Length)
        }
    }
}

/// Whether a request with `fields` asks to switch protocols: `Upgrade` and `Connection:
/// upgrade` (RFC 9110 §7.8; WebSocket).
pub fn upgrade(fields: &[httparse::Header]) -> bool {
    let has = |name: &str| fields.iter().any(|h| h.name.eq_ignore_ascii_case(name));
    has("upgrade")
        && fields
            .iter()
            .any(|h| h.name.eq_ignore_ascii_case("connection") && lists(h.value, "upgrade"))
}

fn full_or_partial(buf: &[u8]) -> Head {
    if buf.len() >= MAX_HEAD_BYTES {
        Head::Full
    } else {
        Head::Partial
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(ty: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = payload.len() as u32;
        let mut f = len.to_be_bytes()[1..].to_vec();
        f.extend([ty, flags]);
        f.extend(stream.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn http1_heads() {
        let req = b"GET / HTTP/1.1\r\nHost: a\r\n\r\nbody";
        assert_eq!(http1(req), Head::Complete(27));
        for cut in 0..27 {
            assert_eq!(http1(&req[..cut]), Head::Partial, "cut {cut}");
        }
        assert_eq!(http1(b"\r\nGET / HTTP/1.0\n\n"), Head::Complete(18));
        assert_eq!(http1(b"\x16\x03\x01\x00"), Head::Invalid);
        assert_eq!(http1(b"GET / HTTP/1.1\r\nBad Header\r\n"), Head::Invalid);
        let mut big = b"GET / HTTP/1.1\r\nX: ".to_vec();
        big.resize(MAX_HEAD_BYTES, b'a');
        assert_eq!(http1(&big), Head::Full);
        let mut many = b"GET / HTTP/1.1\r\n".to_vec();
        for i in 0..MAX_FIELDS + 1 {
            many.extend(format!("h{i}: v\r\n").bytes());
        }
        assert_eq!(http1(&many), Head::Full);
    }

    fn framing_of(head: &[u8]) -> Option<Framing> {
        let mut fields = [httparse::EMPTY_HEADER; 8];
        let mut req = httparse::Request::new(&mut fields);
        assert!(req.parse(head).unwrap().is_complete());
        framing(req.headers)
    }

    #[test]
    fn body_framing() {
        let f = |fields: &str| framing_of(format!("POST / HTTP/1.1\r\n{fields}\r\n").as_bytes());
        assert_eq!(f(""), Some(Framing::None));
        assert_eq!(f("Content-Length: 007\r\n"), Some(Framing::Length(7)));
        assert_eq!(
            f("content-length: 3\r\nContent-Length: 3\r\n"),
            Some(Framing::Length(3))
        );
        assert_eq!(
            f("Transfer-Encoding: gzip,CHUNKED\r\n"),
            Some(Framing::Chunked)
        );
        assert_eq!(
            f("Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n"),
            Some(Framing::Chunked)
        );
        for bad in [
            "Content-Length: 3\r\nContent-Length: 4\r\n",
            "Content-Length: 3,3\r\n",
            "Content-Length: -1\r\n",
            "Content-Length: 18446744073709551616\r\n",
            "Content-Length: 1\r\nTransfer-Encoding: chunked\r\n",
            "Transfer-Encoding: chunked, identity\r\n",
            "Transfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n",
        ] {
            assert_eq!(f(bad), None, "{bad}");
        }
        let up = |fields: &str| {
            let head = format!("GET / HTTP/1.1\r\n{fields}\r\n");
            let mut fs = [httparse::EMPTY_HEADER; 8];
            let mut req = httparse::Request::new(&mut fs);
            req.parse(head.as_bytes()).unwrap();
            upgrade(req.headers)
        };
        assert!(up(
            "Upgrade: websocket\r\nConnection: keep-alive, Upgrade\r\n"
        ));
        assert!(!up("Upgrade: websocket\r\n"));
        assert!(!up("Connection: upgrade\r\n"));
    }

    #[test]
    fn http2_heads() {
        let settings = frame(0x4, 0, 0, &[0, 3, 0, 0, 0, 100]);
        let wu = frame(0x8, 0, 0, &[0, 0, 0xff, 0]);
        let headers = frame(HEADERS, END_HEADERS | 1, 1, &[0x82, 0x84]);
        let mut b = PREFACE.to_vec();
        b.extend(&settings);
        b.extend(&wu);
        b.extend(&headers);
        let end = b.len();
        b.extend(frame(0x0, 1, 1, b"x"));
        assert_eq!(http2(&b), Head::Complete(end));
        for cut in 0..end {
            assert_eq!(http2(&b[..cut]), Head::Partial, "cut {cut}");
        }
        // A block split over CONTINUATION frames ends with the one that carries END_HEADERS.
        let mut c = PREFACE.to_vec();
        c.extend(frame(HEADERS, 0, 1, &[0x82]));
        let mid = c.len();
        c.extend(frame(CONTINUATION, 0, 1, &[0x84]));
        c.extend(frame(CONTINUATION, END_HEADERS, 1, &[0x86]));
        assert_eq!(http2(&c[..mid]), Head::Partial);
        assert_eq!(http2(&c), Head::Complete(c.len()));
        // Wrong preface, a frame inside a block, a stray CONTINUATION.
        assert_eq!(http2(b"PRI * HTTP/1.1"), Head::Invalid);
        assert_eq!(http2(b"GET / HTTP/1.1\r\n\r\n"), Head::Invalid);
        let mut d = PREFACE.to_vec();
        d.extend(frame(HEADERS, 0, 1, &[0x82]));
        d.extend(frame(0x6, 0, 0, &[0; 8]));
        assert_eq!(http2(&d), Head::Invalid);
        let mut e = PREFACE.to_vec();
        e.extend(frame(CONTINUATION, END_HEADERS, 1, &[]));
        assert_eq!(http2(&e), Head::Invalid);
        // A head that does not fit the buffer is forwarded as it is.
        let mut f = PREFACE.to_vec();
        f.extend(frame(HEADERS, END_HEADERS, 1, &vec![0; MAX_HEAD_BYTES]));
        f.truncate(MAX_HEAD_BYTES);
        assert_eq!(http2(&f), Head::Full);
    }
}
