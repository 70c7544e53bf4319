//! [`HeaderWriter`]: the HTTP/1.1 request follower around one upstream stream (a child module of
//! `forward_headers`, whose [`Rewriter`] it drives in both directions).
//!
//! Per request it also:
//! - asks its [`RequestHooks`] before a complete request head goes out
//!   ([`RequestHooks::request`]; a refusal is answered by Rampart, see [`Answer`]) and tells them
//!   when the final response head to the oldest outstanding request passed
//!   ([`RequestHooks::responded`]);
//! - holds the connection to its [`ConnLimits`] (`slowRequest`): a request head that does not
//!   complete within `headTimeoutMs` of its first byte ends the connection (`slow_request`); a
//!   gap of `keepAliveTimeoutMs` between requests, while no response is outstanding, closes it;
//!   the `maxRequestsPerConnection`-th request goes out with `Connection: close`, and bytes of a
//!   request after it close the connection once the responses before them passed.
//!
//! The deadlines are one `tokio` timer per connection (allocated at the first deadline), polled
//! from `poll_read` — which the copy loop polls whenever it waits on the upstream — and from
//! `poll_write`. Moving a deadline later leaves the timer alone (it fires early and is set
//! again), so a request costs at most one clock read per deadline and rarely a timer reset. A
//! head that arrives in one read arms nothing. [`HeaderWriter::ended`] says why the follower
//! ended the connection.

use super::{reset, Refused, Rewriter, State, Step, CONNECT_REFUSED};
use crate::clock;
use std::borrow::Cow;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// What the HTTP/1.1 follower asks and tells about each request of a connection. Called from the
/// copy loop's task, never concurrently; `now_ns` is CLOCK_MONOTONIC ns
/// ([`crate::clock::now_ns`]).
pub trait RequestHooks: Send {
    /// A complete request head (not a refused `CONNECT`) is about to be forwarded.
    /// `Err(answer)`: Rampart answers the client with `answer` (a whole HTTP/1.1 response with
    /// `Connection: close`) once the responses to earlier requests passed, forwards nothing of
    /// this request, and ends the connection.
    fn request(&mut self, now_ns: u64) -> Result<(), Answer>;
    /// After `request` said `Ok`: whether the request goes now (`Ready(Ok)`), waits
    /// (`Pending`: the hooks woke `cx` when it may go or is answered — a request queued for
    /// room at the upstream) or is answered after all (`Ready(Err)`, as from `request`). Polled
    /// again until ready; the head waits meanwhile, and so do the client's later bytes.
    #[inline]
    fn poll_admit(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Answer>> {
        Poll::Ready(Ok(()))
    }
    /// The final (non-`1xx`; `101` counts) response head to the oldest outstanding request
    /// passed.
    fn responded(&mut self, now_ns: u64);
    /// Whether the hooks do anything: `false` spares the clock reads (the no-hooks `()`).
    #[inline]
    fn active(&self) -> bool {
        true
    }
}

/// No hooks: every request goes on, nothing is told.
impl RequestHooks for () {
    #[inline]
    fn request(&mut self, _: u64) -> Result<(), Answer> {
        Ok(())
    }
    #[inline]
    fn responded(&mut self, _: u64) {}
    #[inline]
    fn active(&self) -> bool {
        false
    }
}

impl<T: RequestHooks + ?Sized> RequestHooks for Box<T> {
    #[inline]
    fn request(&mut self, now_ns: u64) -> Result<(), Answer> {
        (**self).request(now_ns)
    }
    #[inline]
    fn poll_admit(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Answer>> {
        (**self).poll_admit(cx)
    }
    #[inline]
    fn responded(&mut self, now_ns: u64) {
        (**self).responded(now_ns)
    }
    #[inline]
    fn active(&self) -> bool {
        (**self).active()
    }
}

/// Why Rampart answered a request itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerReason {
    /// Over the client's (or its prefix's) `requestLimit`: `429` (`request_rate_limited`).
    RequestRateLimited,
    /// The upstream has no room for it: `503` (`upstream_overloaded`).
    UpstreamOverloaded,
}

/// Rampart's own answer to a request ([`super::super::answers`] builds the bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// A whole HTTP/1.1 response ending the connection (`Connection: close`).
    pub bytes: Vec<u8>,
    /// Why.
    pub reason: AnswerReason,
}

