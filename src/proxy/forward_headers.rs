//! Forwarded request headers (`sourceAddressHeader: 'xForwardedFor'`, `forwardFingerprint`
//! without a PROXY v2 header): the client → upstream bytes of an HTTP/1.1 route, rewritten
//! request by request (docs/proxy.md: Forwarded request headers).
//!
//! [`Rewriter`] is a streaming state machine over the client's bytes, without I/O:
//!
//! - **Head**: buffered until complete (at most [`MAX_HEAD_BYTES`], [`head::MAX_FIELDS`] fields)
//!   and parsed with `httparse`. On a rewriting route every client copy of `X-Forwarded-For`,
//!   `X-Forwarded-Proto`, `X-JA3` and `X-JA4` is removed — compared as a CGI/WSGI gateway maps
//!   names, any case and `_` for `-` ([`is_forwarded`]) — and so is each of those names listed in
//!   `Connection` (a next hop would delete the inserted lines as hop-by-hop); the route's own
//!   lines are inserted before the empty line. An `Upgrade` the route's [`Tunnels`] do not allow
//!   (`h2c` always) is declined: `Upgrade`, `HTTP2-Settings` and their `Connection` tokens are
//!   removed, and the request goes on as plain HTTP/1.1 (nginx's default). Every other line goes
//!   out as the client sent it. On a route that only carries HTTP ([`Rewriter::follow`]) nothing
//!   is inserted or scrubbed, but the same machine runs, so no upgrade or `CONNECT` the route does
//!   not allow, and no HTTP/2, gets past it.
//! - **Body**, framed as RFC 9112 §6 says for a request ([`head::framing`]): `Content-Length`
//!   bytes, or chunked (each chunk-size line parsed with `httparse::parse_chunk_size`, extensions
//!   allowed; the data; its CRLF; after the last chunk the trailer section, parsed with
//!   `httparse::parse_headers`), passed byte-exact; no length and no chunked coding is no body.
//!   Then the next (pipelined) request's head.
//! - **Tunnel**: after a `CONNECT` or a bodiless upgrade request (`Upgrade` + `Connection:
//!   upgrade`) the route allows, the client's bytes wait for the upstream's answer, found by
//!   following the responses' framing in response mode ([`Rewriter::responses`]): granted
//!   (`101`, `2xx` to `CONNECT`), everything that follows is passed as it is; declined, the next
//!   request is parsed (so a declined upgrade smuggles nothing past the rewriter).
//!
//! Bytes that are not such a stream are refused ([`Refused`]): a malformed head (obs-fold
//! included, and the HTTP/2 preface), a head over the limit, a body whose length two parsers
//! could read differently (`Content-Length` copies that differ, `Content-Length` beside
//! `Transfer-Encoding`, a `Transfer-Encoding` that does not end in `chunked`), a malformed chunk. Nothing after the last
//! good byte is forwarded; the connection path closes the pair (`bad_request`). A `CONNECT` the
//! route does not allow is refused the same way, but answered first: [`HeaderWriter`] gives the
//! client a `405` once the responses to the requests before it have passed.
//!
//! [`HeaderWriter`] (`follower.rs`) applies a rewriter to the writes into the upstream stream, so
//! the copy loop (`super::copy`) is the same one every route uses and the client's bytes are
//! counted as they arrived; body bytes go to the upstream from the copy buffer without another
//! copy. It also asks [`RequestHooks`] about each request (`requestLimit`, the upstream's
//! capacity) and holds each request to its deadlines ([`ConnLimits`]).

use super::head::{self, Framing, MAX_FIELDS, MAX_HEAD_BYTES};
use crate::config::proxy::{ForwardHeaders, Tunnels};
use std::net::IpAddr;

/// The request headers a client may not send on a rewriting route (compared by [`same_field`]).
pub const REMOVED: [&str; 4] = ["x-forwarded-for", "x-forwarded-proto", "x-ja3", "x-ja4"];

/// Whether the field name `name` is `canonical` (lower case) as an application may read it: ASCII
/// case-insensitive, `_` taken for `-` — a CGI/WSGI gateway maps both to `_` (RFC 3875 §4.1.18:
/// `X_Forwarded_For` and `X-Forwarded-For` are both `HTTP_X_FORWARDED_FOR`).
pub fn same_field(name: &[u8], canonical: &str) -> bool {
    name.len() == canonical.len()
        && name.iter().zip(canonical.bytes()).all(|(&a, b)| {
            let a = if a == b'_' {
                b'-'
            } else {
                a.to_ascii_lowercase()
            };
            a == b
        })
}

