//! One admitted connection, in typed phases: peek (the ClientHello, not consumed) → admit
//! (post-hello checks) → route (a suspended route holds the connection until JS resolves it,
//! [`crate::proxy::suspend`]) and terminate (rustls, or passthrough) → h2 preface (Rampart's
//! SETTINGS to a terminated h2 client, [`Conn::h2_preface`]) → head (`slowRequest`: the first
//! request head of an HTTP route, before any upstream exists) → connect (upstream, PROXY header)
//! → pump (the buffered head, then the byte copy; terminated h2 connections through
//! [`Conn::pump_h2`], [`super::h2`]; terminated HTTP/1.x connections of a route that carries
//! HTTP reach the upstream through [`crate::proxy::forward_headers`], which rewrites them on a
//! route with forwarded request headers and holds every such route to its `tunnels`; a client
//! whose bytes went both ways without a refusal is marked known-good). Each phase returns
//! `Result<_, Refusal>`; [`serve`] reports a refusal in one place, with the connection's
//! fingerprints when its ClientHello was read. A new guard is a check inside a phase, or a new
//! phase.
//!
//! The ClientHello is read with `MSG_PEEK` until the parser has the whole message (it may span
//! TCP segments and TLS records; at most 16 KiB), so a passthrough upstream receives the client's
//! bytes untouched and rustls reads them again for termination. The whole pre-upstream phase is
//! bounded by `tlsHandshakeTimeoutMs` from accept (in defense mode, for a client that is not
//! known-good, by `min(tlsHandshakeTimeoutMs, defense.handshakeTimeoutMs)`); while the hello is
//! incomplete the client must also keep up `slowHandshake.minBytesPerSecond` (after a one-second
//! grace).
//!
//! The head phase (listeners with a policy, terminated routes with `protocol: 'http'` or
//! `http2: true`): after the handshake the client must send a complete first request head
//! ([`crate::proxy::head`]) within `slowRequest.headTimeoutMs`, else it is closed `slow_request`
//! and no upstream connection was ever opened; the head (at most 16 KiB) is buffered and written
//! to the upstream first.
//!
//! The phases up to the upstream connection are here, in the order they run; the last phase (the
//! byte copy: HTTP/1.x followed request by request, HTTP/2 through the guard, opaque routes as a
//! plain copy) and Rampart's own HTTP/2 server preface are in [`copy`].

mod copy;
pub mod h2;
pub mod http;
pub mod proxy_in;
pub mod requests;

use self::h2::{FirstAckFilter, H2End, H2Inspector};
use crate::clock;
use crate::config::proxy::ListenerId;
use crate::config::proxy::{AppProtocol, SourceAddressHeader};
use crate::events::SuspendedEvent;
use crate::http2::{server_settings, FirstSettingsAck, H2GuardConfig, ShedReason, Violation};
use crate::metrics::ErrorReason;
use crate::protection::policy::Http2Policy;
use crate::protection::{BlockReason, HelloFacts, Mode, PendingGuard, Verdict};
use crate::proxy::copy::{
    proxy_pair_inspected, CopyEnd, CopyOptions, Dir, Flow, Inspector, KnownGood, PairCounters, Pass,
};
use crate::proxy::forward_headers::{self, AnswerReason, Ended, HeaderWriter, Rewriter};
use crate::proxy::head::{self, Head, MAX_HEAD_BYTES};
use crate::proxy::keepalive;
use crate::proxy::proxy_protocol::{ssl_tlv_of, v1_header, v2_header, TlsFacts, V2Tlvs};
use crate::proxy::routes::CompiledRoute as Route;
use crate::proxy::suspend::{Outcome, Resolution};
use crate::proxy::upstream::{self, UpstreamStream};
use crate::shared::Shared;
use crate::tls::clienthello::{parse_client_hello, ClientHello, HelloParse, MAX_HELLO_BYTES};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Default whole-handshake timeout when the listener has no protection config, ms.
pub const DEFAULT_HANDSHAKE_TIMEOUT_MS: u64 = 10_000;
/// A hello growing by fewer bytes than this per peek is "dribbling" ...
pub const DRIBBLE_BYTES: usize = 512;
/// ... and is parsed again only after this pause.
pub const DRIBBLE_PAUSE: Duration = Duration::from_millis(2);

