//! `mode: 'http'` listeners: HTTP/1.1 without TLS, for ACME HTTP-01 and redirects to https
//! (docs/proxy.md: HTTP listener).
//!
//! Per request head (parsed with `httparse`, at most [`MAX_HEAD_BYTES`]):
//! - no `Host` (or more than one) → `400`; a `Host` that is not `name[:port]` → `400` and close;
//! - a `Host` (port stripped) that no route's `sni` matches — the route table's own matcher, so
//!   the rules are those of TLS routing, default route `''` included — → `404`, or, with the
//!   listener's `redirectUnknownHosts` (Symphony's behaviour), the `301` below unless the
//!   request is an ACME challenge;
//! - `GET /.well-known/acme-challenge/<token>` (no body, a base64url token, the path alone: no
//!   query or fragment; an absolute-form target's path) → its head alone proxied to that route's
//!   upstreams (its `sourceAddressHeader` first) in origin-form, with `Connection: close` and
//!   without the client's hop-by-hop fields or copies of the forwarded request headers
//!   ([`is_forwarded`]): the upstream's answer goes back to the client and the connection ends
//!   with it (the client's later bytes are dropped); over the route's `maxConnectionsPerSecond`
//!   → `503` (`route_rate_limited`);
//! - an absolute-form target whose host is not `Host`, a `Content-Length` that is not one
//!   number or is beside `Transfer-Encoding`, or a `Transfer-Encoding` whose last coding is not
//!   `chunked` → `400` and close;
//! - anything else → `301 Location: https://<host><path>` (path and query as sent).
//!
//! `301`, `400` and `404` keep the connection alive (HTTP/1.1 unless `Connection: close`;
//! HTTP/1.0 with `Connection: keep-alive`, at most [`MAX_REQUESTS_PER_CONNECTION`] requests)
//! unless the request has a body, which is not read; an answer not written within
//! `idleTimeoutMs` closes the connection. A
//! head that does not fit [`MAX_HEAD_BYTES`] is answered `431`, bytes that are not HTTP/1.x `400`,
//! and the connection closed. Admission at accept ran before this; `slowRequest` bounds each
//! head: the first within `headTimeoutMs` of accept, a later one within `headTimeoutMs` of its
//! first byte (the wait for that byte is bounded by `idleTimeoutMs`). Without protection the
//! default `headTimeoutMs` (10 s) applies.

use super::proxy_in::Origin;
use crate::clock;
use crate::config::proxy::ListenerId;
use crate::config::proxy::{AppProtocol, SourceAddressHeader};
use crate::metrics::ErrorReason;
use crate::protection::policy::DEFAULT_HEAD_TIMEOUT_MS;
use crate::protection::{BlockReason, Mode, Verdict};
use crate::proxy::forward_headers::{is_forwarded, same_field};
use crate::proxy::head::{self, lists, Framing, MAX_HEAD_BYTES};
use crate::proxy::proxy_protocol::{v1_header, v2_header};
use crate::proxy::routes::CompiledRoute;
use crate::proxy::upstream;
use crate::shared::Shared;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// The path prefix of ACME HTTP-01 challenges (RFC 8555 §8.3).
pub(crate) const ACME_PREFIX: &str = "/.well-known/acme-challenge/";

/// Header fields `httparse` is given room for; more is answered `431`.
const MAX_FIELDS: usize = 100;

/// Requests one connection may carry; the last answer closes it (nginx's `keepalive_requests`).
pub(crate) const MAX_REQUESTS_PER_CONNECTION: u32 = 1000;

/// How long a closing connection's unread bytes are drained so the client reads the answer
/// (instead of a reset), at most.
const LINGER: Duration = Duration::from_millis(500);

/// The wait that stands for "no idle timeout" (`idleTimeoutMs: 0`) where a deadline is needed:
/// about 30 years, never reached, and far from `Instant`'s overflow.
const NO_IDLE_TIMEOUT: Duration = Duration::from_secs(30 * 365 * 86_400);