/// Whether `name` is one of the [`REMOVED`] fields in any spelling [`same_field`] accepts: the
/// one test of every path that forwards a client's request head (rewriting routes, the ACME path
/// of a `mode: 'http'` listener).
pub fn is_forwarded(name: &[u8]) -> bool {
    REMOVED.iter().any(|r| same_field(name, r))
}

/// Rampart's answer to a `CONNECT` the route does not allow (nginx answers `405` too); no
/// `Allow`: which methods the upstream takes is the upstream's business.
pub const CONNECT_REFUSED: &[u8] = b"HTTP/1.1 405 Method Not Allowed\r\n\
Content-Type: text/plain\r\nContent-Length: 23\r\nConnection: close\r\n\r\n\
405 Method Not Allowed\n";

/// Most bytes of one chunk-size line (size and extensions) or of a chunk's closing CRLF.
const MAX_CHUNK_LINE: usize = 4096;

/// A buffer emptied with more capacity than this is freed rather than kept: a connection
/// between requests holds no more than a small head's worth.
const KEEP_CAPACITY: usize = 4096;

/// Empties `v`, freeing a large allocation.
fn reset(v: &mut Vec<u8>) {
    if v.capacity() > KEEP_CAPACITY {
        *v = Vec::new();
    } else {
        v.clear();
    }
}

/// The header lines a route inserts into every request head (each ending in CRLF):
/// `X-Forwarded-For: <ip>` and `X-Forwarded-Proto: https`, `X-JA3: <md5>`, `X-JA4: <ja4>`,
/// as `h` asks.
pub fn header_lines(h: ForwardHeaders, ip: IpAddr, ja3: &str, ja4: &str) -> Vec<u8> {
    let mut out = String::new();
    if h.forwarded_for {
        out.push_str(&format!(
            "X-Forwarded-For: {ip}\r\nX-Forwarded-Proto: https\r\n"
        ));
    }
    if h.fingerprint.ja3 {
        out.push_str(&format!("X-JA3: {ja3}\r\n"));
    }
    if h.fingerprint.ja4 {
        out.push_str(&format!("X-JA4: {ja4}\r\n"));
    }
    out.into_bytes()
}

/// Why a client's bytes were refused (all counted as `bad_request`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// A request head over [`MAX_HEAD_BYTES`] or [`MAX_FIELDS`] fields, a chunk-size line over
    /// 4 KiB, a trailer section over [`MAX_HEAD_BYTES`].
    TooLarge,
    /// Not an HTTP/1.x request head (obs-fold included), or a malformed chunk.
    Malformed,
    /// A body two parsers could frame differently (request smuggling).
    Ambiguous,
    /// A `CONNECT` the route's [`Tunnels`] do not allow: answered [`CONNECT_REFUSED`].
    Connect,
}

/// What the rewriter made of the front of its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Forward `input[..n]` as it is; report how many went with [`Rewriter::passed`].
    Pass(usize),
    /// `input[..n]` was taken (kept until its head or line is complete); nothing to send yet.
    Held(usize),
    /// `input[..n]` was taken and [`Rewriter::take_out`] has bytes to send first.
    Emit(usize),
    /// Nothing can go until the upstream answered an upgrade or `CONNECT`
    /// ([`Rewriter::answered`]).
    Wait,
}

/// What a request asked for, for the response that answers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Any other request.
    Plain,
    /// `HEAD`: its response has no body whatever its fields say.
    Head,
    /// An upgrade request: `101` switches the connection to a tunnel.
    Upgrade,
    /// `CONNECT`: a `2xx` switches the connection to a tunnel.
    Connect,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Head,
    Body(u64),
    ChunkSize,
    ChunkData(u64),
    ChunkEnd,
    Trailers,
    /// An upgrade or `CONNECT` went out; the upstream has not answered it yet.
    Await,
    Tunnel,
}

/// The request-by-request rewriter of one connection's client → upstream bytes; in response
/// mode ([`Rewriter::responses`]) the same machine follows the upstream's responses without
/// changing them, to learn whether an upgrade or `CONNECT` was granted.
pub struct Rewriter {
    insert: Vec<u8>,
    /// Remove the client's [`REMOVED`] fields and `Connection` tokens (a rewriting route).
    scrub: bool,
    tunnels: Tunnels,
    state: State,
    held: Vec<u8>,
    out: Vec<u8>,
    /// Request mode: kinds of the requests emitted, not yet handed to the response side.
    /// Response mode: kinds of the requests not answered yet, oldest first.
    kinds: std::collections::VecDeque<Kind>,
    response: bool,
    /// Response mode: the answer to an upgrade / `CONNECT` just seen (granted or not).
    decided: Option<bool>,
    /// Request mode: the next request head gets `Connection: close` (the connection's last
    /// request, `slowRequest.maxRequestsPerConnection`).
    close: bool,
    /// Response mode: final (non-`1xx`, or `101`) response heads seen and not yet taken.
    finals: u32,
}

