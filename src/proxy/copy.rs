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
//! direction for `idle_timeout`.

use crate::clock;
use std::cell::RefCell;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Counters a metered stream updates.
pub struct Meter<'a> {
    /// Last activity, CLOCK_MONOTONIC ms.
    pub last_active_ms: &'a AtomicU64,
    /// Bytes read from this side.
    pub read_bytes: &'a AtomicU64,
}

/// A stream wrapper that records activity and bytes read.
pub struct Metered<'a, S> {
    inner: S,
    meter: Meter<'a>,
}

impl<'a, S> Metered<'a, S> {
    /// Wraps `inner`.
    pub fn new(inner: S, meter: Meter<'a>) -> Self {
        Metered { inner, meter }
    }
}

fn now_ms() -> u64 {
    clock::now_ns() / 1_000_000
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
            this.meter.read_bytes.fetch_add(n as u64, Ordering::Relaxed);
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

/// Copy buffer for client → upstream bytes.
pub const CLIENT_TO_UPSTREAM_BUF: usize = 16 * 1024;
/// Copy buffer for upstream → client bytes.
pub const UPSTREAM_TO_CLIENT_BUF: usize = 64 * 1024;
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
    /// Some byte was read from this direction's source.
    moved: bool,
    size: usize,
    buf: Option<Box<[u8]>>,
    pos: usize,
    cap: usize,
    need_flush: bool,
    read_done: bool,
    done: bool,
}

impl Pump {
    fn new(size: usize) -> Pump {
        Pump {
            moved: false,
            size,
            buf: None,
            pos: 0,
            cap: 0,
            need_flush: false,
            read_done: false,
            done: false,
        }
    }

    fn release(&mut self) {
        if let Some(b) = self.buf.take() {
            give_buf(b);
        }
    }

    /// Moves bytes `r` → `w` until `r` has none ready (Pending), `r` ended and `w` was shut down
    /// (Ready(Ok)), or an error.
    fn poll_pump<R, W>(
        &mut self,
        cx: &mut Context<'_>,
        r: &mut R,
        w: &mut W,
    ) -> Poll<io::Result<()>>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        loop {
            if self.done {
                return Poll::Ready(Ok(()));
            }
            if self.pos < self.cap {
                let Some(buf) = self.buf.as_ref() else {
                    return Poll::Ready(Err(io::Error::other("copy buffer lost")));
                };
                match Pin::new(&mut *w).poll_write(cx, &buf[self.pos..self.cap]) {
                    Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                    Poll::Ready(Ok(n)) => {
                        self.pos += n;
                        continue;
                    }
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => return Poll::Pending,
                }
            }
            if self.read_done {
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
                    } else {
                        self.moved = true;
                        self.pos = 0;
                        self.cap = n;
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

/// Called once, as soon as bytes have moved both ways: the known-good hook of the connection
/// path. `client_sent`: the client already sent bytes before the pair started (a request head
/// Rampart buffered and forwarded), so an upstream byte alone completes the exchange.
pub struct OnExchange<F: FnOnce()> {
    /// The client's bytes were already forwarded.
    pub client_sent: bool,
    /// The hook.
    pub then: F,
}

/// Copies both ways until both directions ended (EOF, shutdown) or one failed; runs `hook` once
/// bytes moved both ways.
async fn copy_pair<C, U, F>(c: &mut C, u: &mut U, hook: Option<OnExchange<F>>) -> io::Result<()>
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
    F: FnOnce(),
{
    let mut up = Pump::new(CLIENT_TO_UPSTREAM_BUF);
    let mut down = Pump::new(UPSTREAM_TO_CLIENT_BUF);
    let mut hook = hook;
    if let Some(h) = &hook {
        up.moved = h.client_sent;
    }
    std::future::poll_fn(|cx| {
        let a = up.poll_pump(cx, c, u);
        let b = down.poll_pump(cx, u, c);
        if up.moved && down.moved {
            if let Some(h) = hook.take() {
                (h.then)();
            }
        }
        match (a, b) {
            (Poll::Ready(Err(e)), _) | (_, Poll::Ready(Err(e))) => Poll::Ready(Err(e)),
            (Poll::Ready(Ok(())), Poll::Ready(Ok(()))) => Poll::Ready(Ok(())),
            _ => Poll::Pending,
        }
    })
    .await
}

/// How a proxied pair ended.
#[derive(Debug, PartialEq, Eq)]
pub enum CopyEnd {
    /// Both sides closed (EOF both ways), or one side errored (reset).
    Closed,
    /// No byte either way for the idle timeout.
    Idle,
}

/// Copies `client` ⇄ `upstream` until both are closed or the pair is idle for `idle_timeout`.
/// `client_bytes` counts bytes read from the client (listener `bytesReceived`), `upstream_bytes`
/// bytes read from the upstream and sent to the client (listener `bytesSent`); `hook` runs once
/// bytes have moved both ways.
pub async fn proxy_pair<C, U, F>(
    client: C,
    upstream: U,
    idle_timeout: Duration,
    client_bytes: &AtomicU64,
    upstream_bytes: &AtomicU64,
    hook: Option<OnExchange<F>>,
) -> CopyEnd
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
    F: FnOnce(),
{
    let last = AtomicU64::new(now_ms());
    let mut c = Metered::new(
        client,
        Meter {
            last_active_ms: &last,
            read_bytes: client_bytes,
        },
    );
    let mut u = Metered::new(
        upstream,
        Meter {
            last_active_ms: &last,
            read_bytes: upstream_bytes,
        },
    );
    let idle_ms = idle_timeout.as_millis() as u64;
    let watchdog = async {
        loop {
            let since = now_ms().saturating_sub(last.load(Ordering::Relaxed));
            if since >= idle_ms {
                return;
            }
            tokio::time::sleep(Duration::from_millis(idle_ms - since)).await;
        }
    };
    tokio::select! {
        _ = copy_pair(&mut c, &mut u, hook) => CopyEnd::Closed,
        _ = watchdog => CopyEnd::Idle,
    }
}