/// What the listener needs of one request head.
#[derive(Debug, PartialEq, Eq)]
struct Request {
    /// Bytes of the head in the buffer.
    len: usize,
    /// `Host` without its port, when there is exactly one valid `Host`.
    host: HostField,
    /// Path and query for the redirect (`/` for `*` and authority-form targets).
    path: String,
    /// `GET /.well-known/acme-challenge/<token>`.
    acme: bool,
    /// The connection may carry another request after the answer.
    keep_alive: bool,
    /// The head rewritten for the upstream: `Connection: close` instead of the client's
    /// connection options.
    upstream_head: Vec<u8>,
}

/// The request's `Host`.
#[derive(Debug, PartialEq, Eq)]
enum HostField {
    /// None at all.
    Missing,
    /// Several, or one that is not `name[:port]`.
    Invalid,
    /// The name, port stripped (IPv6 literals keep their brackets).
    Name(String),
}

/// How far the head in a buffer is.
#[derive(Debug, PartialEq, Eq)]
enum Parsed {
    Complete(Box<Request>),
    Partial,
    /// Over [`MAX_HEAD_BYTES`] or [`MAX_FIELDS`]: `431`.
    TooLarge,
    /// Not an HTTP/1.x request head: `400`.
    Invalid,
}

/// `name[:port]` → `name`; `None` when it is not a host name, IPv4 or bracketed IPv6 literal.
fn strip_port(v: &str) -> Option<&str> {
    let (name, port) = if v.starts_with('[') {
        let end = v.find(']')?;
        let rest = &v[end + 1..];
        let port = match rest.strip_prefix(':') {
            Some(p) => p,
            None if rest.is_empty() => "",
            None => return None,
        };
        let inner = &v[1..end];
        if inner.is_empty()
            || !inner
                .bytes()
                .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
        {
            return None;
        }
        (&v[..=end], port)
    } else {
        let (name, port) = v.rsplit_once(':').unwrap_or((v, ""));
        let ok = |b: u8| b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b'_';
        // No empty label (`.a`, `a..b`, `..`); one trailing dot is the root and allowed.
        let labels = name.strip_suffix('.').unwrap_or(name);
        if labels.is_empty()
            || name.len() > 253
            || !name.bytes().all(ok)
            || labels.split('.').any(str::is_empty)
        {
            return None;
        }
        (name, port)
    };
    port.bytes().all(|b| b.is_ascii_digit()).then_some(name)
}

/// The host name as routed and redirected to: lower case, one trailing dot dropped (nginx's
/// `$host`).
fn normalize_host(name: &str) -> String {
    name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase()
}

