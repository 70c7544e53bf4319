//! One admitted connection: ClientHello peek (not consumed), post-hello checks, routing, TLS
//! termination or passthrough, upstream connect, PROXY header, byte copy.
//!
//! The ClientHello is read with `MSG_PEEK` until the parser has the whole message (it may span
//! TCP segments and TLS records; at most 16 KiB), so a passthrough upstream receives the client's
//! bytes untouched and rustls reads them again for termination. The whole pre-upstream phase is
//! bounded by `tlsHandshakeTimeoutMs` from accept; while the hello is incomplete the client must
//! also keep up `slowHandshake.minBytesPerSecond` (after a one-second grace).

use crate::clock;
use crate::config::proxy::{ForwardFingerprint, SourceAddressHeader};
use crate::metrics::ErrorReason;
use crate::protection::{BlockReason, HelloFacts};
use crate::proxy::copy::{proxy_pair, CopyEnd};
use crate::proxy::proxy_protocol::{v1_header, v2_header, TLV_JA3, TLV_JA4};
use crate::proxy::upstream;
use crate::server::Shared;
use crate::tls::clienthello::{parse_client_hello, ClientHello, HelloParse, MAX_HELLO_BYTES};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;
use tokio::io::{AsyncWriteExt, Interest};
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
    Closed,
    TimedOut,
    TooSlow,
}

fn peek_now(sock: &TcpStream, buf: &mut [u8]) -> io::Result<usize> {
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
            Ok(0) => return Peeked::Closed,
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
            Err(_) => return Peeked::Closed,
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
                        _ => Peeked::Closed,
                    };
                }
            }
            Ok(Err(_)) => return Peeked::Closed,
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

/// JA3/JA4 of the connection's ClientHello, computed on first use (a fingerprint blocklist, a
/// `'blocked'` event, `forwardFingerprint`) and never otherwise; `('', '')` without a hello.
#[derive(Default)]
struct LazyFingerprints {
    pair: Option<(String, String)>,
}

impl LazyFingerprints {
    fn get(&mut self, hello: Option<&ClientHello>) -> (&str, &str) {
        let p = self.pair.get_or_insert_with(|| match hello {
            Some(h) => (h.ja3(), h.ja4()),
            None => (String::new(), String::new()),
        });
        (&p.0, &p.1)
    }
}

