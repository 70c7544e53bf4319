//! Terminate: the route for the SNI (held while a suspended route waits for JS), the overload
//! check before TLS, then TLS termination (rustls) or passthrough.

use super::{Client, Conn, Refusal};
use crate::clock;
use crate::events::SuspendedEvent;
use crate::metrics::ErrorReason;
use crate::protection::BlockReason;
use crate::proxy::routes::CompiledRoute as Route;
use crate::proxy::suspend::{Outcome, Resolution};
use std::io;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio::time::Instant;

impl Conn<'_> {
    /// Phase 3: the route for the SNI and its rate limit; then TLS termination (within the
    /// handshake deadline) or passthrough.
    pub(super) async fn terminate(
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

    /// Phase 3b (docs/proxy.md: Suspended routes): a connection whose route is suspended is held
    /// (its ClientHello still unread in the socket) and offered to JS in a `'suspended'` event,
    /// until `resolveConnection` gives it a route (returned: the connection goes on as if that
    /// route had matched; its counters stay the suspended route's), `null` closes it
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
        let id = ticket.id;
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
            Outcome::Resolved(Resolution::Invalid(issues)) => {
                Err(Refusal::RouteInvalid(id, issues))
            }
            Outcome::TimedOut => Err(Refusal::Failed(ErrorReason::SuspendTimeout, None)),
            Outcome::ClientClosed => Err(Refusal::Failed(ErrorReason::ClientClosed, None)),
        }
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