/// What `slowRequest` holds each request of a keep-alive connection to. The default applies
/// nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnLimits {
    /// `headTimeoutMs`: from the first byte of a request head to its end.
    pub head_timeout: Option<Duration>,
    /// `keepAliveTimeoutMs`: the longest gap between requests while no response is outstanding.
    pub keep_alive_timeout: Option<Duration>,
    /// `maxRequestsPerConnection` (0 = no cap).
    pub max_requests: u32,
    /// Observe mode: a head past its deadline is recorded ([`HeaderWriter::observed`]), and the
    /// connection goes on.
    pub observe: bool,
}

/// Why the follower ended a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// A request head did not complete within `headTimeoutMs` of its first byte (the pair is
    /// dropped at once: `slow_request`).
    SlowRequest,
    /// No request within `keepAliveTimeoutMs` of the last response (closed, a normal end).
    Idle,
    /// A request past `maxRequestsPerConnection` (closed once the responses before it passed,
    /// a normal end).
    MaxRequests,
    /// A request was answered by Rampart ([`Answer`]).
    Answered(AnswerReason),
}

/// What the client is given instead of the upstream's bytes once the responses to its earlier
/// requests passed, then the end of the stream.
struct Reply {
    bytes: Cow<'static, [u8]>,
    at: usize,
}

/// An upstream stream whose writes go through a [`Rewriter`]; reads pass through unchanged,
/// followed by a response-mode rewriter so that an upgrade or `CONNECT` becomes a tunnel only
/// once the upstream granted it (`101`, `2xx`): until its answer the client's later bytes wait
/// (a WebSocket client sends none before the `101`); a refusal lets the next request be
/// rewritten. A write is accepted once the rewriter took it; rewritten bytes not yet written
/// wait in a buffer (at most one copy-loop read plus the inserted lines) that `poll_flush` /
/// `poll_shutdown` and the next write drain first. After a refusal every write fails;
/// [`HeaderWriter::refused`] says why. A refused `CONNECT`, a request the hooks answer, a
/// request past `maxRequestsPerConnection` and the keep-alive timeout are answered instead: the
/// client's bytes from then on are read and dropped, and once the responses to the requests
/// before have passed, reads give the answer ([`CONNECT_REFUSED`], the hooks' [`Answer`], or
/// nothing), then end (the client's side is shut down).
pub struct HeaderWriter<S, H = ()> {
    inner: S,
    rw: Rewriter,
    resp: Rewriter,
    pending: Vec<u8>,
    pending_pos: usize,
    refused: Option<Refused>,
    /// Set with `refused` or an [`Answer`], for whoever cannot borrow the writer (the
    /// known-good mark).
    refused_flag: Arc<AtomicBool>,
    reply: Option<Reply>,
    hooks: H,
    limits: ConnLimits,
    /// The deadline timer (allocated at the first deadline); it may be set earlier than
    /// `deadline` (it then fires and is set again).
    timer: Option<Pin<Box<Sleep>>>,
    /// The deadline in force and what passing it means.
    deadline: Option<(Instant, Ended)>,
    /// Request heads forwarded.
    requests: u32,
    /// A complete request head (in `rw.out`) waits for the hooks' [`RequestHooks::poll_admit`].
    admitting: bool,
    ended: Option<Ended>,
    observed: bool,
}

impl<S> HeaderWriter<S> {
    /// `inner` with writes rewritten by `rw`, no hooks and no per-request limits.
    pub fn new(inner: S, rw: Rewriter) -> Self {
        HeaderWriter::with_hooks(inner, rw, (), ConnLimits::default())
    }
}

impl<S, H: RequestHooks> HeaderWriter<S, H> {
    /// `inner` with writes rewritten by `rw`, each request shown to `hooks` and held to
    /// `limits`.
    pub fn with_hooks(inner: S, mut rw: Rewriter, hooks: H, limits: ConnLimits) -> Self {
        rw.close = limits.max_requests == 1;
        HeaderWriter {
            inner,
            rw,
            resp: Rewriter::responses(),
            pending: Vec::new(),
            pending_pos: 0,
            refused: None,
            refused_flag: Arc::default(),
            reply: None,
            hooks,
            limits,
            timer: None,
            deadline: None,
            requests: 0,
            admitting: false,
            ended: None,
            observed: false,
        }
    }

