//! What each request of a terminated connection asks before it reaches the upstream: the
//! client's `requestLimit` ([`RequestBudget`]) and the route's upstream capacity
//! ([`UpstreamGate`]), as the HTTP/1.1 follower's hooks ([`RequestGate`]) and the HTTP/2 guard's
//! stream hooks ([`StreamGate`]); and the per-request limits the follower applies
//! ([`conn_limits`]). The connection path ([`crate::conn`]) builds them for each connection of a
//! route that carries HTTP.

use crate::capacity::{Admit, Capacity, Class, Overloaded, Permit, Queued};
use crate::config::proxy::ListenerId;
use crate::http2::{Shed, ShedReason, StreamHooks};
use crate::protection::policy::ProtectionPolicy;
use crate::protection::{BlockReason, Mode, RequestLimited, Verdict};
use crate::proxy::answers;
use crate::proxy::forward_headers::{Answer, AnswerReason, ConnLimits, RequestHooks};
use crate::shared::Shared;
use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

/// `requestLimit` on one connection's requests: each request head asks the listener's engine
/// ([`crate::protection::Engine::request`]); over budget it is answered `429` with the
/// rate-limit fields ([`answers::too_many_requests`]) and the connection ends (reported
/// `request_rate_limited` by the connection path). In observe mode the first request over
/// budget of the connection is reported (observed) and every request goes on.
pub(crate) struct RequestBudget<'a> {
    shared: &'a Shared,
    li: ListenerId,
    ip: IpAddr,
    reported: bool,
}

impl<'a> RequestBudget<'a> {
    /// The budget of client `ip` on listener `li`.
    pub(crate) fn new(shared: &'a Shared, li: ListenerId, ip: IpAddr) -> Self {
        RequestBudget {
            shared,
            li,
            ip,
            reported: false,
        }
    }

    /// One request at `now_ns` against the engine's `requestLimit`: `Ok` (also an observed
    /// excess, reported once per connection) or the enforced refusal.
    pub(crate) fn check(&mut self, now_ns: u64) -> Result<(), RequestLimited> {
        let engine = &self.shared.listener(self.li).engine;
        match engine.request(self.ip, now_ns) {
            Err(l) if l.observed => {
                if !self.reported {
                    self.reported = true;
                    let v = Verdict {
                        reason: BlockReason::RequestRateLimited,
                        observed: true,
                    };
                    self.shared
                        .report_block(self.li, self.ip, v, None, ("", ""));
                }
                Ok(())
            }
            r => r,
        }
    }
}

impl RequestHooks for RequestBudget<'_> {
    fn request(&mut self, now_ns: u64) -> Result<(), Answer> {
        self.check(now_ns).map_err(|l| Answer {
            bytes: answers::too_many_requests(l.retry_after_ns, l.limit, l.burst),
            reason: AnswerReason::RequestRateLimited,
        })
    }

    #[inline]
    fn responded(&mut self, _: u64) {}

    /// Only while the policy in force has `requestLimit` (one policy load per request).
    #[inline]
    fn active(&self) -> bool {
        self.shared.listener(self.li).engine.requests_limited()
    }
}

/// The `slowRequest` limits of one HTTP/1.1 connection under `policy`: every request head within
/// `headTimeoutMs` of its first byte, `keepAliveTimeoutMs` between requests,
/// `maxRequestsPerConnection`. In observe mode only the head deadline is watched (reported, not
/// enforced); without a policy nothing applies.
pub(crate) fn conn_limits(policy: Option<&ProtectionPolicy>) -> ConnLimits {
    let Some(p) = policy else {
        return ConnLimits::default();
    };
    let observe = p.mode() == Mode::Observe;
    let ns = |n: u64| Some(Duration::from_nanos(n));
    ConnLimits {
        head_timeout: ns(p.head_timeout_ns()),
        keep_alive_timeout: if observe {
            None
        } else {
            ns(p.keep_alive_timeout_ns())
        },
        max_requests: if observe {
            0
        } else {
            p.max_requests_per_connection()
        },
        observe,
    }
}

/// A route's upstream capacity as one connection's requests see it: each request takes a
/// [`Permit`] of class [`Class::Other`] first; only when that share is full is the client's
/// standing read (`Engine::is_priority`: known-good since before the overload began, minus
/// [`crate::capacity::PRIORITY_SEASONING_NS`]), and a priority client is remembered for the
/// rest of the connection. So the common request costs a few atomics and no shard lock.
pub(crate) struct UpstreamGate<'a> {
    shared: &'a Shared,
    li: ListenerId,
    ip: IpAddr,
    capacity: &'a Arc<Capacity>,
    priority: bool,
}

