//! Bidirectional byte copy with half-close, byte counters and a true idle timeout.
//!
//! Both directions run through tokio's `copy_bidirectional` (an EOF on one side becomes a
//! `shutdown` of the other side's write half, and copying continues the other way). Each side is
//! wrapped in [`Metered`], which stamps the last-activity time (CLOCK_MONOTONIC ms) and adds the
//! bytes to the listener counters; a watchdog closes the pair once no byte moved in either
//! direction for `idle_timeout`.

use crate::clock;
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
/// bytes read from the upstream and sent to the client (listener `bytesSent`).
pub async fn proxy_pair<C, U>(
    client: C,
    upstream: U,
    idle_timeout: Duration,
    client_bytes: &AtomicU64,
    upstream_bytes: &AtomicU64,
) -> CopyEnd
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
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
        _ = tokio::io::copy_bidirectional(&mut c, &mut u) => CopyEnd::Closed,
        _ = watchdog => CopyEnd::Idle,
    }
}
