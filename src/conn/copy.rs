//! Phase 5 of a connection (the byte copy, see the parent module) and Rampart's own HTTP/2
//! server preface (phase 3c), as methods of [`Conn`].

use super::*;
use crate::proxy::protocol_check::{Expect, Mismatch, ProtocolCheck};

impl Conn<'_> {
    /// Phase 5: the byte copy until both sides close or the idle timeout. A terminated
    /// connection whose ALPN is `h2` goes to [`Conn::pump_h2`] (the HTTP/2 guard unless the
    /// listener's `protection.http2.enabled` is false; the guard's defaults apply without
    /// protection); the buffered request head (`head`, from the head phase) goes first. Any
    /// other terminated connection of a route that carries HTTP is followed request by request
    /// ([`Rewriter`]; refused bytes close it as `bad_request`); opaque and passthrough routes
    /// are a plain byte copy. A connection that no check refused marks its client known-good as
    /// soon as bytes moved both ways. The ClientHello is kept only for a guarded connection (a
    /// flood's event carries its fingerprints); otherwise neither it nor its fingerprints live
    /// on.
    pub(super) async fn pump(
        &mut self,
        route: &Route,
        client: Client,
        up: UpstreamStream,
        head: Vec<u8>,
    ) -> Result<(), Refusal> {
        let l = &self.shared.listener(self.li);
        if matches!(&client, Client::Tls(s) if s.get_ref().1.alpn_protocol() == Some(b"h2")) {
            let policy = l.engine.policy();
            let http2 = policy
                .as_deref()
                .map_or_else(Http2Policy::default, |p| *p.http2());
            let observe = policy.is_some_and(|p| p.mode() == Mode::Observe);
            let guard = http2.enabled.then_some((http2.guard, observe));
            if guard.is_none() {
                self.hello = None;
                self.fingerprints = None;
            }
            let Client::Tls(s) = client else {
                unreachable!("h2 is only negotiated on TLS clients")
            };
            return self.pump_h2(route, *s, up, head, guard).await;
        }
        // A terminated HTTP/1.x connection of a route that carries HTTP is followed request by
        // request: rewritten on a route with forwarded request headers, and on every such route
        // held to what its `tunnels` allow (no h2c, no HTTP/2 preface, `CONNECT` answered 405).
        let rc = &route.config;
        let follow = match &client {
            Client::Tls(s) if rc.carries_http() && s.get_ref().1.alpn_protocol() != Some(b"h2") => {
                Some(match rc.forward_headers() {
                    Some(h) => {
                        let ip = self.ip;
                        let (ja3, ja4) = self.fingerprints();
                        let lines = forward_headers::header_lines(h, ip, ja3, ja4);
                        Rewriter::new(lines, rc.tunnels.clone())
                    }
                    None => Rewriter::follow(rc.tunnels.clone()),
                })
            }
            _ => None,
        };
        self.hello = None;
        self.fingerprints = None;
        if let Some(rw) = follow {
            // Each request: `requestLimit` (429) and the `slowRequest` limits.
            let limits = requests::conn_limits(l.engine.policy().as_deref());
            let hooks = requests::RequestGate::new(self.shared, self.li, self.ip, &route.capacity);
            let mut up = HeaderWriter::with_hooks(up, rw, hooks, limits);
            let refused = up.refused_flag();
            let end = self
                .copy(route, client, &mut up, &head, Some(&refused), true)
                .await;
            if up.observed() {
                let reason = BlockReason::SlowRequest;
                self.enforce(Some(Verdict {
                    reason,
                    observed: true,
                }))?;
            }
            return match (up.refused(), up.ended()) {
                (Some(_), _) => Err(Refusal::Failed(ErrorReason::BadRequest, None)),
                (None, Some(Ended::SlowRequest)) => Err(Refusal::Blocked(BlockReason::SlowRequest)),
                (None, Some(Ended::Answered(AnswerReason::RequestRateLimited))) => {
                    Err(Refusal::Blocked(BlockReason::RequestRateLimited))
                }
                (None, Some(Ended::Answered(AnswerReason::UpstreamOverloaded))) => {
                    Err(Refusal::Blocked(BlockReason::UpstreamOverloaded))
                }
                // A keep-alive gap, the request cap: normal ends.
                _ => end,
            };
        }
        self.copy(route, client, up, &head, None, false).await
    }

    /// Phase 5 without a guard: the buffered `head`, then the byte copy to `up` (the upstream
    /// stream, or it through the request follower). A client whose bytes the follower refused
    /// (`refused` set) is not marked known-good, even if bytes went both ways (a `405`). With
    /// `http1` (a followed HTTP/1.x connection) the upstream's first bytes must not be an HTTP/2
    /// frame ([`ProtocolCheck`]).
    async fn copy<U>(
        &self,
        route: &Route,
        client: Client,
        mut up: U,
        head: &[u8],
        refused: Option<&AtomicBool>,
        http1: bool,
    ) -> Result<(), Refusal>
    where
        U: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        if !head.is_empty() {
            // The flush also waits while the request waits for room at the upstream (its head
            // is held by the request follower until then).
            let sent = match up.write_all(head).await {
                Ok(()) => up.flush().await,
                Err(e) => Err(e),
            };
            sent.map_err(|e| {
                Refusal::Failed(ErrorReason::UpstreamWriteFailed, Some(e.to_string()))
            })?;
        }
        let opts = self.copy_options();
        let counters = self.pair_counters(route);
        let hook = self.known_good_hook(&client).map(|mark| {
            move || {
                if !refused.is_some_and(|r| r.load(Ordering::Relaxed)) {
                    mark();
                }
            }
        });
        let mut inspector = KnownGood::new(Pass, !head.is_empty(), hook);
        if http1 {
            let mut checked = ProtocolCheck::new(inspector, Expect::Http1);
            let end = match client {
                Client::Tls(s) => proxy_pair_inspected(*s, up, &opts, counters, &mut checked).await,
                Client::Raw(s) => proxy_pair_inspected(s, up, &opts, counters, &mut checked).await,
            };
            return self.checked_end(route, checked.mismatch(), end);
        }
        let end = match client {
            Client::Tls(s) => proxy_pair_inspected(*s, up, &opts, counters, &mut inspector).await,
            Client::Raw(s) => proxy_pair_inspected(s, up, &opts, counters, &mut inspector).await,
        };
        copy_end(end)
    }

    /// How a copy loop behind a [`ProtocolCheck`] ended: a mismatch is
    /// `upstream_protocol_mismatch` with its message (an `'error'` event), else as
    /// [`copy_end`].
    fn checked_end(
        &self,
        route: &Route,
        mismatch: Option<&Mismatch>,
        end: CopyEnd,
    ) -> Result<(), Refusal> {
        match mismatch {
            Some(m) => {
                let i = self.upstream_guard.as_ref().map_or(0, |g| g.index());
                let up =
                    (route.config.upstreams.get(i)).map_or_else(String::new, upstream::describe);
                Err(Refusal::Failed(
                    ErrorReason::UpstreamProtocolMismatch,
                    Some(m.message(&up)),
                ))
            }
            None => copy_end(end),
        }
    }

    /// The copy loop's timeouts and buffers: the listener's `idleTimeoutMs`, the proxy's
    /// `halfCloseTimeoutMs` and read buffer sizes.
    fn copy_options(&self) -> CopyOptions {
        let s = &self.shared.socket;
        CopyOptions {
            idle_timeout: self.shared.listener(self.li).config.idle_timeout(),
            half_close_timeout: s.half_close_timeout,
            client_buf: s.client_read_buffer,
            upstream_buf: s.upstream_read_buffer,
        }
    }

    /// The counters the copy loop updates: the listener's and `route`'s bytes, the listener's
    /// `halfClosedConnections`.
    fn pair_counters<'r>(&'r self, route: &'r Route) -> PairCounters<'r> {
        let l = &self.shared.listener(self.li).metrics;
        let rm = &route.metrics;
        PairCounters {
            client_bytes: [&l.bytes_received, &rm.bytes_received],
            upstream_bytes: [&l.bytes_sent, &rm.bytes_sent],
            half_closed: &l.half_closed,
        }
    }

    /// The known-good mark for a terminated connection that no check refused, run once bytes
    /// moved both ways (`None` otherwise: passthrough is never marked).
    fn known_good_hook(&self, client: &Client) -> Option<impl FnOnce() + '_> {
        matches!(client, Client::Tls(_))
            .then(|| self.known_good_hook_tls())
            .flatten()
    }

    /// [`Conn::known_good_hook`] for a terminated connection.
    fn known_good_hook_tls(&self) -> Option<impl FnOnce() + '_> {
        let (l, ip) = (self.shared.listener(self.li), self.ip);
        self.clean.then_some(move || {
            l.engine.mark_known_good(ip, clock::now_ns());
        })
    }

    /// Phase 5 for a terminated h2 connection ([`super::h2`]): the client's reads go through
    /// [`FirstAckFilter`] (its acknowledgement of Rampart's SETTINGS never reaches the upstream;
    /// the buffered `head` is walked first, and a frame header it ends in the middle of is held
    /// for the filter), then through the HTTP/2 guard when `guard` is `Some((limits,
    /// observe))`, counting against the client's HTTP/2 budget over all its connections
    /// (`Engine::h2_client_budget`). A violation counts against the client at once
    /// (`boxAfterViolations`; a rapid reset boxes at the first, `Engine::record_h2_flood`); in
    /// enforce mode it ends the connection and is reported by [`serve`], in observe mode it is
    /// reported here and the connection goes on.
    async fn pump_h2(
        &self,
        route: &Route,
        client: TlsClient,
        mut up: UpstreamStream,
        mut head: Vec<u8>,
        guard: Option<(H2GuardConfig, bool)>,
    ) -> Result<(), Refusal> {
        let (shared, li, ip) = (self.shared, self.li, self.ip);
        let l = &shared.listener(li);
        let opts = self.copy_options();
        let counters = self.pair_counters(route);
        let mut walk = FirstSettingsAck::new();
        let decided = walk.filter(&mut head);
        let held = head.split_off(decided);
        for c in counters.client_bytes {
            // The head phase counted them; the filter delivers them again.
            c.fetch_sub(held.len() as u64, std::sync::atomic::Ordering::Relaxed);
        }
        let mut client = FirstAckFilter::new(client, walk, &held);
        let hook = self.known_good_hook_tls();
        let Some((config, observe)) = guard else {
            if !head.is_empty() {
                up.write_all(&head).await.map_err(|e| {
                    Refusal::Failed(ErrorReason::UpstreamWriteFailed, Some(e.to_string()))
                })?;
            }
            let inspector = KnownGood::new(Pass, !head.is_empty(), hook);
            let mut inspector = ProtocolCheck::new(inspector, Expect::H2);
            let end = proxy_pair_inspected(client, up, &opts, counters, &mut inspector).await;
            return self.checked_end(route, inspector.mismatch(), end);
        };
        let hello = self.hello.as_deref();
        let on_violation = move |v: Violation| {
            l.engine.record_h2_flood(ip, v, clock::now_ns());
            if observe {
                let fp = hello.map(|h| (h.ja3(), h.ja4()));
                let (ja3, ja4) = fp
                    .as_ref()
                    .map_or(("", ""), |(a, b)| (a.as_str(), b.as_str()));
                let v2 = Verdict {
                    reason: BlockReason::H2Flood,
                    observed: true,
                };
                shared.report_block(li, ip, v2, Some(v), (ja3, ja4));
            }
        };
        let mut inspector = Box::new(ProtocolCheck::new(
            KnownGood::new(
                H2Inspector::with(
                    &config,
                    observe,
                    on_violation,
                    requests::StreamGate::new(shared, li, ip, &route.capacity),
                    l.engine.h2_client_budget(ip),
                ),
                !head.is_empty(),
                hook,
            ),
            Expect::H2,
        ));
        // The head phase read the preface and first header block: the guard sees them first.
        // A stream held there (waiting for room) and what follows it are read again by the
        // copy loop, which answers the streams before it meanwhile.
        if !head.is_empty() {
            let n = match inspector.inspect(Dir::ToUpstream, &mut head) {
                Flow::All => head.len(),
                Flow::Stop(n) => n,
                Flow::Hold(n) => {
                    let rest = head.split_off(n.min(head.len()));
                    for c in counters.client_bytes {
                        c.fetch_sub(rest.len() as u64, std::sync::atomic::Ordering::Relaxed);
                    }
                    client.replay(rest);
                    head.len()
                }
            };
            up.write_all(&head[..n]).await.map_err(|e| {
                Refusal::Failed(ErrorReason::UpstreamWriteFailed, Some(e.to_string()))
            })?;
        }
        let end = proxy_pair_inspected(client, up, &opts, counters, &mut *inspector).await;
        if inspector.mismatch().is_some() {
            return self.checked_end(route, inspector.mismatch(), end);
        }
        match inspector.inner().inner().ended() {
            Some(H2End::Violation(v)) => Err(Refusal::Flood(v)),
            Some(H2End::Protocol(_)) => Err(Refusal::Failed(ErrorReason::H2ProtocolError, None)),
            Some(H2End::Shed(ShedReason::RequestRateLimited)) => {
                Err(Refusal::Blocked(BlockReason::RequestRateLimited))
            }
            Some(H2End::Shed(ShedReason::UpstreamOverloaded)) => {
                Err(Refusal::Blocked(BlockReason::UpstreamOverloaded))
            }
            None => copy_end(end),
        }
    }

    /// Phase 3c, on every terminated connection whose ALPN is `h2`, right after the handshake:
    /// Rampart's own server connection preface ([`server_settings`]: SETTINGS with
    /// SETTINGS_MAX_CONCURRENT_STREAMS = the guard's `maxConcurrentStreams`, also when the guard
    /// is off), so a client that waits for the server's SETTINGS before its first request gets
    /// them before the head phase waits for that request, and the client knows the stream limit
    /// whatever the upstream's SETTINGS say or omit. The 15 bytes count as `bytesSent`.
    pub(super) async fn h2_preface(
        &self,
        route: &Route,
        client: &mut Client,
    ) -> Result<(), Refusal> {
        let Client::Tls(tls) = client else {
            return Ok(());
        };
        if tls.get_ref().1.alpn_protocol() != Some(b"h2") {
            return Ok(());
        }
        let l = &self.shared.listener(self.li);
        let limit = (l.engine.policy().as_deref())
            .map_or_else(Http2Policy::default, |p| *p.http2())
            .guard
            .max_concurrent_streams;
        let frame = server_settings(limit);
        let written = async {
            tls.write_all(&frame).await?;
            tls.flush().await
        };
        written
            .await
            .map_err(|_| Refusal::Failed(ErrorReason::ClientClosed, None))?;
        for c in [&l.metrics.bytes_sent, &route.metrics.bytes_sent] {
            c.fetch_add(frame.len() as u64, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(())
    }
}