/// Whether `token` is an ACME HTTP-01 token: base64url characters only (RFC 8555 §8.1, §8.3), so
/// no `..`, `%`, `/` or query reaches the upstream through the challenge path.
fn acme_token(token: &str) -> bool {
    !token.is_empty()
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Parses the request head at the start of `buf`.
fn parse(buf: &[u8]) -> Parsed {
    let mut fields = [httparse::EMPTY_HEADER; MAX_FIELDS];
    let mut req = httparse::Request::new(&mut fields);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD_BYTES => return Parsed::TooLarge,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(httparse::Error::TooManyHeaders) => return Parsed::TooLarge,
        Err(_) => return Parsed::Invalid,
    };
    let (Some(method), Some(target), Some(version)) = (req.method, req.path, req.version) else {
        return Parsed::Invalid;
    };
    let mut hosts = req
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("host"));
    let host = match (hosts.next(), hosts.next()) {
        (None, _) => HostField::Missing,
        (Some(h), None) => match std::str::from_utf8(h.value)
            .ok()
            .map(str::trim)
            .and_then(strip_port)
        {
            Some(name) => HostField::Name(normalize_host(name)),
            None => HostField::Invalid,
        },
        (Some(_), Some(_)) => HostField::Invalid,
    };
    // absolute-form (`http://host/p?q`): its authority names the host (RFC 9112 §3.2.2); one
    // that is not `Host` is refused (HAProxy), so routing and the upstream agree on the host.
    let absolute = target
        .strip_prefix("http://")
        .or_else(|| target.strip_prefix("https://"));
    let host = match (host, absolute) {
        (HostField::Name(name), Some(rest)) => {
            let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
            match strip_port(&rest[..end]).map(normalize_host) {
                Some(authority) if authority == name => HostField::Name(name),
                _ => HostField::Invalid,
            }
        }
        (host, _) => host,
    };
    let header = |name: &'static str| {
        req.headers
            .iter()
            .filter(move |h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
    };
    let close = header("connection").any(|v| lists(v, "close"));
    let keep = header("connection").any(|v| lists(v, "keep-alive"));
    // A body whose length two parsers could read differently: 400 (nginx), see `head::framing`.
    let Some(framing) = head::framing(req.headers) else {
        return Parsed::Invalid;
    };
    let has_body = !matches!(framing, Framing::None | Framing::Length(0));
    let keep_alive = !has_body && !close && (version == 1 || keep);
    // origin-form as sent; absolute-form (`http://host/p?q`) keeps what follows its authority
    // (`http://host?q` is `/?q`).
    let path = if target.starts_with('/') {
        target.to_string()
    } else if let Some(rest) = absolute {
        let after = &rest[rest.find(['/', '?', '#']).unwrap_or(rest.len())..];
        match after.starts_with('/') {
            true => after.to_string(),
            false => format!("/{after}"),
        }
    } else {
        "/".to_string()
    };
    // A challenge request is a bodiless GET of one token: the path alone, the token its whole
    // last segment (no query or fragment, which the prefix could otherwise hide in).
    let acme = method == "GET"
        && !has_body
        && !path.contains(['?', '#'])
        && path.strip_prefix(ACME_PREFIX).is_some_and(acme_token);
    // The upstream gets the path in origin-form, and none of the client's hop-by-hop fields nor
    // its copies of the forwarded headers (any spelling): the head is Rampart's.
    let mut up = format!("{method} {path} HTTP/1.{version}\r\n").into_bytes();
    for h in req.headers.iter() {
        let hop = [
            "connection",
            "keep-alive",
            "proxy-connection",
            "upgrade",
            "http2-settings",
        ];
        let name = h.name.as_bytes();
        if hop.iter().any(|n| same_field(name, n)) || is_forwarded(name) {
            continue;
        }
        up.extend_from_slice(h.name.as_bytes());
        up.extend_from_slice(b": ");
        up.extend_from_slice(h.value);
        up.extend_from_slice(b"\r\n");
    }
    up.extend_from_slice(b"Connection: close\r\n\r\n");
    Parsed::Complete(Box::new(Request {
        len,
        host,
        path,
        acme,
        keep_alive,
        upstream_head: up,
    }))
}

/// A complete response with a short text body (none for redirects).
fn response(status: u16, location: Option<&str>, keep_alive: bool) -> Vec<u8> {
    let reason = match status {
        301 => "Moved Permanently",
        400 => "Bad Request",
        404 => "Not Found",
        431 => "Request Header Fields Too Large",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Error",
    };
    let body = if location.is_some() {
        String::new()
    } else {
        format!("{status} {reason}\n")
    };
    let mut r = format!("HTTP/1.1 {status} {reason}\r\n");
    if let Some(l) = location {
        r.push_str(&format!("Location: {l}\r\n"));
    } else {
        r.push_str("Content-Type: text/plain\r\n");
    }
    let conn = if keep_alive { "keep-alive" } else { "close" };
    r.push_str(&format!(
        "Content-Length: {}\r\nConnection: {conn}\r\n\r\n{body}",
        body.len()
    ));
    r.into_bytes()
}

/// One connection of an HTTP listener.
struct HttpConn<'a> {
    shared: &'a Shared,
    li: ListenerId,
    origin: Origin,
    ip: IpAddr,
    sock: TcpStream,
}

/// How a request ended the connection, if it did.
enum Next {
    /// Read the next request.
    KeepAlive,
    /// Close (gracefully, so the client reads the answer).
    Close,
    /// Already closed.
    Done,
}

