//! Upstream connections: TCP (with TCP_NODELAY) or Unix domain socket, under a connect timeout,
//! trying the route's upstreams in its failover order and falling over to the next on failure.

use crate::config::proxy::Upstream;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};

/// A connected upstream socket.
#[derive(Debug)]
pub(crate) enum UpstreamStream {
    /// TCP.
    Tcp(TcpStream),
    /// Unix domain socket.
    Unix(UnixStream),
}

/// Connects to one upstream within `timeout`.
pub(crate) async fn connect_one(up: &Upstream, timeout: Duration) -> io::Result<UpstreamStream> {
    let fut = async {
        match up {
            Upstream::Tcp { host, port } => {
                let s = TcpStream::connect((host.as_str(), *port)).await?;
                s.set_nodelay(true)?;
                Ok(UpstreamStream::Tcp(s))
            }
            Upstream::Uds { path } => Ok(UpstreamStream::Unix(UnixStream::connect(path).await?)),
        }
    };
    match tokio::time::timeout(timeout, fut).await {
        Ok(r) => r,
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("connect timed out after {} ms", timeout.as_millis()),
        )),
    }
}

/// Tries the upstreams `ups[i]` for each `i` of `order` in turn (a route's failover order, see
/// `CompiledRoute::failover`); returns the first that connects with its index, or the last
/// error annotated with the upstream it came from.
pub(crate) async fn connect(
    ups: &[Upstream],
    order: impl IntoIterator<Item = usize>,
    timeout: Duration,
) -> Result<(usize, UpstreamStream), (String, io::Error)> {
    let mut last = None;
    for at in order {
        let up = &ups[at];
        match connect_one(up, timeout).await {
            Ok(s) => return Ok((at, s)),
            Err(e) => last = Some((describe(up), e)),
        }
    }
    Err(last.unwrap_or_else(|| ("(none)".into(), io::Error::other("no upstream"))))
}

/// `host:port` or `unix:/path`, for error messages.
pub(crate) fn describe(up: &Upstream) -> String {
    match up {
        Upstream::Tcp { host, port } => format!("{host}:{port}"),
        Upstream::Uds { path } => format!("unix:{}", path.display()),
    }
}

impl AsyncRead for UpstreamStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpstreamStream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            UpstreamStream::Unix(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for UpstreamStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            UpstreamStream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            UpstreamStream::Unix(s) => Pin::new(s).poll_write(cx, buf),
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpstreamStream::Tcp(s) => Pin::new(s).poll_flush(cx),
            UpstreamStream::Unix(s) => Pin::new(s).poll_flush(cx),
        }
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpstreamStream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            UpstreamStream::Unix(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}
