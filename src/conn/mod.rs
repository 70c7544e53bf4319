//! One admitted connection, in typed phases: peek (the ClientHello, not consumed) → admit
//! (post-hello checks) → route (a suspended route holds the connection until JS resolves it,
//! [`crate::proxy::suspend`]) and terminate (rustls, or passthrough) → h2 preface (Rampart's
//! SETTINGS to a terminated h2 client, [`Conn::h2_preface`]) → head (`slowRequest`: the first
//! request head of an HTTP route, before any upstream exists) → connect (upstream, PROXY header)
//! → pump (the buffered head, then the byte copy; terminated h2 connections through
//! [`Conn::pump_h2`], [`h2`]; terminated HTTP/1.x connections of a route that carries
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
//! One file per phase, in the order they run ([`Conn::run`] calls them; the accept loops stay in
//! [`crate::listener`], the parts they are assembled from in [`crate::proxy`]):
//!
//! | Phase | File | What |
//! |---|---|---|
//! | accept | [`accept`], [`proxy_in`] | a trusted balancer's PROXY header; the connection served by the listener's `mode` |
//! | admit | [`admit`] | admission at accept (before a byte), the pending-handshake slot, the post-hello checks |
//! | peek | `peek.rs` | the ClientHello, peeked whole within the handshake deadline |
//! | terminate | `terminate.rs` | the route (a suspended route's hold), the overload check, TLS or passthrough |
//! | head | `head.rs` | the first request head within `slowRequest.headTimeoutMs` |
//! | connect | `connect.rs` | the capacity permit, the upstream connection, its PROXY header |
//! | copy | `copy.rs`, [`h2`], [`requests`] | the byte copy (HTTP/1.x followed, HTTP/2 guarded, opaque as is), Rampart's HTTP/2 server preface; each request's gates |
//!
//! A `mode: 'http'` listener's connections (ACME HTTP-01, redirects to https) are served whole by
//! [`http`].

pub(crate) mod accept;
pub(crate) mod admit;
mod connect;
mod copy;
pub(crate) mod h2;
mod head;
pub(crate) mod http;
mod peek;
pub(crate) mod proxy_in;
pub(crate) mod requests;
mod terminate;

use self::h2::{FirstAckFilter, H2End, H2Inspector};
use crate::clock;
use crate::config::proxy::ListenerId;
use crate::http2::{server_settings, FirstSettingsAck, H2GuardConfig, ShedReason, Violation};
use crate::metrics::ErrorReason;
use crate::protection::policy::Http2Policy;
use crate::protection::{BlockReason, Mode, Verdict};
use crate::proxy::copy::{
    proxy_pair_inspected, CopyEnd, CopyOptions, Dir, Flow, Inspector, KnownGood, PairCounters, Pass,
};
use crate::proxy::forward_headers::{self, AnswerReason, Ended, HeaderWriter, Rewriter};
use crate::proxy::keepalive;
use crate::proxy::routes::CompiledRoute as Route;
use crate::proxy::upstream::{self, UpstreamStream};
use crate::shared::Shared;
use crate::tls::clienthello::ClientHello;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Default whole-handshake timeout when the listener has no protection config, ms.
pub(crate) const DEFAULT_HANDSHAKE_TIMEOUT_MS: u64 = 10_000;

/// Why a connection ends before it is proxied, reported once by [`serve`].
#[derive(Debug)]
enum Refusal {
    /// A protection decision (`'blocked'` event, `blockedByReason`).
    Blocked(BlockReason),
    /// The HTTP/2 guard closed the connection (`h2_flood` with this `detail`).
    Flood(Violation),
    /// A runtime failure (`errorsByReason`); with a message it is also an `'error'` event.
    Failed(ErrorReason, Option<String>),
    /// `resolveConnection(id)` gave a route that is not valid (`resolve_route_invalid`): the
    /// held connection's id and every problem (the `'error'` event's `errors`).
    RouteInvalid(u64, Vec<crate::config::ConfigIssue>),
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
pub(crate) async fn serve(
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
        Err(Refusal::RouteInvalid(id, issues)) => {
            if let Some(r) = &c.route {
                r.metrics.error(ErrorReason::ResolveRouteInvalid);
            }
            shared.report_resolve_invalid(li, ip, id, &issues);
        }
    }
}