impl HttpConn<'_> {
    fn count_received(&self, n: usize) {
        let l = &self.shared.listener(self.li);
        l.metrics
            .bytes_received
            .fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Writes an answer within `idleTimeoutMs`: a client that stops reading (its window full of
    /// pipelined answers) is closed as `idle_timeout` instead of holding the connection.
    async fn send(&mut self, bytes: &[u8]) -> bool {
        let l = &self.shared.listener(self.li);
        let idle = l.config.idle_timeout().unwrap_or(NO_IDLE_TIMEOUT);
        match tokio::time::timeout(idle, self.sock.write_all(bytes)).await {
            Ok(Ok(())) => {
                l.metrics
                    .bytes_sent
                    .fetch_add(bytes.len() as u64, Ordering::Relaxed);
                true
            }
            Ok(Err(_)) => false,
            Err(_) => {
                let (shared, li, ip) = (self.shared, self.li, self.ip);
                shared.report_error(li, Some(ip), ErrorReason::IdleTimeout, None);
                false
            }
        }
    }

    /// Sends an answer; `reason` counts it in `errorsByReason`.
    async fn answer(
        &mut self,
        status: u16,
        location: Option<&str>,
        keep_alive: bool,
        reason: Option<ErrorReason>,
    ) -> Next {
        if let Some(r) = reason {
            self.shared.report_error(self.li, Some(self.ip), r, None);
        }
        if !self.send(&response(status, location, keep_alive)).await {
            return Next::Done;
        }
        if keep_alive {
            Next::KeepAlive
        } else {
            Next::Close
        }
    }

    /// FIN, then drop what the client still sends for a moment: closing with unread bytes would
    /// reset the connection and could destroy the answer before the client reads it.
    async fn linger(mut self) {
        let _ = self.sock.shutdown().await;
        let end = Instant::now() + LINGER;
        let mut scratch = [0u8; 4096];
        while let Ok(Ok(n)) = tokio::time::timeout_at(end, self.sock.read(&mut scratch)).await {
            if n == 0 {
                break;
            }
        }
    }

    /// Counts `reason` on the listener and on `route` (`message`: also an `'error'` event).
    fn route_error(&self, route: &CompiledRoute, reason: ErrorReason, message: Option<String>) {
        route.metrics.error(reason);
        self.shared
            .report_error(self.li, Some(self.ip), reason, message);
    }

    /// Answers an ACME request that reaches no upstream with `status` (`Connection: close`),
    /// counting `reason` on the listener and the route, and closes.
    async fn refuse_acme(mut self, route: &CompiledRoute, reason: ErrorReason, status: u16) {
        self.route_error(route, reason, None);
        if self.send(&response(status, None, false)).await {
            self.linger().await;
        }
    }

    /// Proxies an ACME challenge request to the route's upstream and relays its answer until the
    /// upstream closes (or is silent for `idleTimeoutMs`); the client's later bytes are dropped.
    /// The route's `maxConnectionsPerSecond` applies first, as on a TLS listener: the excess is
    /// answered `503` (`route_rate_limited` on the route and the listener, no `'blocked'` event);
    /// a request let through is one of the route's `connections`.
    async fn acme(mut self, route: Arc<CompiledRoute>, head: Vec<u8>) {
        if !route.admit(clock::now_ns()) {
            return self
                .refuse_acme(&route, ErrorReason::RouteRateLimited, 503)
                .await;
        }
        let _open = route.metrics.open();
        let rc = &route.config;
        let timeout = Duration::from_millis(rc.connect_timeout_ms);
        // The challenge is HTTP/1.1: only upstreams that serve it (`upstreams[].protocol`).
        let http1 = AppProtocol::Http1;
        let Some(first) = route.pick(http1) else {
            return self
                .refuse_acme(&route, ErrorReason::NoUpstreamForAlpn, 502)
                .await;
        };
        let order = route.failover(http1, first);
        let mut up = match upstream::connect(&rc.upstreams, order, timeout).await {
            Ok((_, u)) => u,
            Err((which, e)) => {
                let msg = format!("upstream {which}: {e}");
                self.route_error(&route, ErrorReason::UpstreamConnectFailed, Some(msg));
                if self.send(&response(502, None, false)).await {
                    self.linger().await;
                }
                return;
            }
        };
        let local = self
            .origin
            .local
            .or_else(|| self.sock.local_addr().ok())
            .unwrap_or_else(|| {
                let c = &self.shared.listener(self.li).config;
                SocketAddr::new(c.host, c.port)
            });
        let mut first = match rc.source_address_header {
            // The challenge head is Rampart's own (`upstream_head`): no client header to replace.
            SourceAddressHeader::None | SourceAddressHeader::XForwardedFor => Vec::new(),
            SourceAddressHeader::ProxyV1 => v1_header(self.origin.client, local),
            SourceAddressHeader::ProxyV2 => match v2_header(self.origin.client, local, &[]) {
                Ok(h) => h,
                Err(e) => {
                    self.route_error(
                        &route,
                        ErrorReason::UpstreamWriteFailed,
                        Some(e.to_string()),
                    );
                    return;
                }
            },
        };
        first.extend_from_slice(&head);
        if let Err(e) = up.write_all(&first).await {
            let msg = Some(e.to_string());
            self.route_error(&route, ErrorReason::UpstreamWriteFailed, msg);
            return;
        }
        let (shared, li, ip) = (self.shared, self.li, self.ip);
        let l = &shared.listener(li);
        let idle = l.config.idle_timeout().unwrap_or(NO_IDLE_TIMEOUT);
        // The upstream's answer to the client until the upstream ends it. Nothing more of the
        // client's goes upstream: what it pipelines after the challenge is read and dropped, so
        // the challenge path carries exactly one bodiless GET (no smuggled second request).
        let mut answer = [0u8; 16 * 1024];
        let mut dropped = [0u8; 4096];
        let mut client_open = true;
        // Only the upstream's bytes count as activity: a client trickling bytes keeps nothing.
        let mut deadline = Instant::now() + idle;
        let rm = &route.metrics;
        loop {
            tokio::select! {
                r = tokio::time::timeout_at(deadline, up.read(&mut answer)) => match r {
                    Ok(Ok(0)) | Ok(Err(_)) => break,
                    Ok(Ok(n)) => {
                        if !self.send(&answer[..n]).await {
                            return;
                        }
                        rm.bytes_sent.fetch_add(n as u64, Ordering::Relaxed);
                        deadline = Instant::now() + idle;
                    }
                    Err(_) => {
                        rm.error(ErrorReason::IdleTimeout);
                        shared.report_error(li, Some(ip), ErrorReason::IdleTimeout, None);
                        break;
                    }
                },
                r = self.sock.read(&mut dropped), if client_open => match r {
                    Ok(0) => client_open = false,
                    Ok(n) => {
                        self.count_received(n);
                        rm.bytes_received.fetch_add(n as u64, Ordering::Relaxed);
                    }
                    Err(_) => return,
                },
            }
        }
        self.linger().await;
    }

    /// Reads into `buf` (at most [`MAX_HEAD_BYTES`] in all) by `deadline`: `Some(n)` bytes read
    /// (0 = the client closed), `None` at the deadline.
    async fn read_by(&mut self, buf: &mut Vec<u8>, deadline: Instant) -> Option<usize> {
        let mut chunk = [0u8; 4096];
        let room = chunk
            .len()
            .min(MAX_HEAD_BYTES.saturating_sub(buf.len()).max(1));
        match tokio::time::timeout_at(deadline, self.sock.read(&mut chunk[..room])).await {
            Ok(Ok(n)) => {
                buf.extend_from_slice(&chunk[..n]);
                self.count_received(n);
                Some(n)
            }
            Ok(Err(_)) => Some(0),
            Err(_) => None,
        }
    }

    // Kept whole (just over 120 lines): one request's path from its head to its answer, each
    // branch an answer of the module doc's list, in that list's order.
    /// Serves requests until one ends the connection.
    async fn run(mut self) {
        let shared = self.shared;
        let l = &shared.listeners[self.li.0];
        let (head_ns, observe) = match l.engine.policy() {
            Some(p) => (p.head_timeout_ns(), p.mode() == Mode::Observe),
            None => (crate::clock::ms_to_ns(DEFAULT_HEAD_TIMEOUT_MS), false),
        };
        let head_timeout = Duration::from_nanos(head_ns);
        let idle = l.config.idle_timeout().unwrap_or(NO_IDLE_TIMEOUT);
        let mut deadline = Instant::now() + head_timeout;
        let mut buf: Vec<u8> = Vec::with_capacity(1024);
        let mut first = true;
        let mut served = 0u32;
        loop {
            if !first {
                if buf.is_empty() {
                    // Between requests: the next one may take up to idleTimeoutMs to begin.
                    match self.read_by(&mut buf, Instant::now() + idle).await {
                        Some(0) => return,
                        Some(_) => {}
                        None => {
                            let (shared, li, ip) = (self.shared, self.li, self.ip);
                            shared.report_error(li, Some(ip), ErrorReason::IdleTimeout, None);
                            return;
                        }
                    }
                }
                deadline = Instant::now() + head_timeout;
            }
            first = false;
            let mut reported = false;
            let req = loop {
                match parse(&buf) {
                    Parsed::Complete(r) => break r,
                    Parsed::TooLarge => {
                        let reason = Some(ErrorReason::BadRequest);
                        if let Next::Close = self.answer(431, None, false, reason).await {
                            self.linger().await;
                        }
                        return;
                    }
                    Parsed::Invalid => {
                        let reason = Some(ErrorReason::BadRequest);
                        if let Next::Close = self.answer(400, None, false, reason).await {
                            self.linger().await;
                        }
                        return;
                    }
                    Parsed::Partial => {}
                }
                match self.read_by(&mut buf, deadline).await {
                    Some(0) => {
                        if !buf.is_empty() {
                            let (shared, li, ip) = (self.shared, self.li, self.ip);
                            shared.report_error(li, Some(ip), ErrorReason::ClientClosed, None);
                        }
                        return;
                    }
                    Some(_) => {}
                    None if observe && !reported => {
                        // Observe mode: report once, then allow the idle timeout.
                        reported = true;
                        let v = Verdict {
                            reason: BlockReason::SlowRequest,
                            observed: true,
                        };
                        self.shared
                            .report_block(self.li, self.ip, v, None, ("", ""));
                        deadline = Instant::now() + idle;
                    }
                    None => {
                        let v = Verdict {
                            reason: BlockReason::SlowRequest,
                            observed: false,
                        };
                        if !reported {
                            self.shared
                                .report_block(self.li, self.ip, v, None, ("", ""));
                        }
                        return;
                    }
                }
            };
            let rest = buf.split_off(req.len);
            buf = rest;
            served += 1;
            let keep_alive = req.keep_alive && served < MAX_REQUESTS_PER_CONNECTION;
            let next = match &req.host {
                HostField::Missing => {
                    let reason = Some(ErrorReason::BadRequest);
                    self.answer(400, None, keep_alive, reason).await
                }
                HostField::Invalid => {
                    let reason = Some(ErrorReason::BadRequest);
                    self.answer(400, None, false, reason).await
                }
                HostField::Name(name) => {
                    let route = self.shared.routes.load().lookup(Some(name)).cloned();
                    let redirect_any = self.shared.listener(self.li).config.redirect_unknown_hosts;
                    match route {
                        None if req.acme || !redirect_any => {
                            let reason = Some(ErrorReason::NoRoute);
                            self.answer(404, None, keep_alive, reason).await
                        }
                        Some(route) if req.acme => {
                            self.acme(route, req.upstream_head).await;
                            return;
                        }
                        // A route's host, or any host with `redirectUnknownHosts`.
                        _ => {
                            let location = format!("https://{name}{}", req.path);
                            self.answer(301, Some(&location), keep_alive, None).await
                        }
                    }
                }
            };
            match next {
                Next::KeepAlive => {}
                Next::Close => return self.linger().await,
                Next::Done => return,
            }
        }
    }
}

/// Serves one admitted connection of a `mode: 'http'` listener; `origin` is the client (from a
/// PROXY header when a trusted balancer sent one), `ip` its canonical address.
pub(crate) async fn serve(
    shared: &Shared,
    li: ListenerId,
    sock: TcpStream,
    origin: Origin,
    ip: IpAddr,
) {
    let _ = sock.set_nodelay(true); // best effort
    HttpConn {
        shared,
        li,
        origin,
        ip,
        sock,
    }
    .run()
    .await
}

#[cfg(test)]
#[path = "http_tests.rs"]
mod tests;