impl<'a> UpstreamGate<'a> {
    /// The gate of client `ip` on listener `li` to the route whose capacity is `capacity`.
    pub(crate) fn new(
        shared: &'a Shared,
        li: ListenerId,
        ip: IpAddr,
        capacity: &'a Arc<Capacity>,
    ) -> Self {
        UpstreamGate {
            shared,
            li,
            ip,
            capacity,
            priority: false,
        }
    }

    /// A permit for one request (or connection) at `now_ns`, or the refusal of the client's
    /// class (no waiting).
    pub(crate) fn acquire(&mut self, now_ns: u64) -> Result<Permit, Overloaded> {
        let class = if self.priority {
            Class::Priority
        } else {
            Class::Other
        };
        match self.capacity.try_acquire(class, now_ns) {
            Err(_) if !self.priority && self.is_priority(now_ns) => {
                self.priority = true;
                self.capacity.try_acquire(Class::Priority, now_ns)
            }
            r => r,
        }
    }

    /// A permit for one request at `now_ns`, a place in the route's queue, or the refusal of
    /// the client's class ([`Capacity::admit`]; the standing is read only when its class had
    /// no room).
    /// `may_wait()` is asked only when the request could wait.
    pub(crate) fn admit(&mut self, now_ns: u64, may_wait: impl FnOnce() -> bool) -> Admit<'a> {
        let capacity: &'a Arc<Capacity> = self.capacity;
        if !self.priority {
            if let Some(p) = capacity.take_now(Class::Other, now_ns) {
                return Admit::Ready(p);
            }
            if !self.is_priority(now_ns) {
                return capacity.wait_or_refuse(Class::Other, now_ns, may_wait);
            }
            self.priority = true;
        }
        capacity.admit(Class::Priority, now_ns, may_wait)
    }

    /// A permit at `now_ns` if there is room, ahead of the waiters ([`Capacity::take_after_wait`]:
    /// only for a connection that just waited its turn).
    pub(crate) fn take_after_wait(&mut self, now_ns: u64) -> Option<Permit> {
        let class = if self.priority {
            Class::Priority
        } else {
            Class::Other
        };
        self.capacity.take_after_wait(class, now_ns)
    }

    fn is_priority(&self, now_ns: u64) -> bool {
        let since = self.capacity.priority_since(now_ns);
        let engine = &self.shared.listener(self.li).engine;
        engine.is_priority(self.ip, now_ns, since)
    }
}

/// The hooks of one terminated HTTP/1.1 connection: `requestLimit` ([`RequestBudget`]: over
/// budget → `429`), then the route's capacity ([`UpstreamGate`]: no room → the request waits in
/// the route's queue up to `queueTimeoutMs`; no room after it, or no place in the queue → `503`
/// with the route's `Retry-After`, reason `upstream_overloaded`). The permits of the requests
/// forwarded and not yet answered wait in order; each response head releases the oldest with
/// its latency.
pub(crate) struct RequestGate<'a> {
    budget: Option<RequestBudget<'a>>,
    upstream: UpstreamGate<'a>,
    permits: VecDeque<Permit>,
    /// The request waiting for room.
    waiting: Option<Queued<'a>>,
}

impl<'a> RequestGate<'a> {
    /// The gate of client `ip` on listener `li` to the route whose capacity is `capacity`
    /// (`requestLimit` asked only when the policy in force has one).
    pub(crate) fn new(
        shared: &'a Shared,
        li: ListenerId,
        ip: IpAddr,
        capacity: &'a Arc<Capacity>,
    ) -> Self {
        let budget = RequestBudget::new(shared, li, ip);
        RequestGate {
            budget: budget.active().then_some(budget),
            upstream: UpstreamGate::new(shared, li, ip, capacity),
            permits: VecDeque::new(),
            waiting: None,
        }
    }
}

fn overloaded(o: Overloaded) -> Answer {
    Answer {
        bytes: answers::service_unavailable(o.retry_after_s),
        reason: AnswerReason::UpstreamOverloaded,
    }
}

