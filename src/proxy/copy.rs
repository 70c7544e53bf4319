//! Bidirectional byte copy with half-close, byte counters and a true idle timeout.
//!
//! Each direction is a [`Pump`]: read into a buffer, write it all to the other side, repeat; an EOF
//! becomes a `shutdown` of the other side's write half while copying continues the other way.
//! A pump holds its buffer (16 KiB client → upstream, 64 KiB upstream → client, so a bulk
//! response is a few large TLS records and syscalls) only while bytes move: when its read side
//! has nothing to give, the buffer goes back to a small per-thread pool, so an idle connection
//! holds no copy buffer at all. Each side is
//! wrapped in [`Metered`], which stamps the last-activity time (CLOCK_MONOTONIC ms) and adds the
//! bytes to the listener counters; a watchdog closes the pair once no byte moved in either
//! direction for `idle_timeout` (none: `idleTimeoutMs: 0`). The buffer sizes are
//! `clientReadBufferSize` / `upstreamReadBufferSize` ([`CopyOptions`]).
//!
//! Half-close, as Symphony bounds it: once the upstream ended its side (its EOF passed on to the
//! client as a shutdown) while the client's side is still open, the pair is half-closed (counted
//! in `halfClosedConnections` while it lasts) and is closed ([`CopyEnd::HalfClosed`]) once the
//! client sent nothing for `halfCloseTimeoutMs` (each byte from the client restarts the wait; 0:
//! no bound). A client that ended its side first is not bounded: what survives then is the
//! upstream's response, which may rightly be slow to start; the idle timeout still applies.
//!
//! An [`Inspector`] may look at every chunk on its way (the HTTP/2 guard, see
//! `crate::conn::h2`): it can rewrite a chunk in place, forward only its head and stop that
//! direction, stop the other direction before its next read, and have a few bytes of its own
//! written after a stopped direction's last byte (a GOAWAY). A connection with nothing to inspect
//! passes [`Pass`], which inspects nothing: its calls are inlined to constants, so the plain copy
//! costs what it cost before inspectors existed.

use crate::clock;
use std::cell::RefCell;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Counters a metered stream updates.
pub(crate) struct Meter<'a> {
    /// Last activity, CLOCK_MONOTONIC ms.
    pub last_active_ms: &'a AtomicU64,
    /// Bytes read from this side, added to each (the listener's and the route's counter).
    pub read_bytes: [&'a AtomicU64; 2],
}

/// A stream wrapper that records activity and bytes read.
pub(crate) struct Metered<'a, S> {
    inner: S,
    meter: Meter<'a>,
}

impl<'a, S> Metered<'a, S> {
    /// Wraps `inner`.
    pub(crate) fn new(inner: S, meter: Meter<'a>) -> Self {
        Metered { inner, meter }
    }
}

fn now_ms() -> u64 {
    clock::now_ns() / clock::NS_PER_MS
}

impl<S: AsyncRead + Unpin> AsyncRead for Metered<'_, S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.inner).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        if n > 0 {
            for c in this.meter.read_bytes {
                c.fetch_add(n as u64, Ordering::Relaxed);
            }
            this.meter.last_active_ms.store(now_ms(), Ordering::Relaxed);
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Metered<'_, S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = &r {
            if *n > 0 {
                this.meter.last_active_ms.store(now_ms(), Ordering::Relaxed);
            }
        }
        r
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// What an [`Inspector`] decided about one chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    /// Forward the whole chunk and keep reading.
    All,
    /// Forward `chunk[..n]`, then read no more from this side: shut the other side's writer
    /// (after the inspector's farewell bytes, if any).
    Stop(usize),
    /// Forward `chunk[..n]`, then hold `chunk[n..]` (and this side's later bytes) until
    /// [`Inspector::poll_resume`] is ready, and inspect `chunk[n..]` again then.
    Hold(usize),
}

/// Which way a pump moves bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dir {
    /// Client → upstream.
    ToUpstream,
    /// Upstream → client.
    ToClient,
}

/// Most bytes an inspector may have written after a stopped direction.
pub(crate) const FAREWELL_MAX: usize = 32;

