//! Listening sockets and the accept loop.
//!
//! Each listener gets one SO_REUSEPORT socket per connection worker (`server::workers`) so the
//! kernel spreads accepts across workers. A listener on `::` clears IPV6_V6ONLY and so also takes IPv4 clients, whose
//! `::ffff:a.b.c.d` address is made canonical (`a.b.c.d`, [`std::net::IpAddr::to_canonical`])
//! before anything looks at it.
//!
//! Admission happens in the accept loop before a byte is read ([`conn::admit`]): the protection
//! engine (allowlist, blocklist/dynamic blocks, penalty box, rate limits, per-IP concurrency, the
//! prefix tier, the listener budget), then the listener's `maxConnections`. Accept errors (EMFILE, ENFILE,
//! ENOBUFS, ...) are counted and back off briefly so the loop never spins and resumes once descriptors free up.
//!
//! Behind a load balancer (`acceptProxyProtocol`), a connection from a trusted peer is admitted
//! only once its PROXY header ([`conn::proxy_in`]) has named the client: the same admission then runs
//! on the header's address (HAProxy's `expect-proxy` followed by its session rules); the
//! balancer's own address, which stands for every client behind it, is never checked before the
//! header. The one exception is a v2 `LOCAL` header (the balancer's own health check): it names
//! no client, so it is admitted as the balancer itself, limits included — which is why
//! docs/proxy.md (Client addresses from a load balancer) advises putting the balancers in
//! `protection.allowlist`.
//!
//! An admitted connection is handed to [`conn::accept`]: served by [`conn`] on a `mode: 'tls'`
//! listener, by [`conn::http`] on a `mode: 'http'` one.

use crate::config::proxy::ListenerId;
use crate::conn;
use crate::conn::proxy_in::Origin;
use crate::metrics::ErrorReason;
use crate::shared::Shared;
use socket2::{Domain, Protocol, Socket, Type};
use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Listen backlog per socket.
pub(crate) const BACKLOG: i32 = 4096;

/// Binds one SO_REUSEPORT listening socket (non-blocking, ready for tokio).
pub(crate) fn bind_reuseport(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    let domain = if addr.is_ipv6() {
        Domain::IPV6
    } else {
        Domain::IPV4
    };
    let s = Socket::new(domain, Type::STREAM, Some(Protocol::TCP))?;
    if addr.is_ipv6() {
        s.set_only_v6(false)?;
    }
    s.set_reuse_address(true)?;
    s.set_reuse_port(true)?;
    s.set_nonblocking(true)?;
    s.bind(&addr.into())?;
    s.listen(BACKLOG)?;
    Ok(s.into())
}

/// Addresses that a started proxy of this process listens on, with how many proxies hold each.
static HELD: Mutex<BTreeMap<SocketAddr, usize>> = Mutex::new(BTreeMap::new());

/// One proxy's claim on a listening address; released when the proxy stops.
#[derive(Debug)]
pub(crate) struct HeldAddr(SocketAddr);

impl HeldAddr {
    fn claim(addr: SocketAddr) -> HeldAddr {
        *HELD
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(addr)
            .or_insert(0) += 1;
        HeldAddr(addr)
    }
}

impl Drop for HeldAddr {
    fn drop(&mut self) {
        let mut held = HELD.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = held.get_mut(&self.0) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.0);
            }
        }
    }
}

/// Binds `count` sockets on `addr`. Before sharing a port with SO_REUSEPORT, checks that nothing
/// else (another process or listener) already holds it, so "port in use" is reported as such —
/// unless another started proxy of this process holds that very address: then the new sockets
/// join its SO_REUSEPORT group, so a replacement proxy (a config reload that changes listeners)
/// can start before the old one stops and no connection is refused in between.
pub(crate) fn bind_listener(
    addr: SocketAddr,
    count: usize,
) -> io::Result<(Vec<std::net::TcpListener>, HeldAddr)> {
    let ours = HELD
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .contains_key(&addr);
    // A plain bind (no SO_REUSEPORT) fails with EADDRINUSE if anyone listens there already.
    if !ours {
        let domain = if addr.is_ipv6() {
            Domain::IPV6
        } else {
            Domain::IPV4
        };
        let probe = Socket::new(domain, Type::STREAM, Some(Protocol::TCP))?;
        if addr.is_ipv6() {
            probe.set_only_v6(false)?;
        }
        probe.set_reuse_address(true)?;
        probe.bind(&addr.into())?;
    }
    let socks = (0..count.max(1))
        .map(|_| bind_reuseport(addr))
        .collect::<io::Result<Vec<_>>>()?;
    Ok((socks, HeldAddr::claim(addr)))
}

fn is_resource_error(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE) | Some(libc::ENFILE) | Some(libc::ENOBUFS) | Some(libc::ENOMEM)
    )
}

/// Accepts on one socket until `stop` fires; each admitted connection is served by a task on
/// `conns`, cancelled by `conn_cancel` at the end of a drain.
pub(crate) async fn accept_loop(
    shared: Arc<Shared>,
    li: ListenerId,
    listener: TcpListener,
    stop: CancellationToken,
    conns: TaskTracker,
    conn_cancel: CancellationToken,
) {
    loop {
        let accepted = tokio::select! {
            biased;
            _ = stop.cancelled() => break,
            r = listener.accept() => r,
        };
        match accepted {
            Ok((sock, peer)) => {
                let ip = peer.ip().to_canonical();
                let trusted = shared
                    .listener(li)
                    .config
                    .accept_proxy_protocol
                    .as_ref()
                    .filter(|p| p.trusts(ip))
                    .map(|p| p.timeout_ms);
                if let Some(timeout_ms) = trusted {
                    let shared = shared.clone();
                    let cancel = conn_cancel.clone();
                    let peer = SocketAddr::new(ip, peer.port());
                    conns.spawn(async move {
                        tokio::select! {
                            _ = cancel.cancelled() => {}
                            _ = conn::accept::behind_balancer(&shared, li, sock, peer, timeout_ms) => {}
                        }
                    });
                    continue;
                }
                let Some((adm, active, clean)) = conn::admit::admit(&shared, li, ip) else {
                    continue; // dropped: closed at once
                };
                let shared = shared.clone();
                let cancel = conn_cancel.clone();
                let origin = Origin {
                    client: peer,
                    local: None,
                };
                conns.spawn(async move {
                    tokio::select! {
                        _ = cancel.cancelled() => {}
                        _ = conn::accept::serve(&shared, li, sock, origin, clean) => {}
                    }
                    drop(adm);
                    drop(active);
                });
            }
            Err(e) => {
                shared.report_error(li, None, ErrorReason::AcceptFailed, None);
                let pause = if is_resource_error(&e) { 100 } else { 5 };
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tokio::time::sleep(Duration::from_millis(pause)) => {}
                }
            }
        }
    }
}
