//! Head: the first request head of a terminated route that carries HTTP, within
//! `slowRequest.headTimeoutMs` of the handshake and before any upstream connection exists.

use super::{Client, Conn, Refusal};
use crate::metrics::ErrorReason;
use crate::protection::{BlockReason, Mode, Verdict};
use crate::proxy::head::{self, Head, MAX_HEAD_BYTES};
use crate::proxy::routes::CompiledRoute as Route;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::time::Instant;

impl Conn<'_> {
    /// Phase 3b (`slowRequest`, listeners with a policy): on a terminated route that carries
    /// HTTP, reads the first request head (HTTP/1.x up to the empty line; HTTP/2 the preface and
    /// the first header block, by ALPN) within `headTimeoutMs` of the handshake, before any
    /// upstream connection exists. Returns the bytes read (at most 16 KiB; empty when the phase
    /// does not apply), to be written to the upstream first. Past the deadline: `slow_request`
    /// (in observe mode reported, and the connection goes on with what arrived).
    pub(super) async fn head(
        &mut self,
        route: &Route,
        client: &mut Client,
    ) -> Result<Vec<u8>, Refusal> {
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
}