    /// Why the client's bytes were refused, if they were.
    pub fn refused(&self) -> Option<Refused> {
        self.refused
    }

    /// A flag that becomes true when the client's bytes are refused or a request is answered by
    /// Rampart (readable while the writer is borrowed by the copy loop).
    pub fn refused_flag(&self) -> Arc<AtomicBool> {
        self.refused_flag.clone()
    }

    /// Why the follower ended the connection, if it did (`None`: a side closed, or the pair
    /// ended for another reason).
    pub fn ended(&self) -> Option<Ended> {
        self.ended
    }

    /// In observe mode: whether a request head passed its `headTimeoutMs` (the connection went
    /// on).
    pub fn observed(&self) -> bool {
        self.observed
    }

    /// The hooks.
    pub fn hooks(&self) -> &H {
        &self.hooks
    }

    /// Sets the deadline in force to `at` (`why` when it passes), registering the timer with
    /// `cx`.
    fn arm(&mut self, at: Instant, why: Ended, cx: &mut Context<'_>) {
        self.deadline = Some((at, why));
        match &mut self.timer {
            // It fires first and is set to `at` then.
            Some(t) if t.deadline() <= at => {}
            Some(t) => t.as_mut().reset(at),
            None => self.timer = Some(Box::pin(tokio::time::sleep_until(at))),
        }
        // Registers the task's waker (a deadline armed now cannot have passed).
        let _ = self.poll_deadline(cx);
    }

    /// Whether the deadline in force has passed (and what it means).
    fn poll_deadline(&mut self, cx: &mut Context<'_>) -> Option<Ended> {
        let (at, why) = self.deadline?;
        let timer = self.timer.as_mut()?;
        loop {
            if timer.as_mut().poll(cx).is_pending() {
                return None;
            }
            if timer.deadline() >= at {
                return Some(why);
            }
            timer.as_mut().reset(at);
        }
    }

    /// Acts on a passed deadline: `Err` ends the pair at once (`slow_request`).
    fn check_deadline(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        let Some(why) = self.poll_deadline(cx) else {
            return Ok(());
        };
        self.deadline = None;
        match why {
            Ended::SlowRequest if self.limits.observe => self.observed = true,
            Ended::SlowRequest => {
                self.ended = Some(why);
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "request head past slowRequest.headTimeoutMs",
                ));
            }
            _ => self.close_after_responses(Cow::Borrowed(b""), why, cx),
        }
        Ok(())
    }

    /// From now on the client's bytes are dropped; once the responses to the requests already
    /// forwarded passed, the client is given `bytes`, then the end of the stream.
    fn close_after_responses(
        &mut self,
        bytes: Cow<'static, [u8]>,
        why: Ended,
        cx: &mut Context<'_>,
    ) {
        self.reply = Some(Reply { bytes, at: 0 });
        self.ended = Some(why);
        self.deadline = None;
        // The upstream → client direction may wait on the upstream: it may have an answer now
        // (see `poll_read`; same task).
        cx.waker().wake_by_ref();
    }

    /// The complete request head in `rw.out` goes (the hooks admitted it).
    fn forward_head(&mut self) {
        let max = self.limits.max_requests;
        self.requests = self.requests.saturating_add(1);
        self.rw.close = max != 0 && self.requests.saturating_add(1) == max;
        self.pending.append(&mut self.rw.out);
        reset(&mut self.rw.out);
        self.resp.kinds.extend(self.rw.kinds.drain(..));
    }

    /// The complete request head in `rw.out` is answered by Rampart with `a` instead.
    fn answer(&mut self, a: Answer, cx: &mut Context<'_>) {
        self.rw.out.clear();
        self.rw.kinds.clear();
        self.refused_flag.store(true, Ordering::Relaxed);
        let why = Ended::Answered(a.reason);
        self.close_after_responses(Cow::Owned(a.bytes), why, cx);
    }

    /// A head waiting for the hooks: Ready once it went (or was answered).
    fn poll_admitting(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if !self.admitting {
            return Poll::Ready(());
        }
        let r = ready!(self.hooks.poll_admit(cx));
        self.admitting = false;
        match r {
            Ok(()) => self.forward_head(),
            Err(a) => self.answer(a, cx),
        }
        Poll::Ready(())
    }

    /// Between requests with every response passed: the keep-alive deadline starts (once).
    fn arm_idle(&mut self, cx: &mut Context<'_>) {
        if let Some(t) = self.limits.keep_alive_timeout {
            if self.deadline.is_none()
                && !self.admitting
                && self.reply.is_none()
                && self.rw.idle()
                && self.resp.answered_all()
            {
                self.arm(Instant::now() + t, Ended::Idle, cx);
            }
        }
    }
}

