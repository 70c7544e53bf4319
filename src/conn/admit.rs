//! Admit: the admission at accept, before a byte is read (the engine, `maxConnections`), the
//! pending-handshake slot, and the post-hello checks once the ClientHello is peeked.

use super::{Conn, Refusal};
use crate::clock;
use crate::config::proxy::ListenerId;
use crate::metrics::ErrorReason;
use crate::protection::{BlockReason, ConnGuard, HelloFacts, PendingGuard, Verdict};
use crate::shared::{ActiveGuard, Shared};
use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Admission at accept: the engine (with the client's `clusterRateLimit` lease while the cluster
/// tier is up), then `maxConnections`. Returns the guards to hold for the connection's lifetime
/// and whether no check refused it (observe mode admits refusals), or `None` when refused
/// (already counted and reported).
pub(crate) fn admit(
    shared: &Arc<Shared>,
    li: ListenerId,
    ip: IpAddr,
) -> Option<(Option<ConnGuard>, ActiveGuard, bool)> {
    let l = &shared.listener(li);
    // With the cluster tier up, the engine also takes the client's lease token (same lock).
    let cluster = shared.cluster.as_deref();
    let adm = l
        .engine
        .admit_clustered(ip, clock::now_ns, cluster.is_some_and(|c| c.leases_on()));
    if let Some(c) = cluster.filter(|_| adm.refill) {
        c.refill_lease(&l.engine, li, ip);
    }
    if let Some(r) = adm.shadow {
        shared.report_shadow(li, ip, r);
    }
    if let Some(v) = adm.verdict {
        shared.report_block(li, ip, v, None, ("", ""));
        if !v.observed {
            return None;
        }
    }
    let (active, prev) = ActiveGuard::open(shared, li);
    if l.config.max_connections > 0 && prev >= l.config.max_connections as i64 {
        drop(active);
        let v = Verdict {
            reason: BlockReason::MaxConnections,
            observed: false,
        };
        shared.report_block(li, ip, v, None, ("", ""));
        return None;
    }
    l.metrics.accepted.fetch_add(1, Ordering::Relaxed);
    Some((adm.guard, active, adm.verdict.is_none()))
}

impl Conn<'_> {
    /// Phase 1 (before a byte is read): a pending-handshake slot (`slowHandshake
    /// .maxPendingPerIp`, `listenerLimit.maxPendingHandshakes`), which also says whether defense
    /// mode shortens the handshake deadline.
    pub(super) fn pending(&mut self) -> Result<PendingGuard, Refusal> {
        let l = &self.shared.listener(self.li);
        match l.engine.pending_handshake(self.ip, clock::now_ns()) {
            Ok(g) => Ok(g),
            Err(v) => {
                self.enforce(Some(v))?;
                Ok(PendingGuard::empty())
            }
        }
    }

    /// Phase 2: the post-hello checks (`requireSni`, JA3, JA4, incomplete hello), then a hello
    /// is required to go on.
    pub(super) fn admit(&mut self, closed: bool) -> Result<(), Refusal> {
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
}