enum Peeked {
    Hello(Box<ClientHello>),
    NotTls,
    /// The client closed (or reset) after sending part of a hello.
    Closed,
    /// The client closed (or reset) without sending a byte: a TCP health check, a port scan.
    Empty,
    TimedOut,
    TooSlow,
}

/// How a client that closed after `seen` bytes of its hello ends the peek.
fn closed_after(seen: usize) -> Peeked {
    if seen == 0 {
        Peeked::Empty
    } else {
        Peeked::Closed
    }
}

/// One `recv(MSG_PEEK)` of what the socket holds now (`WouldBlock` when nothing).
pub(super) fn peek_now(sock: &TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    sock.try_io(Interest::READABLE, || {
        // SAFETY: `buf` is valid for writes of `buf.len()` bytes; the fd is owned by `sock`.
        let n = unsafe {
            libc::recv(
                std::os::fd::AsRawFd::as_raw_fd(sock),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_PEEK,
            )
        };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    })
}

/// Peeks until a whole ClientHello is buffered in the socket, the client closes, the deadline
/// passes, or the client is slower than `min_bps` bytes/s (after 1 s).
async fn peek_hello(sock: &TcpStream, deadline: Instant, min_bps: u64) -> Peeked {
    let start = Instant::now();
    let mut buf = vec![0u8; 2048];
    let mut seen = 0usize;
    loop {
        match peek_now(sock, &mut buf) {
            Ok(0) => return closed_after(seen),
            Ok(n) => {
                if n != seen {
                    let grew = n - seen.min(n);
                    seen = n;
                    match parse_client_hello(&buf[..n]) {
                        HelloParse::Complete(h) => return Peeked::Hello(Box::new(h)),
                        HelloParse::NotTls(_) | HelloParse::Malformed(_) => return Peeked::NotTls,
                        HelloParse::Incomplete => {
                            if n == buf.len() {
                                if buf.len() >= MAX_HELLO_BYTES + 5 {
                                    return Peeked::NotTls;
                                }
                                let grown = (buf.len() * 2).min(MAX_HELLO_BYTES + 5);
                                buf.resize(grown, 0);
                                continue;
                            }
                            if grew < DRIBBLE_BYTES {
                                // A hello trickling in tiny pieces: let the kernel coalesce
                                // before parsing again, so a dribbling client costs O(timeout /
                                // pause) parses instead of one per byte.
                                let pause = (Instant::now() + DRIBBLE_PAUSE).min(deadline);
                                tokio::time::sleep_until(pause).await;
                                continue;
                            }
                        }
                    }
                }
                // Clear readiness so the next wait sees only new data, then re-check once to
                // close the race with data that arrived in between.
                let _ = sock.try_io(Interest::READABLE, || {
                    Err::<(), _>(io::Error::from(io::ErrorKind::WouldBlock))
                });
                if let Ok(n2) = peek_now(sock, &mut buf) {
                    if n2 != seen {
                        continue;
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(_) => return closed_after(seen),
        }
        let mut wake = deadline;
        let mut slow_check = false;
        if min_bps > 0 {
            // Fail once the average rate since accept falls below min_bps (1 s grace).
            let allowed = Duration::from_secs_f64((seen as f64 / min_bps as f64).max(1.0));
            let t = start + allowed;
            if t < wake {
                wake = t;
                slow_check = true;
            }
        }
        if Instant::now() >= deadline {
            return Peeked::TimedOut;
        }
        match tokio::time::timeout_at(wake, sock.ready(Interest::READABLE)).await {
            Ok(Ok(r)) => {
                if r.is_read_closed() {
                    // FIN (or reset): whatever is buffered is all there will be.
                    return match peek_now(sock, &mut buf) {
                        Ok(n) if n != seen && n > 0 => match parse_client_hello(&buf[..n]) {
                            HelloParse::Complete(h) => Peeked::Hello(Box::new(h)),
                            HelloParse::Incomplete => Peeked::Closed,
                            _ => Peeked::NotTls,
                        },
                        _ => closed_after(seen),
                    };
                }
            }
            Ok(Err(_)) => return closed_after(seen),
            Err(_) => {
                return if slow_check {
                    Peeked::TooSlow
                } else {
                    Peeked::TimedOut
                }
            }
        }
    }
}

/// Why a connection ends before it is proxied, reported once by [`serve`].
#[derive(Debug)]
enum Refusal {
    /// A protection decision (`'blocked'` event, `blockedByReason`).
    Blocked(BlockReason),
    /// The HTTP/2 guard closed the connection (`h2_flood` with this `detail`).
    Flood(Violation),
    /// A runtime failure (`errorsByReason`); with a message it is also an `'error'` event.
    Failed(ErrorReason, Option<String>),
}

/// The TLS stream of a terminated client.
type TlsClient = tokio_rustls::server::TlsStream<TcpStream>;

/// The client side after the route-and-terminate phase.
enum Client {
    /// TLS terminated here.
    Tls(Box<TlsClient>),
    /// Passthrough: the client's bytes go to the upstream untouched.
    Raw(TcpStream),
}

/// One connection's facts, gathered phase by phase.
struct Conn<'a> {
    shared: &'a Shared,
    li: ListenerId,
    peer: SocketAddr,
    ip: IpAddr,
    /// The address the client connected to, when a load balancer's PROXY header named it (else
    /// the socket's local address): the destination of the outbound PROXY header.
    local: Option<SocketAddr>,
    /// The ClientHello, once peeked.
    hello: Option<Box<ClientHello>>,
    /// JA3/JA4 of `hello`, computed on first use (a fingerprint list, a `'blocked'` event,
    /// `forwardFingerprint`) and never otherwise.
    fingerprints: Option<(String, String)>,
    /// No check refused this connection, not even in observe mode: it may earn the known-good
    /// mark.
    clean: bool,
    /// The route, once chosen (its counters take the connection's bytes and errors).
    route: Option<Arc<Route>>,
    /// Holds the connection in the route's `activeConnections`.
    route_guard: Option<crate::metrics::route::RouteGuard>,
    /// Holds the connection in its upstream's count (`balance: 'leastConnections'`).
    upstream_guard: Option<crate::proxy::routes::UpstreamGuard>,
}

impl Conn<'_> {
    /// `(ja3, ja4)`, `("", "")` without a ClientHello.
    fn fingerprints(&mut self) -> (&str, &str) {
        let hello = self.hello.as_deref();
        let p = self.fingerprints.get_or_insert_with(|| match hello {
            Some(h) => (h.ja3(), h.ja4()),
            None => (String::new(), String::new()),
        });
        (&p.0, &p.1)
    }

    /// Reports a verdict (the one place refusals are reported), with its `h2_flood` detail.
    fn report(&mut self, v: Verdict, detail: Option<Violation>) {
        let (shared, li, ip) = (self.shared, self.li, self.ip);
        shared.report_block(li, ip, v, detail, self.fingerprints());
    }

    /// An engine verdict: enforced → a refusal; observed → reported, and the connection goes on.
    fn enforce(&mut self, v: Option<Verdict>) -> Result<(), Refusal> {
        match v {
            Some(v) if v.observed => {
                self.clean = false;
                self.report(v, None);
                Ok(())
            }
            Some(v) => Err(Refusal::Blocked(v.reason)),
            None => Ok(()),
        }
    }

    /// Phase 1 (before a byte is read): a pending-handshake slot (`slowHandshake
    /// .maxPendingPerIp`, `listenerLimit.maxPendingHandshakes`), which also says whether defense
    /// mode shortens the handshake deadline.
    fn pending(&mut self) -> Result<PendingGuard, Refusal> {
        let l = &self.shared.listener(self.li);
        match l.engine.pending_handshake(self.ip, clock::now_ns()) {
            Ok(g) => Ok(g),
            Err(v) => {
                self.enforce(Some(v))?;
                Ok(PendingGuard::empty())
            }
        }
    }

    /// Phase 1b: the ClientHello peek within the handshake deadline. A client that closes
    /// without sending a byte (a TCP health check) is `client_closed`, before any hello check:
    /// with no hello there is nothing to judge, whatever lists or `requireSni` are set.
    async fn peek(
        &mut self,
        sock: &TcpStream,
        deadline: Instant,
        min_bps: u64,
    ) -> Result<bool, Refusal> {
        let closed = match peek_hello(sock, deadline, min_bps).await {
            Peeked::Hello(h) => {
                self.hello = Some(h);
                false
            }
            Peeked::TimedOut => return Err(Refusal::Blocked(BlockReason::HandshakeTimeout)),
            Peeked::TooSlow => return Err(Refusal::Blocked(BlockReason::SlowHandshake)),
            Peeked::Closed => true,
            Peeked::Empty => return Err(Refusal::Failed(ErrorReason::ClientClosed, None)),
            Peeked::NotTls => false,
        };
        Ok(closed)
    }

    /// Phase 2: the post-hello checks (`requireSni`, JA3, JA4, incomplete hello), then a hello
    /// is required to go on.
    fn admit(&mut self, closed: bool) -> Result<(), Refusal> {
        let l = &self.shared.listener(self.li);
        let lists = l.engine.policy().is_some_and(|p| p.has_fingerprint_lists());
        let complete = self.hello.is_some();
        let has_sni = self.hello.as_ref().is_some_and(|h| h.sni.is_some());
        // Blocklists hold lower case; JA4's ALPN characters keep the client's case.
        let (ja3, ja4_lc) = if lists && complete {
            let (ja3, ja4) = self.fingerprints();
            (Some(ja3.to_string()), Some(ja4.to_ascii_lowercase()))
        } else {
            (None, None)
        };
        let facts = HelloFacts {
            complete,
            has_sni,
            ja3: ja3.as_deref(),
            ja4: ja4_lc.as_deref(),
        };
        let v = l.engine.check_hello(self.ip, &facts);
        self.enforce(v)?;
        if self.hello.is_none() {
            let reason = if closed {
                ErrorReason::ClientClosed
            } else {
                ErrorReason::BadClientHello
            };
            return Err(Refusal::Failed(reason, None));
        }
        Ok(())
    }

    /// Phase 3b (README: Suspended routes): a connection whose route is suspended is held (its
    /// ClientHello still unread in the socket) and offered to JS in a `'suspended'` event, until
    /// `resolveConnection` gives it a route (returned: the connection goes on as if that route
    /// had matched; its counters stay the suspended route's), `null` closes it
    /// (`suspend_rejected`), `timeout_ms` pass (`suspend_timeout`) or the client leaves
    /// (`client_closed`). Over the listener's `maxPendingSuspended` it is closed at once
    /// (`suspend_queue_full`, no event).
    async fn suspend(
        &mut self,
        sock: &TcpStream,
        suspended: &Route,
        timeout_ms: u64,
    ) -> Result<Arc<Route>, Refusal> {
        let shared = self.shared;
        let l = &shared.listeners[self.li.0];
        let Some(ticket) = shared
            .suspensions
            .hold(self.li, l.config.max_pending_suspended)
        else {
            return Err(Refusal::Failed(ErrorReason::SuspendQueueFull, None));
        };
        let sni = self.hello.as_ref().and_then(|h| h.sni.as_deref());
        shared.events.suspended(&SuspendedEvent {
            id: ticket.id.to_string(),
            sni: sni.unwrap_or(""),
            peer_ip: self.ip.to_string(),
            peer_port: self.peer.port(),
            listener: &l.label,
        });
        let timeout = Duration::from_millis(timeout_ms);
        match ticket.wait(timeout, client_gone(sock)).await {
            Outcome::Resolved(Resolution::Route(rc)) => {
                // Compiled for this connection's listener only (the only one it can use).
                let li = self.li;
                let listeners: Vec<_> = (shared.listeners.iter().enumerate())
                    .map(|(i, l)| (i == li.0).then_some(&l.config))
                    .collect();
                Ok(Route::compile(
                    &rc,
                    &listeners,
                    suspended.metrics.clone(),
                    suspended.capacity.clone(),
                ))
            }
            Outcome::Resolved(Resolution::Close) => {
                Err(Refusal::Failed(ErrorReason::SuspendRejected, None))
            }
            Outcome::Resolved(Resolution::Invalid(why)) => {
                Err(Refusal::Failed(ErrorReason::ResolveRouteInvalid, Some(why)))
            }
            Outcome::TimedOut => Err(Refusal::Failed(ErrorReason::SuspendTimeout, None)),
            Outcome::ClientClosed => Err(Refusal::Failed(ErrorReason::ClientClosed, None)),
        }
    }

    /// Phase 3: the route for the SNI and its rate limit; then TLS termination (within the
    /// handshake deadline) or passthrough.
    async fn terminate(
        &mut self,
        sock: TcpStream,
        deadline: Instant,
    ) -> Result<(Arc<Route>, Client), Refusal> {
        let sni = self.hello.as_ref().and_then(|h| h.sni.as_deref());
        let route = self
            .shared
            .routes
            .load()
            .lookup(sni)
            .cloned()
            .ok_or(Refusal::Failed(ErrorReason::NoRoute, None))?;
        self.route = Some(route.clone());
        if !route.admit(clock::now_ns()) {
            // The route's own limit: an error of the route, not the client's fault.
            return Err(Refusal::Failed(ErrorReason::RouteRateLimited, None));
        }
        self.route_guard = Some(route.metrics.open());
        self.overloaded(&route)?;
        let (route, deadline) = match route.config.suspend_timeout_ms {
            Some(ms) => {
                // The handshake budget does not run while JS decides.
                let held_at = Instant::now();
                let resolved = self.suspend(&sock, &route, ms).await?;
                (resolved, deadline + held_at.elapsed())
            }
            None => (route, deadline),
        };
        let Some(tls) = route.tls.get(self.li.0).cloned().flatten() else {
            return Ok((route, Client::Raw(sock)));
        };
        let acceptor = tokio_rustls::TlsAcceptor::from(tls);
        match tokio::time::timeout_at(deadline, acceptor.accept(sock)).await {
            Ok(Ok(s)) => Ok((route, Client::Tls(Box::new(s)))),
            // The client hung up mid-handshake: not a server-side failure.
            Ok(Err(e)) if e.kind() == io::ErrorKind::UnexpectedEof => {
                Err(Refusal::Failed(ErrorReason::ClientClosed, None))
            }
            Ok(Err(e)) => Err(Refusal::Failed(
                ErrorReason::HandshakeFailed,
                Some(e.to_string()),
            )),
            Err(_) => Err(Refusal::Blocked(BlockReason::HandshakeTimeout)),
        }
    }

    /// Phase 3a, before TLS: while the route's upstream is overloaded (`routes[].concurrency`,
    /// [`crate::capacity::Capacity::refuses_new`]), a client that is not known-good since
    /// before the overload is refused `upstream_overloaded`, before it costs a handshake.
    /// Enforced in observe mode too: it protects the application, not a policy being tried.
    fn overloaded(&self, route: &Route) -> Result<(), Refusal> {
        let now = clock::now_ns();
        let cap = &route.capacity;
        if !cap.refuses_new(now) {
            return Ok(());
        }
        let engine = &self.shared.listener(self.li).engine;
        if engine.is_priority(self.ip, now, cap.priority_since(now)) {
            return Ok(());
        }
        Err(Refusal::Blocked(BlockReason::UpstreamOverloaded))
    }

    /// Phase 3d, on a connection whose requests are not followed (opaque and passthrough routes)
    /// when the route sets `concurrency`: the connection is what takes a capacity permit, held
    /// until it ends (no latency sample: an opaque connection's life is not a response time).
    /// No room: `upstream_overloaded`, before the upstream connection is opened.
    fn connection_permit(
        &self,
        route: &Route,
        client: &Client,
    ) -> Result<Option<crate::capacity::Permit>, Refusal> {
        let rc = &route.config;
        let followed = matches!(client, Client::Tls(_)) && rc.carries_http();
        if followed || rc.concurrency.mode == crate::config::proxy::ConcurrencyMode::Off {
            return Ok(None);
        }
        let mut gate = requests::UpstreamGate::new(self.shared, self.li, self.ip, &route.capacity);
        match gate.acquire(clock::now_ns()) {
            Ok(p) => Ok(Some(p)),
            Err(_) => Err(Refusal::Blocked(BlockReason::UpstreamOverloaded)),
        }
    }

    /// Phase 3b (`slowRequest`, listeners with a policy): on a terminated route that carries
    /// HTTP, reads the first request head (HTTP/1.x up to the empty line; HTTP/2 the preface and
    /// the first header block, by ALPN) within `headTimeoutMs` of the handshake, before any
    /// upstream connection exists. Returns the bytes read (at most 16 KiB; empty when the phase
    /// does not apply), to be written to the upstream first. Past the deadline: `slow_request`
    /// (in observe mode reported, and the connection goes on with what arrived).
    async fn head(&mut self, route: &Route, client: &mut Client) -> Result<Vec<u8>, Refusal> {
        let l = &self.shared.listener(self.li);
        let Some(policy) = l.engine.policy() else {
            return Ok(Vec::new());
        };
        let Client::Tls(tls) = client else {
            return Ok(Vec::new());
        };
        if !route.config.carries_http() {
            return Ok(Vec::new());
        }
        let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
        let deadline = Instant::now() + Duration::from_nanos(policy.head_timeout_ns());
        let observed = policy.mode() == Mode::Observe;
        drop(policy);
        let mut buf = Vec::new();
        let mut chunk = [0u8; 1024];
        loop {
            let state = match (buf.is_empty(), h2) {
                (true, _) => Head::Partial,
                (false, true) => head::http2(&buf),
                (false, false) => head::http1(&buf),
            };
            match state {
                Head::Complete(_) | Head::Full => return Ok(buf),
                Head::Invalid => return Err(Refusal::Failed(ErrorReason::BadRequest, None)),
                Head::Partial => {}
            }
            let room = chunk.len().min(MAX_HEAD_BYTES - buf.len());
            match tokio::time::timeout_at(deadline, tls.read(&mut chunk[..room])).await {
                Ok(Ok(0)) | Ok(Err(_)) => {
                    return Err(Refusal::Failed(ErrorReason::ClientClosed, None))
                }
                Ok(Ok(n)) => {
                    buf.extend_from_slice(&chunk[..n]);
                    for c in [&l.metrics.bytes_received, &route.metrics.bytes_received] {
                        c.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
                    }
                }
                Err(_) => {
                    self.enforce(Some(Verdict {
                        reason: BlockReason::SlowRequest,
                        observed,
                    }))?;
                    return Ok(buf);
                }
            }
        }
    }

    /// The `PP2_TYPE_SSL` TLV value of a terminated connection whose upstream gets a PROXY v2
    /// header: the verify result, TLS version, cipher suite and, with a client certificate, its
    /// subject CN (README: mTLS). `None` otherwise (passthrough, or another header).
    fn ssl_tlv(&self, route: &Route, client: &Client) -> Option<Vec<u8>> {
        if route.config.source_address_header != SourceAddressHeader::ProxyV2 {
            return None;
        }
        let Client::Tls(s) = client else {
            return None;
        };
        Some(ssl_tlv_of(s.get_ref().1))
    }

    /// The protocol the client speaks, which picks the upstreams it may go to
    /// (`upstreams[].protocol`): the ALPN it negotiated (none: HTTP/1.1); on passthrough, the
    /// one its ClientHello offers that the route would negotiate
    /// ([`crate::config::proxy::RouteConfig::passthrough_protocol`]).
    fn protocol(&self, route: &Route, client: &Client) -> AppProtocol {
        match client {
            Client::Tls(s) => AppProtocol::of_alpn(s.get_ref().1.alpn_protocol()),
            Client::Raw(_) => {
                let offered = self.hello.as_ref().map_or(&[][..], |h| h.alpn.as_slice());
                route.config.passthrough_protocol(offered)
            }
        }
    }

    /// Phase 4: the upstream connection, among the route's upstreams that serve `proto`
    /// (`no_upstream_for_alpn` when none does), and the route's source-address header. A v2
    /// header carries the forwarded fingerprints, the client's SNI and, on a terminated
    /// connection (`ssl`: its [`Self::ssl_tlv`]), the ALPN, the SSL TLV and the client's
    /// certificate chain ([`V2Tlvs`]).
    async fn connect(
        &mut self,
        route: &Arc<Route>,
        proto: AppProtocol,
        local: SocketAddr,
        client: &Client,
        ssl: Option<Vec<u8>>,
    ) -> Result<UpstreamStream, Refusal> {
        let rc = &route.config;
        let connect_timeout = Duration::from_millis(rc.connect_timeout_ms);
        let first = route
            .pick_for(self.ip, proto, clock::now_ns())
            .ok_or(Refusal::Failed(ErrorReason::NoUpstreamForAlpn, None))?;
        let order = route.failover(proto, first);
        let started = clock::now_ns();
        let (at, mut up) = upstream::connect(&rc.upstreams, order, connect_timeout)
            .await
            .map_err(|(which, e)| {
                route.capacity.connect_failed();
                Refusal::Failed(
                    ErrorReason::UpstreamConnectFailed,
                    Some(format!("upstream {which}: {e}")),
                )
            })?;
        route
            .capacity
            .connected(clock::now_ns().saturating_sub(started));
        self.upstream_guard = Some(route.hold_upstream(at));
        route.remember(self.ip, at, clock::now_ns());
        if let (Some(k), UpstreamStream::Tcp(s)) = (&self.shared.socket.keepalive, &up) {
            let _ = keepalive::apply(s, k);
        }
        let header = match rc.source_address_header {
            SourceAddressHeader::None | SourceAddressHeader::XForwardedFor => None,
            SourceAddressHeader::ProxyV1 => Some(v1_header(self.peer, local)),
            SourceAddressHeader::ProxyV2 => {
                let (fp, peer) = (rc.forward_fingerprint, self.peer);
                if fp.ja3 || fp.ja4 {
                    self.fingerprints();
                }
                let prints = self.fingerprints.as_ref();
                let ja3 = prints.filter(|_| fp.ja3).map(|p| p.0.as_str());
                let ja4 = prints.filter(|_| fp.ja4).map(|p| p.1.as_str());
                let sni = self.hello.as_ref().and_then(|h| h.sni.as_deref());
                let tls = match (client, ssl.as_deref()) {
                    (Client::Tls(s), Some(ssl)) => Some(TlsFacts::of(s.get_ref().1, ssl)),
                    _ => None,
                };
                let tlvs = V2Tlvs {
                    ja3,
                    ja4,
                    authority: sni,
                    tls,
                };
                Some(v2_header(peer, local, &tlvs.list()).map_err(|e| {
                    Refusal::Failed(ErrorReason::UpstreamWriteFailed, Some(e.to_string()))
                })?)
            }
        };
        if let Some(h) = header {
            up.write_all(&h).await.map_err(|e| {
                Refusal::Failed(ErrorReason::UpstreamWriteFailed, Some(e.to_string()))
            })?;
        }
        Ok(up)
    }

    /// Runs the phases in order.
    async fn run(&mut self, sock: TcpStream) -> Result<(), Refusal> {
        let l = &self.shared.listener(self.li);
        let accepted_at = Instant::now();
        let _ = sock.set_nodelay(true); // best effort: a socket that refuses it still works
        if let Some(k) = &self.shared.socket.keepalive {
            let _ = keepalive::apply(&sock, k); // best effort, as TCP_NODELAY
        }
        let pending = self.pending()?;
        let policy = l.engine.policy();
        let timeout_ns =
            policy
                .as_ref()
                .map_or(crate::clock::ms_to_ns(DEFAULT_HANDSHAKE_TIMEOUT_MS), |p| {
                    if pending.tightened() {
                        p.defense_handshake_timeout_ns()
                    } else {
                        p.tls_handshake_timeout_ns()
                    }
                });
        let min_bps = policy.as_ref().map_or(0, |p| p.min_bytes_per_second());
        drop(policy);
        let deadline = accepted_at + Duration::from_nanos(timeout_ns);
        let local = self
            .local
            .or_else(|| sock.local_addr().ok())
            .unwrap_or(SocketAddr::new(l.config.host, l.config.port));

        // Each phase's future in its own allocation (see `listener::serve`): a transient phase
        // inline would leave the pages it touched resident for the connection's whole life, and
        // the long one (the copy) is kept compact.
        let closed = Box::pin(self.peek(&sock, deadline, min_bps)).await?;
        self.admit(closed)?;
        let (route, mut client) = Box::pin(self.terminate(sock, deadline)).await?;
        drop(pending);
        Box::pin(self.h2_preface(&route, &mut client)).await?;
        let head = Box::pin(self.head(&route, &mut client)).await?;
        let _permit = self.connection_permit(&route, &client)?;
        let ssl = self.ssl_tlv(&route, &client);
        let proto = self.protocol(&route, &client);
        let up = Box::pin(self.connect(&route, proto, local, &client, ssl)).await?;
        Box::pin(self.pump(&route, client, up, head)).await
    }
}

/// Resolves when the client of a held connection closes or resets. It watches a duplicate of
/// the socket's fd (its own epoll registration), so clearing that readiness leaves the socket's
/// own untouched: the unread ClientHello is still seen as readable by the TLS handshake after.
/// Never resolves when the fd cannot be watched (the suspension then ends by its timeout).
async fn client_gone(sock: &TcpStream) {
    use std::os::fd::AsFd;
    let watched = sock.as_fd().try_clone_to_owned().ok().and_then(|fd| {
        // SAFETY: `fd` is an `OwnedFd` moved into the AsyncFd: it stays open, and is the same
        // descriptor, until the AsyncFd drops it.
        unsafe { tokio::io::unix::AsyncFd::register_with_interest(fd, Interest::READABLE) }.ok()
    });
    let Some(fd) = watched else {
        return std::future::pending().await;
    };
    loop {
        match fd.readable().await {
            Ok(mut g) => {
                let r = g.ready();
                if r.is_read_closed() || r.is_error() {
                    return;
                }
                g.clear_ready();
            }
            Err(_) => return,
        }
    }
}

/// How a copy loop that ran to its end is counted: an idle or half-close timeout is an error
/// of the listener (`idle_timeout`, `half_close_timeout`: the upstream ended and the client then
/// stayed silent for `halfCloseTimeoutMs`), a close is not.
fn copy_end(end: CopyEnd) -> Result<(), Refusal> {
    match end {
        CopyEnd::Idle => Err(Refusal::Failed(ErrorReason::IdleTimeout, None)),
        CopyEnd::HalfClosed => Err(Refusal::Failed(ErrorReason::HalfCloseTimeout, None)),
        CopyEnd::Closed => Ok(()),
    }
}

/// Serves one admitted connection to the end; a refusal is reported here, once. `peer` is the
/// client (`ip` its canonical address), `local` the address it connected to when a PROXY header
/// named it. `clean`: the admission at accept refused nothing (not even in observe mode).
pub async fn serve(
    shared: &Shared,
    li: ListenerId,
    sock: TcpStream,
    peer: SocketAddr,
    ip: IpAddr,
    local: Option<SocketAddr>,
    clean: bool,
) {
    let mut c = Conn {
        shared,
        li,
        peer,
        ip,
        local,
        hello: None,
        fingerprints: None,
        clean,
        route: None,
        route_guard: None,
        upstream_guard: None,
    };
    match c.run(sock).await {
        Ok(()) => {}
        Err(Refusal::Blocked(reason)) => c.report(
            Verdict {
                reason,
                observed: false,
            },
            None,
        ),
        Err(Refusal::Flood(v)) => c.report(
            Verdict {
                reason: BlockReason::H2Flood,
                observed: false,
            },
            Some(v),
        ),
        Err(Refusal::Failed(reason, message)) => {
            if let Some(r) = &c.route {
                r.metrics.error(reason);
            }
            shared.report_error(li, Some(ip), reason, message);
        }
    }
}