fn refused_error(r: Refused) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("request refused: {r:?}"),
    )
}

impl<S: AsyncWrite + Unpin, H> HeaderWriter<S, H> {
    /// Writes the pending bytes; Ready(Ok) once none is left.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.pending_pos < self.pending.len() {
            let n = ready!(
                Pin::new(&mut self.inner).poll_write(cx, &self.pending[self.pending_pos..])
            )?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.pending_pos += n;
        }
        reset(&mut self.pending);
        self.pending_pos = 0;
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + Unpin, H: RequestHooks + Unpin> AsyncRead for HeaderWriter<S, H> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.deadline.is_some() {
            this.check_deadline(cx)?;
        }
        if let Some(r) = &mut this.reply {
            // Rampart's answer, once every earlier response went; then the end.
            if this.resp.answered_all() {
                let n = buf.remaining().min(r.bytes.len() - r.at);
                buf.put_slice(&r.bytes[r.at..r.at + n]);
                r.at += n;
                return Poll::Ready(Ok(()));
            }
        }
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        let got = &buf.filled()[before..];
        let mut at = 0;
        while at < got.len() {
            match this.resp.next(&got[at..]) {
                Ok(Step::Pass(n)) => {
                    this.resp.passed(n);
                    at += n;
                }
                Ok(Step::Held(n) | Step::Emit(n)) => {
                    this.resp.out.clear();
                    at += n;
                }
                // A response stream it cannot follow: the rest passes as it is (a pending
                // upgrade stays ungranted).
                Ok(Step::Wait) | Err(_) => {
                    this.resp.state = State::Tunnel;
                    break;
                }
            }
        }
        let finals = std::mem::take(&mut this.resp.finals);
        if finals > 0 && this.hooks.active() {
            let now = clock::now_ns();
            for _ in 0..finals {
                this.hooks.responded(now);
            }
        }
        if let Some(granted) = this.resp.decided.take() {
            this.rw.answered(granted);
            // The client direction may be waiting for this answer (same task: poll it again).
            cx.waker().wake_by_ref();
        }
        if this.reply.is_none() {
            this.arm_idle(cx);
        } else if this.resp.answered_all() {
            // The answer is next (this task reads again at once).
            cx.waker().wake_by_ref();
        }
        Poll::Ready(Ok(()))
    }
}