impl Rewriter {
    /// A rewriter inserting `insert` (from [`header_lines`]) into every request head, with the
    /// client's copies of [`REMOVED`] removed; tunnels only as `tunnels` allow.
    pub fn new(insert: Vec<u8>, tunnels: Tunnels) -> Rewriter {
        Rewriter {
            insert,
            scrub: true,
            tunnels,
            state: State::Head,
            held: Vec::new(),
            out: Vec::new(),
            kinds: Default::default(),
            response: false,
            decided: None,
            close: false,
            finals: 0,
        }
    }

    /// A follower of a route that carries HTTP without rewriting it: nothing inserted or
    /// removed but what `tunnels` decline; malformed or ambiguous requests refused all the same.
    pub fn follow(tunnels: Tunnels) -> Rewriter {
        Rewriter {
            scrub: false,
            ..Rewriter::new(Vec::new(), tunnels)
        }
    }

    /// A tracker of the upstream's responses (nothing inserted, nothing refused that matters:
    /// a stream it cannot follow is passed on as it is).
    pub fn responses() -> Rewriter {
        Rewriter {
            response: true,
            ..Rewriter::follow(Tunnels::default())
        }
    }

    /// Response mode: every response to the requests sent so far has passed whole.
    fn answered_all(&self) -> bool {
        self.state == State::Head && self.held.is_empty() && self.kinds.is_empty()
    }

