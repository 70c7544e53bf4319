//! Accept: what runs on a connection the accept loop ([`crate::listener`]) hands over: a
//! trusted balancer's PROXY header first, then the connection served by the listener's `mode`.

use super::proxy_in::{HeaderFailure, Origin};
use super::{admit::admit, http, proxy_in};
use crate::config::proxy::{ListenerId, ListenerMode};
use crate::metrics::ErrorReason;
use crate::shared::Shared;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// A connection from a trusted load balancer (`peer`, canonical): its PROXY header within
/// `timeout_ms` of accept, then admission and service as the header's client. A header that is
/// not one, or does not arrive in time, closes the connection (`proxy_header_invalid`, with an
/// `'error'` event naming the peer); a peer that closes before sending anything (a TCP health
/// check) is `client_closed`.
pub(crate) async fn behind_balancer(
    shared: &Arc<Shared>,
    li: ListenerId,
    sock: tokio::net::TcpStream,
    peer: SocketAddr,
    timeout_ms: u64,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(timeout_ms);
    let origin = match proxy_in::read_header(&sock, peer, deadline).await {
        Ok(o) => o,
        Err(HeaderFailure::Closed) => {
            shared.report_error(li, Some(peer.ip()), ErrorReason::ClientClosed, None);
            return;
        }
        Err(f) => {
            let why = match f {
                HeaderFailure::TimedOut => {
                    format!("no complete PROXY header within {timeout_ms} ms")
                }
                _ => "the first bytes are not a PROXY v1 or v2 header".to_string(),
            };
            let message = format!("trusted peer {}: {why}", peer.ip());
            shared.report_error(
                li,
                Some(peer.ip()),
                ErrorReason::ProxyHeaderInvalid,
                Some(message),
            );
            return;
        }
    };
    let ip = origin.client.ip().to_canonical();
    let Some((adm, active, clean)) = admit(shared, li, ip) else {
        return;
    };
    serve(shared, li, sock, origin, clean).await;
    drop(adm);
    drop(active);
}

/// Serves an admitted connection by the listener's `mode`.
pub(crate) async fn serve(
    shared: &Shared,
    li: ListenerId,
    sock: tokio::net::TcpStream,
    origin: Origin,
    clean: bool,
) {
    let ip = origin.client.ip().to_canonical();
    // Each mode's future on the heap, at its own size: inline, the task would be as large as the
    // larger of the two, and rustc lays an awaited future out more than once (rust-lang/rust
    // #62958): the task was 53 KiB for a 14 KiB TLS connection future, and the pages an idle
    // connection touched in it were most of its resident memory (BENCHMARKS.md: Memory per idle
    // connection).
    match shared.listener(li).config.mode {
        ListenerMode::Tls => {
            Box::pin(super::serve(
                shared,
                li,
                sock,
                origin.client,
                ip,
                origin.local,
                clean,
            ))
            .await
        }
        ListenerMode::Http => Box::pin(http::serve(shared, li, sock, origin, ip)).await,
    }
}