// `poll_write` is kept whole (over 120 lines): one poll of the follower's state machine, whose
// early returns (refused, admitting, draining, a head to finish) read in the order they win.
impl<S: AsyncWrite + Unpin, H: RequestHooks + Unpin> AsyncWrite for HeaderWriter<S, H> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match this.refused {
            // Answered (see `poll_read`): what the client still sends is dropped.
            Some(Refused::Connect) => return Poll::Ready(Ok(buf.len())),
            Some(r) => return Poll::Ready(Err(refused_error(r))),
            None => {}
        }
        if this.deadline.is_some() {
            this.check_deadline(cx)?;
        }
        ready!(this.poll_admitting(cx));
        if this.reply.is_some() {
            // Closing after the responses before: what went before goes; the rest is dropped.
            ready!(this.poll_drain(cx))?;
            return Poll::Ready(Ok(buf.len()));
        }
        ready!(this.poll_drain(cx))?;
        if matches!(this.deadline, Some((_, Ended::Idle))) && !buf.is_empty() {
            // The next request starts.
            this.deadline = None;
        }
        let max = this.limits.max_requests;
        let mut used = 0;
        while used < buf.len() {
            if max != 0 && this.requests >= max && this.rw.idle() {
                // A request past `maxRequestsPerConnection`: none of it goes.
                this.close_after_responses(Cow::Borrowed(b""), Ended::MaxRequests, cx);
                used = buf.len();
                break;
            }
            let step = match this.rw.next(&buf[used..]) {
                Ok(s) => s,
                // The requests before the refused bytes go first: the next write fails.
                Err(_) if used > 0 => break,
                Err(r) => {
                    this.refused = Some(r);
                    this.refused_flag.store(true, Ordering::Relaxed);
                    if r == Refused::Connect {
                        this.reply = Some(Reply {
                            bytes: Cow::Borrowed(CONNECT_REFUSED),
                            at: 0,
                        });
                        this.deadline = None;
                        // The upstream → client direction may wait on the upstream: it has
                        // an answer now (see `poll_read`).
                        cx.waker().wake_by_ref();
                        return Poll::Ready(Ok(buf.len()));
                    }
                    return Poll::Ready(Err(refused_error(r)));
                }
            };
            match step {
                Step::Held(n) => {
                    used += n;
                    // A head begun and not complete: its deadline runs from now (its first
                    // bytes).
                    if let (Some(t), State::Head) = (this.limits.head_timeout, this.rw.state) {
                        if !matches!(this.deadline, Some((_, Ended::SlowRequest))) {
                            this.arm(Instant::now() + t, Ended::SlowRequest, cx);
                        }
                    }
                }
                Step::Emit(n) => {
                    used += n;
                    if !this.rw.kinds.is_empty() {
                        // A complete request head: its deadline is met.
                        if matches!(this.deadline, Some((_, Ended::SlowRequest))) {
                            this.deadline = None;
                        }
                        if this.hooks.active() {
                            let asked = match this.hooks.request(clock::now_ns()) {
                                Ok(()) => this.hooks.poll_admit(cx),
                                Err(a) => Poll::Ready(Err(a)),
                            };
                            match asked {
                                Poll::Ready(Ok(())) => {}
                                Poll::Ready(Err(a)) => {
                                    this.answer(a, cx);
                                    used = buf.len();
                                    break;
                                }
                                Poll::Pending => {
                                    // It waits (in `rw.out`); so do the bytes after it.
                                    this.admitting = true;
                                    break;
                                }
                            }
                        }
                        this.forward_head();
                    } else {
                        this.pending.append(&mut this.rw.out);
                        reset(&mut this.rw.out);
                    }
                }
                // Woken by `poll_read` when the upstream answers.
                Step::Wait if used > 0 => break,
                Step::Wait => return Poll::Pending,
                Step::Pass(n) => {
                    if this.pending_pos < this.pending.len() {
                        // An emitted head goes first; `used > 0`: it was emitted in this call.
                        match this.poll_drain(cx) {
                            Poll::Ready(Ok(())) => {}
                            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                            Poll::Pending => return Poll::Ready(Ok(used)),
                        }
                    }
                    match Pin::new(&mut this.inner).poll_write(cx, &buf[used..used + n]) {
                        Poll::Ready(Ok(k)) => {
                            this.rw.passed(k);
                            used += k;
                            if k < n {
                                return Poll::Ready(Ok(used));
                            }
                        }
                        Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                        Poll::Pending if used > 0 => return Poll::Ready(Ok(used)),
                        Poll::Pending => return Poll::Pending,
                    }
                }
            }
        }
        // An upstream that answered before the request's body ended: the gap starts now.
        this.arm_idle(cx);
        // Whatever was emitted starts now; the rest waits for the next write or a flush.
        if let Poll::Ready(Err(e)) = this.poll_drain(cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(used))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_admitting(cx));
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.refused.is_none() {
            ready!(this.poll_admitting(cx));
            ready!(this.poll_drain(cx))?;
        }
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
#[path = "follower_tests.rs"]
mod tests;