    /// Whether every protocol the `Upgrade` fields in `fields` name is one `tunnels` allow (and
    /// there is at least one).
    fn upgrade_allowed(&self, fields: &[httparse::Header]) -> bool {
        let mut any = false;
        for f in fields
            .iter()
            .filter(|f| same_field(f.name.as_bytes(), "upgrade"))
        {
            for p in f.value.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
                if p.is_empty() {
                    continue;
                }
                if !self.tunnels.allows_upgrade(p) {
                    return false;
                }
                any = true;
            }
        }
        any
    }

    /// The upstream answered the upgrade / `CONNECT` the rewriter waits for: granted (`true`,
    /// the rest of the connection is a tunnel) or not (the next request is parsed).
    pub fn answered(&mut self, granted: bool) {
        if self.state == State::Await {
            self.state = if granted { State::Tunnel } else { State::Head };
        }
    }

    /// The bytes to send after an [`Step::Emit`] (taken: the next call returns none).
    pub fn take_out(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.out)
    }

    /// `n` bytes of the last [`Step::Pass`] were forwarded.
    pub fn passed(&mut self, n: usize) {
        let n = n as u64;
        self.state = match self.state {
            State::Body(rem) if rem == n => State::Head,
            State::Body(rem) => State::Body(rem - n),
            State::ChunkData(rem) if rem == n => State::ChunkEnd,
            State::ChunkData(rem) => State::ChunkData(rem - n),
            s => s,
        };
    }

    /// Whether the rewriter is between requests (nothing held, no body pending).
    pub fn idle(&self) -> bool {
        self.state == State::Head && self.held.is_empty()
    }

    /// Looks at the front of `input` (not empty).
    pub fn next(&mut self, input: &[u8]) -> Result<Step, Refused> {
        match self.state {
            State::Tunnel => Ok(Step::Pass(input.len())),
            State::Await => Ok(Step::Wait),
            State::Head if self.response => self.response_head(input),
            State::Body(rem) | State::ChunkData(rem) => Ok(Step::Pass(
                input.len().min(usize::try_from(rem).unwrap_or(usize::MAX)),
            )),
            State::Head => self.head(input),
            State::ChunkSize => self.chunk_size(input),
            State::ChunkEnd => self.chunk_end(input),
            State::Trailers => self.trailers(input),
        }
    }

    /// Appends up to the limit of `input` to `held`: how many.
    fn hold(&mut self, input: &[u8], limit: usize) -> usize {
        let n = input.len().min(limit.saturating_sub(self.held.len()));
        self.held.extend_from_slice(&input[..n]);
        n
    }

    fn head(&mut self, input: &[u8]) -> Result<Step, Refused> {
        let before = self.held.len();
        let took = self.hold(input, MAX_HEAD_BYTES);
        let mut fields = [httparse::EMPTY_HEADER; MAX_FIELDS];
        let mut req = httparse::Request::new(&mut fields);
        let len = match req.parse(&self.held) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) if self.held.len() >= MAX_HEAD_BYTES => {
                return Err(Refused::TooLarge)
            }
            Ok(httparse::Status::Partial) => return Ok(Step::Held(took)),
            Err(httparse::Error::TooManyHeaders) => return Err(Refused::TooLarge),
            Err(_) => return Err(Refused::Malformed),
        };
        let framing = head::framing(req.headers).ok_or(Refused::Ambiguous)?;
        let bodiless = matches!(framing, Framing::None | Framing::Length(0));
        // An upgrade with a body, or one the route does not allow, is declined: its `Upgrade`
        // is removed and the request is a plain one (the body forwarded as a body).
        let upgrade = bodiless && head::upgrade(req.headers) && self.upgrade_allowed(req.headers);
        let kind = match req.method {
            Some("CONNECT") if !self.tunnels.connect => return Err(Refused::Connect),
            Some("CONNECT") => Kind::Connect,
            Some("HEAD") => Kind::Head,
            _ if upgrade => Kind::Upgrade,
            _ => Kind::Plain,
        };
        self.kinds.push_back(kind);
        self.rewrite_head(len, upgrade);
        self.state = match framing {
            _ if matches!(kind, Kind::Upgrade | Kind::Connect) => State::Await,
            Framing::None | Framing::Length(0) => State::Head,
            Framing::Length(n) => State::Body(n),
            Framing::Chunked => State::ChunkSize,
        };
        reset(&mut self.held);
        Ok(Step::Emit(len - before))
    }

    /// Response mode: a response head; its request's kind says whether it has a body and
    /// whether it grants an upgrade or `CONNECT` (RFC 9112 §6.3). Interim `1xx` answer nothing.
    fn response_head(&mut self, input: &[u8]) -> Result<Step, Refused> {
        let before = self.held.len();
        let took = self.hold(input, MAX_HEAD_BYTES);
        let mut fields = [httparse::EMPTY_HEADER; MAX_FIELDS];
        let mut res = httparse::Response::new(&mut fields);
        let len = match res.parse(&self.held) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) if self.held.len() < MAX_HEAD_BYTES => {
                return Ok(Step::Held(took))
            }
            _ => return Err(Refused::Malformed),
        };
        let code = res.code.unwrap_or(0);
        let framing = head::framing(res.headers);
        reset(&mut self.held);
        if (100..200).contains(&code) && code != 101 {
            return Ok(Step::Held(len - before));
        }
        let kind = self.kinds.pop_front().unwrap_or(Kind::Plain);
        self.finals += 1;
        let granted = match kind {
            Kind::Upgrade => code == 101,
            Kind::Connect => (200..300).contains(&code),
            _ => false,
        };
        if matches!(kind, Kind::Upgrade | Kind::Connect) {
            self.decided = Some(granted);
        }
        self.state = match framing {
            _ if granted => State::Tunnel,
            _ if kind == Kind::Head || matches!(code, 101 | 204 | 304) => State::Head,
            Some(Framing::Length(0)) => State::Head,
            Some(Framing::Length(n)) => State::Body(n),
            Some(Framing::Chunked) => State::ChunkSize,
            // No length: the body runs to the close; or framing it cannot follow.
            Some(Framing::None) | None => State::Tunnel,
        };
        Ok(Step::Held(len - before))
    }

    /// Writes the complete head `held[..len]` into `out`: the request line and the client's
    /// fields as they were, the inserted lines, the empty line. Left out: [`REMOVED`] when
    /// scrubbing, `HTTP2-Settings`, `Upgrade` unless `upgrading`; `Connection` loses the tokens
    /// naming those (and goes when none is left).
    fn rewrite_head(&mut self, len: usize, upgrading: bool) {
        let scrub = self.scrub;
        let dropped = |name: &[u8]| {
            (scrub && is_forwarded(name))
                || same_field(name, "http2-settings")
                || (!upgrading && same_field(name, "upgrade"))
        };
        let head = &self.held[..len];
        let mut lines = head.split_inclusive(|&b| b == b'\n');
        // httparse skips empty lines before the request line (RFC 9112 §2.2): so does the copy.
        for line in lines.by_ref() {
            if line != b"\r\n" && line != b"\n" {
                self.out.extend_from_slice(line);
                break;
            }
        }
        for line in lines {
            if line == b"\r\n" || line == b"\n" {
                self.out.extend_from_slice(&self.insert);
                if self.close {
                    // A second `Connection` field is a list continued (RFC 9110 §5.3): `close`
                    // holds whatever the client's own field says.
                    self.out.extend_from_slice(b"Connection: close\r\n");
                }
                self.out.extend_from_slice(line);
                break;
            }
            let colon = line.iter().position(|&b| b == b':').unwrap_or(line.len());
            let name = &line[..colon];
            if dropped(name) {
                continue;
            }
            if same_field(name, "connection") {
                connection_line(&mut self.out, line, colon, dropped);
            } else {
                self.out.extend_from_slice(line);
            }
        }
    }

    fn chunk_size(&mut self, input: &[u8]) -> Result<Step, Refused> {
        let end = input.iter().position(|&b| b == b'\n').map(|i| i + 1);
        let took = self.hold(&input[..end.unwrap_or(input.len())], MAX_CHUNK_LINE);
        if !self.held[0].is_ascii_hexdigit() {
            return Err(Refused::Malformed);
        }
        if end != Some(took) {
            return match self.held.len() >= MAX_CHUNK_LINE {
                true => Err(Refused::TooLarge),
                false => Ok(Step::Held(took)),
            };
        }
        match httparse::parse_chunk_size(&self.held) {
            Ok(httparse::Status::Complete((n, size))) if n == self.held.len() => {
                self.state = match size {
                    0 => State::Trailers,
                    n => State::ChunkData(n),
                };
                self.out.append(&mut self.held);
                Ok(Step::Emit(took))
            }
            _ => Err(Refused::Malformed),
        }
    }

    fn chunk_end(&mut self, input: &[u8]) -> Result<Step, Refused> {
        let took = self.hold(input, 2);
        if !b"\r\n".starts_with(&self.held) {
            return Err(Refused::Malformed);
        }
        if self.held.len() < 2 {
            return Ok(Step::Held(took));
        }
        self.state = State::ChunkSize;
        self.out.append(&mut self.held);
        Ok(Step::Emit(took))
    }

    fn trailers(&mut self, input: &[u8]) -> Result<Step, Refused> {
        let before = self.held.len();
        let took = self.hold(input, MAX_HEAD_BYTES);
        let mut fields = [httparse::EMPTY_HEADER; MAX_FIELDS];
        match httparse::parse_headers(&self.held, &mut fields) {
            Ok(httparse::Status::Complete((len, _))) => {
                self.held.truncate(len);
                if self.scrub {
                    // A client copy of a forwarded field is dropped from the trailer section too
                    // (a gateway that merges trailers into the header fields must not see one).
                    for line in self.held.split_inclusive(|&b| b == b'\n') {
                        let colon = line.iter().position(|&b| b == b':').unwrap_or(line.len());
                        if !is_forwarded(&line[..colon]) {
                            self.out.extend_from_slice(line);
                        }
                    }
                    reset(&mut self.held);
                } else {
                    self.out.append(&mut self.held);
                }
                self.state = State::Head;
                Ok(Step::Emit(len - before))
            }
            Ok(httparse::Status::Partial) if self.held.len() >= MAX_HEAD_BYTES => {
                Err(Refused::TooLarge)
            }
            Ok(httparse::Status::Partial) => Ok(Step::Held(took)),
            Err(httparse::Error::TooManyHeaders) => Err(Refused::TooLarge),
            Err(_) => Err(Refused::Malformed),
        }
    }
}