/// Serves one admitted connection to the end.
pub async fn serve(shared: &Shared, li: usize, sock: TcpStream, peer: SocketAddr, ip: IpAddr) {
    let l = &shared.listeners[li];
    let accepted_at = Instant::now();
    let _ = sock.set_nodelay(true);
    let policy = l.engine.policy();
    let timeout_ms = policy
        .as_ref()
        .map(|p| p.tls_handshake_timeout_ms())
        .unwrap_or(DEFAULT_HANDSHAKE_TIMEOUT_MS);
    let min_bps = policy
        .as_ref()
        .map(|p| p.min_bytes_per_second())
        .unwrap_or(0);
    let deadline = accepted_at + Duration::from_millis(timeout_ms);

    let pending = match l.engine.pending_handshake(ip, clock::now_ns()) {
        Ok(g) => Some(g),
        Err(v) => {
            shared.report_block(li, ip, v.reason, v.observed, "", "", clock::now_ns());
            if !v.observed {
                return;
            }
            None
        }
    };

    let peeked = peek_hello(&sock, deadline, min_bps).await;
    let closed = matches!(peeked, Peeked::Closed);
    let hello = match peeked {
        Peeked::Hello(h) => Some(h),
        Peeked::TimedOut => {
            shared.report_block(
                li,
                ip,
                BlockReason::HandshakeTimeout,
                false,
                "",
                "",
                clock::now_ns(),
            );
            return;
        }
        Peeked::TooSlow => {
            shared.report_block(
                li,
                ip,
                BlockReason::SlowHandshake,
                false,
                "",
                "",
                clock::now_ns(),
            );
            return;
        }
        Peeked::NotTls | Peeked::Closed => None,
    };
    let mut fp = LazyFingerprints::default();
    let lists = policy.as_ref().is_some_and(|p| p.has_fingerprint_lists());
    // Blocklists hold lower case; JA4's ALPN characters keep the client's case.
    let ja4_lc = match (&hello, lists) {
        (Some(h), true) => Some(fp.get(Some(h)).1.to_ascii_lowercase()),
        _ => None,
    };
    let facts = HelloFacts {
        complete: hello.is_some(),
        has_sni: hello.as_ref().is_some_and(|h| h.sni.is_some()),
        ja3: fp.pair.as_ref().map(|p| p.0.as_str()),
        ja4: ja4_lc.as_deref(),
    };
    if let Some(v) = l.engine.check_hello(ip, &facts, clock::now_ns()) {
        let (ja3, ja4) = fp.get(hello.as_deref());
        shared.report_block(li, ip, v.reason, v.observed, ja3, ja4, clock::now_ns());
        if !v.observed {
            return;
        }
    }
    let Some(hello) = hello else {
        let reason = if closed {
            ErrorReason::ClientClosed
        } else {
            ErrorReason::BadClientHello
        };
        l.metrics.error(reason);
        return;
    };
    let routes = shared.routes.load_full();
    let Some(route) = routes.lookup(hello.sni.as_deref()).cloned() else {
        l.metrics.error(ErrorReason::NoRoute);
        return;
    };
    drop(routes);
    if !route.admit(clock::now_ns()) {
        let (ja3, ja4) = fp.get(Some(&hello));
        shared.report_block(
            li,
            ip,
            BlockReason::RateLimited,
            false,
            ja3,
            ja4,
            clock::now_ns(),
        );
        return;
    }
    let rc = &route.config;
    let local = sock
        .local_addr()
        .unwrap_or(SocketAddr::new(l.config.host, l.config.port));

    // Terminate TLS here, or keep the raw stream for passthrough.
    enum Client {
        Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
        Raw(TcpStream),
    }
    let client = if let Some(tls) = route.tls.get(li).cloned().flatten() {
        let acceptor = tokio_rustls::TlsAcceptor::from(tls);
        match tokio::time::timeout_at(deadline, acceptor.accept(sock)).await {
            Ok(Ok(s)) => Client::Tls(Box::new(s)),
            Ok(Err(e)) if e.kind() == io::ErrorKind::UnexpectedEof => {
                // The client hung up mid-handshake: not a server-side failure.
                l.metrics.error(ErrorReason::ClientClosed);
                return;
            }
            Ok(Err(e)) => {
                l.metrics.error(ErrorReason::HandshakeFailed);
                shared.report_error(li, Some(ip), ErrorReason::HandshakeFailed, e.to_string());
                return;
            }
            Err(_) => {
                let (ja3, ja4) = fp.get(Some(&hello));
                shared.report_block(
                    li,
                    ip,
                    BlockReason::HandshakeTimeout,
                    false,
                    ja3,
                    ja4,
                    clock::now_ns(),
                );
                return;
            }
        }
    } else {
        Client::Raw(sock)
    };
    drop(pending);

    let connect_timeout = Duration::from_millis(rc.connect_timeout_ms);
    let mut up = match upstream::connect(&rc.upstreams, route.pick(), connect_timeout).await {
        Ok(u) => u,
        Err((which, e)) => {
            l.metrics.error(ErrorReason::UpstreamConnectFailed);
            shared.report_error(
                li,
                Some(ip),
                ErrorReason::UpstreamConnectFailed,
                format!("upstream {which}: {e}"),
            );
            return;
        }
    };
    let header = match rc.source_address_header {
        SourceAddressHeader::None => None,
        SourceAddressHeader::ProxyV1 => Some(v1_header(peer, local)),
        SourceAddressHeader::ProxyV2 => {
            let tlv: Vec<(u8, &[u8])> = match rc.forward_fingerprint {
                ForwardFingerprint::None => vec![],
                ForwardFingerprint::Ja3 => vec![(TLV_JA3, fp.get(Some(&hello)).0.as_bytes())],
                ForwardFingerprint::Ja4 => vec![(TLV_JA4, fp.get(Some(&hello)).1.as_bytes())],
            };
            Some(v2_header(peer, local, &tlv))
        }
    };
    if let Some(h) = header {
        if let Err(e) = up.write_all(&h).await {
            l.metrics.error(ErrorReason::UpstreamWriteFailed);
            shared.report_error(
                li,
                Some(ip),
                ErrorReason::UpstreamWriteFailed,
                e.to_string(),
            );
            return;
        }
    }
    drop(hello);
    drop(fp);
    let idle = Duration::from_millis(l.config.idle_timeout_ms);
    let end = match client {
        Client::Tls(s) => {
            proxy_pair(
                *s,
                up,
                idle,
                &l.metrics.bytes_received,
                &l.metrics.bytes_sent,
            )
            .await
        }
        Client::Raw(s) => {
            proxy_pair(
                s,
                up,
                idle,
                &l.metrics.bytes_received,
                &l.metrics.bytes_sent,
            )
            .await
        }
    };
    if end == CopyEnd::Idle {
        l.metrics.error(ErrorReason::IdleTimeout);
    }
}