/// Looks at the bytes a pair moves, chunk by chunk, and may end the pair. Both directions are
/// pumped in one task, so one inspector serves both and needs no lock.
pub(crate) trait Inspector {
    /// A chunk just read in direction `dir`, before it is written; it may be rewritten in place
    /// (never resized).
    fn inspect(&mut self, dir: Dir, chunk: &mut [u8]) -> Flow;
    /// Whether direction `dir` must read no more, checked before each read (the other
    /// direction ended the pair).
    fn stopped(&self, dir: Dir) -> bool;
    /// Bytes to write after the last byte of direction `dir` once its reads ended, before its
    /// writer is shut down (written into `out`; returns how many).
    fn farewell(&self, dir: Dir, out: &mut [u8; FAREWELL_MAX]) -> usize;
    /// Bytes to write in direction `dir` now, between two chunks (asked each time everything
    /// read so far was written, before the next read; written into `out`, returns how many).
    /// The HTTP/2 guard's graceful GOAWAY. None by default.
    #[inline(always)]
    fn interject(&mut self, _dir: Dir, _out: &mut [u8; FAREWELL_MAX]) -> usize {
        0
    }
    /// Ready once a direction held by [`Flow::Hold`] may go on (registers `cx`). No default: a
    /// wrapper that did not pass it on would spin on a held chunk.
    fn poll_resume(&mut self, cx: &mut Context<'_>) -> Poll<()>;
    /// Whether what moved so far is an exchange a known-good mark may rest on ([`KnownGood`]),
    /// beyond bytes both ways: the HTTP/2 guard asks for an answered stream. No default: a
    /// wrapper that did not pass it on would mark clients the inner inspector would not.
    fn exchanged(&self) -> bool;
    /// Ready once an ending pair has waited long enough for its directions to finish: the pair
    /// is then dropped with whatever is still pending.
    fn poll_give_up(&mut self, cx: &mut Context<'_>) -> Poll<()>;
}

/// Inspects nothing.
pub(crate) struct Pass;

impl Inspector for Pass {
    #[inline(always)]
    fn inspect(&mut self, _: Dir, _: &mut [u8]) -> Flow {
        Flow::All
    }
    #[inline(always)]
    fn stopped(&self, _: Dir) -> bool {
        false
    }
    #[inline(always)]
    fn farewell(&self, _: Dir, _: &mut [u8; FAREWELL_MAX]) -> usize {
        0
    }
    #[inline(always)]
    fn poll_resume(&mut self, _: &mut Context<'_>) -> Poll<()> {
        Poll::Ready(())
    }
    #[inline(always)]
    fn exchanged(&self) -> bool {
        true
    }
    #[inline(always)]
    fn poll_give_up(&mut self, _: &mut Context<'_>) -> Poll<()> {
        Poll::Pending
    }
}

/// Wraps an inspector and runs `hook` once, as soon as bytes have moved both ways and the inner
/// inspector says they are an exchange ([`Inspector::exchanged`]: an answered stream on HTTP/2)
/// — the known-good mark of the connection path. `client_sent`: the client's first bytes were already
/// forwarded before the pair started (a request head Rampart buffered), so one upstream byte
/// completes the exchange.
pub(crate) struct KnownGood<I: Inspector, F: FnOnce()> {
    inner: I,
    up: bool,
    down: bool,
    hook: Option<F>,
}

impl<I: Inspector, F: FnOnce()> KnownGood<I, F> {
    /// `inner` with `hook` (none: the wrapper only delegates).
    pub(crate) fn new(inner: I, client_sent: bool, hook: Option<F>) -> Self {
        KnownGood {
            inner,
            up: client_sent,
            down: false,
            hook,
        }
    }

    /// The wrapped inspector.
    pub(crate) fn inner(&self) -> &I {
        &self.inner
    }
}

impl<I: Inspector, F: FnOnce()> Inspector for KnownGood<I, F> {
    #[inline]
    fn inspect(&mut self, dir: Dir, chunk: &mut [u8]) -> Flow {
        let flow = self.inner.inspect(dir, chunk);
        if self.hook.is_some() && !chunk.is_empty() && flow == Flow::All {
            match dir {
                Dir::ToUpstream => self.up = true,
                Dir::ToClient => self.down = true,
            }
            if self.up && self.down && self.inner.exchanged() {
                if let Some(h) = self.hook.take() {
                    h();
                }
            }
        }
        flow
    }
    #[inline]
    fn stopped(&self, dir: Dir) -> bool {
        self.inner.stopped(dir)
    }
    #[inline]
    fn farewell(&self, dir: Dir, out: &mut [u8; FAREWELL_MAX]) -> usize {
        self.inner.farewell(dir, out)
    }
    #[inline]
    fn interject(&mut self, dir: Dir, out: &mut [u8; FAREWELL_MAX]) -> usize {
        self.inner.interject(dir, out)
    }
    #[inline]
    fn poll_resume(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.inner.poll_resume(cx)
    }
    #[inline]
    fn exchanged(&self) -> bool {
        self.inner.exchanged()
    }
    #[inline]
    fn poll_give_up(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.inner.poll_give_up(cx)
    }
}

/// Idle buffers kept per worker thread for reuse.
const POOL_MAX: usize = 16;

thread_local! {
    static POOL: RefCell<Vec<Box<[u8]>>> = const { RefCell::new(Vec::new()) };
}

fn take_buf(size: usize) -> Box<[u8]> {
    POOL.with(|p| {
        let mut p = p.borrow_mut();
        match p.iter().position(|b| b.len() == size) {
            Some(i) => p.swap_remove(i),
            None => vec![0u8; size].into_boxed_slice(),
        }
    })
}

fn give_buf(b: Box<[u8]>) {
    POOL.with(|p| {
        let mut p = p.borrow_mut();
        if p.len() < POOL_MAX {
            p.push(b);
        }
    });
}

/// One direction of a proxied pair.
struct Pump {
    dir: Dir,
    size: usize,
    buf: Option<Box<[u8]>>,
    pos: usize,
    cap: usize,
    /// `Some(h)`: `buf[h..cap]` is held by the inspector ([`Flow::Hold`]).
    hold: Option<usize>,
    need_flush: bool,
    /// No more reads: EOF, or the inspector stopped this direction.
    read_done: bool,
    /// The read side ended with an EOF (not an inspector's stop).
    eof: bool,
    /// Bytes read so far (what tells a half-closed pair its client is still sending).
    moved: u64,
    /// The inspector's farewell bytes (asked for once reads ended) and how many are written.
    tail: Option<([u8; FAREWELL_MAX], u8)>,
    tail_pos: u8,
    done: bool,
}

impl Pump {
    fn new(dir: Dir, size: usize) -> Pump {
        Pump {
            dir,
            size,
            buf: None,
            pos: 0,
            cap: 0,
            hold: None,
            need_flush: false,
            read_done: false,
            eof: false,
            moved: 0,
            tail: None,
            tail_pos: 0,
            done: false,
        }
    }

    fn release(&mut self) {
        if let Some(b) = self.buf.take() {
            give_buf(b);
        }
    }

    /// Moves bytes `r` → `w` until `r` has none ready (Pending), `r` ended (or `inspector`
    /// stopped it) and `w` was shut down (Ready(Ok)), or an error.
    // Kept whole (over 120 lines): one poll of one direction's state machine (read, inspect,
    // hold, write, flush, shut down), whose early returns read in the order they win; split, each
    // part would take the buffer, the inspector and the direction's state as arguments.
    fn poll_pump<R, W, I>(
        &mut self,
        cx: &mut Context<'_>,
        r: &mut R,
        w: &mut W,
        inspector: &mut I,
    ) -> Poll<io::Result<()>>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
        I: Inspector,
    {
        loop {
            if self.done {
                return Poll::Ready(Ok(()));
            }
            if let Some(h) = self.hold.filter(|h| *h == self.pos) {
                // Everything before the held bytes went: wait for the inspector.
                if inspector.stopped(self.dir) {
                    (self.cap, self.hold, self.read_done) = (h, None, true);
                    continue;
                }
                if inspector.poll_resume(cx).is_pending() {
                    if self.need_flush {
                        match Pin::new(&mut *w).poll_flush(cx) {
                            Poll::Ready(Ok(())) => self.need_flush = false,
                            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                            Poll::Pending => return Poll::Pending,
                        }
                    }
                    return Poll::Pending;
                }
                let Some(buf) = self.buf.as_mut() else {
                    return Poll::Ready(Err(io::Error::other("copy buffer lost")));
                };
                let held = self.cap - h;
                self.hold = None;
                match inspector.inspect(self.dir, &mut buf[h..self.cap]) {
                    Flow::All => {}
                    Flow::Stop(at) => {
                        self.read_done = true;
                        self.cap = h + at.min(held);
                    }
                    Flow::Hold(at) => self.hold = Some(h + at.min(held)),
                }
                continue;
            }
            if self.pos < self.cap {
                let Some(buf) = self.buf.as_ref() else {
                    return Poll::Ready(Err(io::Error::other("copy buffer lost")));
                };
                let end = self.hold.unwrap_or(self.cap);
                match Pin::new(&mut *w).poll_write(cx, &buf[self.pos..end]) {
                    Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                    Poll::Ready(Ok(n)) => {
                        self.pos += n;
                        continue;
                    }
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => return Poll::Pending,
                }
            }
            if !self.read_done {
                let mut t = [0; FAREWELL_MAX];
                let n = inspector.interject(self.dir, &mut t).min(FAREWELL_MAX);
                if n > 0 {
                    // Everything read so far is written: the inspector's bytes go next.
                    let size = self.size;
                    let buf = self.buf.get_or_insert_with(|| take_buf(size));
                    let n = n.min(buf.len());
                    buf[..n].copy_from_slice(&t[..n]);
                    (self.pos, self.cap, self.need_flush) = (0, n, true);
                    continue;
                }
            }
            if !self.read_done && inspector.stopped(self.dir) {
                self.read_done = true;
            }
            if self.read_done {
                let (tail, len) = *self.tail.get_or_insert_with(|| {
                    let mut t = [0; FAREWELL_MAX];
                    let n = inspector.farewell(self.dir, &mut t);
                    (t, n.min(FAREWELL_MAX) as u8)
                });
                if self.tail_pos < len {
                    match Pin::new(&mut *w)
                        .poll_write(cx, &tail[self.tail_pos as usize..len as usize])
                    {
                        Poll::Ready(Ok(0)) => {
                            return Poll::Ready(Err(io::ErrorKind::WriteZero.into()))
                        }
                        Poll::Ready(Ok(n)) => {
                            self.tail_pos += n as u8;
                            self.need_flush = true;
                            continue;
                        }
                        Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                        Poll::Pending => return Poll::Pending,
                    }
                }
                match Pin::new(&mut *w).poll_shutdown(cx) {
                    Poll::Ready(_) => {
                        self.done = true;
                        self.release();
                        return Poll::Ready(Ok(()));
                    }
                    Poll::Pending => return Poll::Pending,
                }
            }
            let size = self.size;
            let buf = self.buf.get_or_insert_with(|| take_buf(size));
            let mut rb = ReadBuf::new(buf);
            match Pin::new(&mut *r).poll_read(cx, &mut rb) {
                Poll::Ready(Ok(())) => {
                    let n = rb.filled().len();
                    if n == 0 {
                        self.read_done = true;
                        self.eof = true;
                    } else {
                        self.moved += n as u64;
                        self.pos = 0;
                        self.cap = match inspector.inspect(self.dir, &mut buf[..n]) {
                            Flow::All => n,
                            Flow::Stop(at) => {
                                self.read_done = true;
                                at.min(n)
                            }
                            Flow::Hold(at) => {
                                self.hold = Some(at.min(n));
                                n
                            }
                        };
                        self.need_flush = true;
                    }
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => {
                    if self.need_flush {
                        match Pin::new(&mut *w).poll_flush(cx) {
                            Poll::Ready(Ok(())) => self.need_flush = false,
                            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                            Poll::Pending => return Poll::Pending,
                        }
                    }
                    // Nothing to move: an idle direction holds no buffer.
                    self.release();
                    return Poll::Pending;
                }
            }
        }
    }
}

impl Drop for Pump {
    fn drop(&mut self) {
        self.release();
    }
}

/// Holds a pair in its listener's `halfClosedConnections` while it is half-closed.
struct HalfClosedGauge<'a>(&'a AtomicI64);

impl<'a> HalfClosedGauge<'a> {
    fn hold(g: &'a AtomicI64) -> Self {
        g.fetch_add(1, Ordering::Relaxed);
        HalfClosedGauge(g)
    }
}

impl Drop for HalfClosedGauge<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A pair whose upstream ended while its client's side is open: the gauge, the client's bytes
/// read when last seen, and the wait for `halfCloseTimeoutMs` of silence from the client.
struct HalfClosed<'a> {
    _gauge: HalfClosedGauge<'a>,
    seen: u64,
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

/// Copies both ways until both directions ended (EOF, shutdown, stopped by `inspector`), one
/// failed, the inspector gave up on an ending pair, or a half-closed pair's client stayed silent
/// for `halfCloseTimeoutMs` (module docs).
async fn copy_pair<C, U, I>(
    c: &mut C,
    u: &mut U,
    opts: &CopyOptions,
    half_closed: &AtomicI64,
    inspector: &mut I,
) -> io::Result<CopyEnd>
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
    I: Inspector,
{
    let mut up = Pump::new(Dir::ToUpstream, opts.client_buf);
    let mut down = Pump::new(Dir::ToClient, opts.upstream_buf);
    let mut half: Option<HalfClosed<'_>> = None;
    std::future::poll_fn(|cx| {
        let mut a = up.poll_pump(cx, c, u, inspector);
        let b = down.poll_pump(cx, u, c, inspector);
        // The upstream direction may have just stopped the client direction, which was waiting
        // for the client: let it see that now rather than at the client's next byte.
        if a.is_pending() && inspector.stopped(Dir::ToUpstream) {
            a = up.poll_pump(cx, c, u, inspector);
        }
        if inspector.poll_give_up(cx).is_ready() {
            return Poll::Ready(Ok(CopyEnd::Closed));
        }
        match (a, b) {
            (Poll::Ready(Err(e)), _) | (_, Poll::Ready(Err(e))) => Poll::Ready(Err(e)),
            (Poll::Ready(Ok(())), Poll::Ready(Ok(()))) => Poll::Ready(Ok(CopyEnd::Closed)),
            (Poll::Pending, Poll::Ready(Ok(()))) if down.eof => {
                // The upstream ended (its EOF passed on as a shutdown), the client has not.
                let h = half.get_or_insert_with(|| HalfClosed {
                    _gauge: HalfClosedGauge::hold(half_closed),
                    seen: up.moved,
                    timer: None,
                });
                let Some(limit) = opts.half_close_timeout else {
                    return Poll::Pending;
                };
                let timer = h
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
                if h.seen != up.moved {
                    h.seen = up.moved;
                    timer.as_mut().reset(tokio::time::Instant::now() + limit);
                }
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Ok(CopyEnd::HalfClosed)),
                    Poll::Pending => Poll::Pending,
                }
            }
            _ => Poll::Pending,
        }
    })
    .await
}

