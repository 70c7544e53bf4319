//! Upstream: the capacity permit of a connection whose requests are not followed, the
//! protocol that picks the upstreams, the upstream connection and its PROXY header.

use super::requests;
use super::{Client, Conn, Refusal};
use crate::clock;
use crate::config::proxy::{AppProtocol, SourceAddressHeader};
use crate::metrics::ErrorReason;
use crate::protection::BlockReason;
use crate::proxy::keepalive;
use crate::proxy::proxy_protocol::{ssl_tlv_of, v1_header, v2_header, TlsFacts, V2Tlvs};
use crate::proxy::routes::CompiledRoute as Route;
use crate::proxy::upstream::{self, UpstreamStream};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

impl Conn<'_> {
    /// Phase 3d, on a connection whose requests are not followed (opaque and passthrough routes)
    /// when the route sets `concurrency`: the connection is what takes a capacity permit, held
    /// until it ends (no latency sample: an opaque connection's life is not a response time).
    /// No room: `upstream_overloaded`, before the upstream connection is opened.
    pub(super) fn connection_permit(
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

    /// The `PP2_TYPE_SSL` TLV value of a terminated connection whose upstream gets a PROXY v2
    /// header: the verify result, TLS version, cipher suite and, with a client certificate, its
    /// subject CN (docs/proxy.md: mTLS). `None` otherwise (passthrough, or another header).
    pub(super) fn ssl_tlv(&self, route: &Route, client: &Client) -> Option<Vec<u8>> {
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
    pub(super) fn protocol(&self, route: &Route, client: &Client) -> AppProtocol {
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
    pub(super) async fn connect(
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
}