/// Writes the `Connection` field `line` (its name ends at `colon`) into `out` without the tokens
/// `dropped` names (RFC 9110 §7.6.1: a next hop deletes every field `Connection` lists); as it
/// was when none is, not at all when none is left.
fn connection_line(out: &mut Vec<u8>, line: &[u8], colon: usize, dropped: impl Fn(&[u8]) -> bool) {
    let body = line.strip_suffix(b"\n").unwrap_or(line);
    let body = body.strip_suffix(b"\r").unwrap_or(body);
    let value = body.get(colon + 1..).unwrap_or_default();
    let tokens = || value.split(|&b| b == b',').map(<[u8]>::trim_ascii);
    if !tokens().any(&dropped) {
        out.extend_from_slice(line);
        return;
    }
    let mut kept = tokens().filter(|t| !t.is_empty() && !dropped(t)).peekable();
    if kept.peek().is_none() {
        return;
    }
    out.extend_from_slice(&line[..colon]);
    out.extend_from_slice(b": ");
    for (i, t) in kept.enumerate() {
        if i > 0 {
            out.extend_from_slice(b", ");
        }
        out.extend_from_slice(t);
    }
    out.extend_from_slice(&line[body.len()..]);
}

#[path = "follower.rs"]
mod follower;
pub use follower::{Answer, AnswerReason, ConnLimits, Ended, HeaderWriter, RequestHooks};

#[cfg(test)]
#[path = "forward_headers_tests.rs"]
mod tests;