/// How a pair copies: timeouts and buffer sizes (docs/config.md: Proxy: listeners and routes).
#[derive(Debug, Clone, Copy)]
pub(crate) struct CopyOptions {
    /// No byte in either direction for this long closes the pair (`idleTimeoutMs`; `None`:
    /// `idleTimeoutMs: 0`, no idle bound).
    pub idle_timeout: Option<Duration>,
    /// A half-closed pair (the upstream ended, the client has not) whose client sent nothing for
    /// this long is closed (`halfCloseTimeoutMs`; `None` = no bound).
    pub half_close_timeout: Option<Duration>,
    /// Bytes read from the client per read (`clientReadBufferSize`).
    pub client_buf: usize,
    /// Bytes read from the upstream per read (`upstreamReadBufferSize`).
    pub upstream_buf: usize,
}

/// How a proxied pair ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum CopyEnd {
    /// Both sides closed (EOF both ways), or one side errored (reset).
    Closed,
    /// No byte either way for the idle timeout.
    Idle,
    /// The upstream ended and the client then sent nothing for `halfCloseTimeoutMs`.
    HalfClosed,
}

/// The counters a pair updates.
#[derive(Clone, Copy)]
pub(crate) struct PairCounters<'a> {
    /// Bytes read from the client (listener and route `bytesReceived`).
    pub client_bytes: [&'a AtomicU64; 2],
    /// Bytes read from the upstream and sent to the client (listener and route `bytesSent`).
    pub upstream_bytes: [&'a AtomicU64; 2],
    /// The listener's `halfClosedConnections` gauge.
    pub half_closed: &'a AtomicI64,
}

/// Copies `client` ⇄ `upstream` until both are closed or the pair is idle for
/// `opts.idle_timeout` (`None`: never idle-closed), updating `counters`, with every chunk shown
/// to `inspector` on its way, with `opts`' buffers and half-close bound.
pub(crate) async fn proxy_pair_inspected<C, U, I>(
    client: C,
    upstream: U,
    opts: &CopyOptions,
    counters: PairCounters<'_>,
    inspector: &mut I,
) -> CopyEnd
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
    I: Inspector,
{
    let last = AtomicU64::new(now_ms());
    let mut c = Metered::new(
        client,
        Meter {
            last_active_ms: &last,
            read_bytes: counters.client_bytes,
        },
    );
    let mut u = Metered::new(
        upstream,
        Meter {
            last_active_ms: &last,
            read_bytes: counters.upstream_bytes,
        },
    );
    let watchdog = async {
        let Some(idle) = opts.idle_timeout else {
            return std::future::pending().await;
        };
        let idle_ms = idle.as_millis() as u64;
        loop {
            let since = now_ms().saturating_sub(last.load(Ordering::Relaxed));
            if since >= idle_ms {
                return;
            }
            tokio::time::sleep(Duration::from_millis(idle_ms - since)).await;
        }
    };
    let pair = copy_pair(&mut c, &mut u, opts, counters.half_closed, inspector);
    tokio::select! {
        r = pair => r.unwrap_or(CopyEnd::Closed),
        _ = watchdog => CopyEnd::Idle,
    }
}