impl RequestHooks for RequestGate<'_> {
    fn request(&mut self, now_ns: u64) -> Result<(), Answer> {
        if let Some(b) = &mut self.budget {
            b.request(now_ns)?;
        }
        match self.upstream.admit(now_ns, || true) {
            Admit::Ready(p) => self.permits.push_back(p),
            Admit::Wait(q) => self.waiting = Some(q),
            Admit::Refused(o) => return Err(overloaded(o)),
        }
        Ok(())
    }

    fn poll_admit(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Answer>> {
        let Some(q) = &mut self.waiting else {
            return Poll::Ready(Ok(()));
        };
        let r = std::task::ready!(q.poll_permit(cx, crate::clock::now_ns()));
        self.waiting = None;
        Poll::Ready(match r {
            Ok(p) => {
                self.permits.push_back(p);
                Ok(())
            }
            Err(o) => Err(overloaded(o)),
        })
    }

    #[inline]
    fn responded(&mut self, now_ns: u64) {
        if let Some(p) = self.permits.pop_front() {
            p.answered(now_ns);
        }
    }

    #[inline]
    fn active(&self) -> bool {
        true
    }
}

/// The stream hooks of one terminated HTTP/2 connection: each stream the client opens is one
/// request against `requestLimit` (over budget: shed, GOAWAY ENHANCE_YOUR_CALM,
/// `request_rate_limited`; observe mode: reported once, not shed) and takes a capacity permit.
/// With no room, the stream's HEADERS frame is held ([`StreamHooks::ready`]: the connection's
/// client → upstream bytes wait from that frame on, its responses go on) while it waits in the
/// route's queue; no room after `queueTimeoutMs` (or no place in the queue, or holding could
/// stall one of the connection's own streams) sheds it: GOAWAY NO_ERROR, `upstream_overloaded`.
/// The permit is released at the stream's first response HEADERS (a latency sample). A stream
/// that ends without a response (a reset, either way) keeps its permit, without a sample, for
/// the route's current latency ([`Capacity::reset_hold_ns`]): the upstream likely still works on
/// it, so a rapid reset counts against the capacity for as long as the work it caused; and for
/// [`RESET_NO_WAIT_NS`] the connection does not wait in the queue (shed at the limit). At most
/// `maxConcurrentStreams` open and [`MAX_HELD`] reset permits are held. When the connection
/// ends, the permits of its unanswered streams (reset or still open) are parked on the route
/// ([`Capacity::park`]) until their hold is over: a client whose connections the guard closes
/// cannot free the capacity its reset streams still use upstream by losing the connection.
pub(crate) struct StreamGate<'a> {
    budget: Option<RequestBudget<'a>>,
    upstream: UpstreamGate<'a>,
    open: Vec<(u32, Permit)>,
    /// Permits of streams reset before their response, with when they are released (ns).
    held: VecDeque<(u64, Permit)>,
    /// The stream whose HEADERS is held, and its wait.
    waiting: Option<(u32, Queued<'a>)>,
    /// What [`StreamHooks::ready`] decided for the stream about to open: its permit, or the
    /// refusal `opened` sheds it with.
    next: Option<(u32, Result<Permit, Overloaded>)>,
    /// The connection just waited its turn: the later streams of the same client read take the
    /// room there is without queueing again (one write for them, not one wait each).
    resumed: bool,
    /// When a stream of this connection last ended without a response (ns; 0 = never).
    last_unanswered_ns: u64,
}

/// A connection that ended a stream without its response within this long (ns, 1 s) does not
/// wait in the route's queue: at the limit its next stream is shed (GOAWAY NO_ERROR,
/// `upstream_overloaded`). Work it abandons is the heaviest a client puts on a full upstream,
/// and waiting, it would hold a place in the queue ahead of clients that read their answers.
pub(crate) const RESET_NO_WAIT_NS: u64 = 1_000_000_000;

/// Most permits of reset streams one connection holds (the oldest is released first).
pub(crate) const MAX_HELD: usize = 256;

impl<'a> StreamGate<'a> {
    /// The gate of client `ip` on listener `li` to the route whose capacity is `capacity`.
    pub(crate) fn new(
        shared: &'a Shared,
        li: ListenerId,
        ip: IpAddr,
        capacity: &'a Arc<Capacity>,
    ) -> Self {
        let limited = shared.listener(li).engine.requests_limited();
        StreamGate {
            budget: limited.then(|| RequestBudget::new(shared, li, ip)),
            upstream: UpstreamGate::new(shared, li, ip, capacity),
            open: Vec::new(),
            held: VecDeque::new(),
            waiting: None,
            next: None,
            resumed: false,
            last_unanswered_ns: 0,
        }
    }

    /// Releases the reset streams' permits whose time is over at `now_ns`.
    fn release_held(&mut self, now_ns: u64) {
        while self.held.front().is_some_and(|(until, _)| *until <= now_ns) {
            self.held.pop_front();
        }
    }
}

impl Drop for StreamGate<'_> {
    fn drop(&mut self) {
        if self.open.is_empty() && self.held.is_empty() {
            return;
        }
        let now = crate::clock::now_ns();
        self.release_held(now);
        let hold = self.upstream.capacity.reset_hold_ns();
        if hold == 0 {
            // No latency learned yet: the open streams' permits are released now.
            self.open.clear();
        }
        let until = now.saturating_add(hold);
        let open = self.open.drain(..).map(|(_, p)| (until, p));
        self.upstream.capacity.park(self.held.drain(..).chain(open));
    }
}

impl StreamHooks for StreamGate<'_> {
    fn ready(&mut self, id: u32, now_ns: u64, may_wait: impl FnOnce() -> bool) -> bool {
        if self.next.as_ref().is_some_and(|(s, _)| *s == id) {
            return true;
        }
        if self.waiting.is_some() {
            // Asked again before the wait ended (not expected: the copy loop polls first).
            return false;
        }
        self.release_held(now_ns);
        if self.resumed {
            if let Some(p) = self.upstream.take_after_wait(now_ns) {
                self.next = Some((id, Ok(p)));
                return true;
            }
            self.resumed = false;
        }
        // Holding could stall this connection's own streams (`may_wait`), or the connection
        // abandons its streams (`RESET_NO_WAIT_NS`): shed instead.
        let reset_lately = self.last_unanswered_ns != 0
            && now_ns.saturating_sub(self.last_unanswered_ns) < RESET_NO_WAIT_NS;
        let decided = match self.upstream.admit(now_ns, || !reset_lately && may_wait()) {
            Admit::Ready(p) => Ok(p),
            Admit::Refused(o) => Err(o),
            Admit::Wait(q) => {
                // Its reset streams' permits would stay held for the whole wait (their time is
                // only checked on this connection's own events): the route's tick releases them
                // when their time is over. Kept here, a connection waiting for room held the
                // room it waits for, and rapid-reset connections stalled the queue until their
                // `queueTimeoutMs`.
                if !self.held.is_empty() {
                    self.upstream.capacity.park(self.held.drain(..));
                }
                self.waiting = Some((id, q.batched()));
                return false;
            }
        };
        self.next = Some((id, decided));
        true
    }

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let Some((id, q)) = &mut self.waiting else {
            return Poll::Ready(());
        };
        let r = std::task::ready!(q.poll_permit(cx, crate::clock::now_ns()));
        self.resumed = r.is_ok();
        self.next = Some((*id, r));
        self.waiting = None;
        Poll::Ready(())
    }

    #[inline]
    fn chunk_done(&mut self) {
        if std::mem::replace(&mut self.resumed, false) {
            // The streams of the read that waited took their room: the rest is the next
            // waiter's.
            self.upstream.capacity.pass_on();
        }
    }

    fn opened(&mut self, id: u32, now_ns: u64) -> Result<(), Shed> {
        self.release_held(now_ns);
        let decided = match self.next.take() {
            Some((s, d)) if s == id => Some(d),
            _ => None,
        };
        if let Some(b) = &mut self.budget {
            b.check(now_ns).map_err(|_| Shed {
                reason: ShedReason::RequestRateLimited,
            })?;
        }
        let permit = match decided {
            Some(d) => d,
            None => self.upstream.acquire(now_ns),
        }
        .map_err(|_| Shed {
            reason: ShedReason::UpstreamOverloaded,
        })?;
        self.open.push((id, permit));
        Ok(())
    }

    fn closed(&mut self, id: u32, answered: bool, now_ns: u64) {
        self.release_held(now_ns);
        if let Some(i) = self.open.iter().position(|(s, _)| *s == id) {
            let (_, p) = self.open.swap_remove(i);
            if answered {
                p.answered(now_ns);
                return;
            }
            self.last_unanswered_ns = now_ns.max(1);
            let hold = self.upstream.capacity.reset_hold_ns();
            if hold > 0 {
                if self.held.len() == MAX_HELD {
                    self.held.pop_front();
                }
                // Deadlines grow with `now_ns` unless the hold shrank: then released a little late.
                self.held.push_back((now_ns.saturating_add(hold), p));
            }
        }
    }
}
