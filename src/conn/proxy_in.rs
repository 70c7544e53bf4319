//! The PROXY header a trusted load balancer sends first (`listeners[].acceptProxyProtocol`).
//!
//! The header is read with `MSG_PEEK` until [`parse_inbound`] has all of it, then exactly its
//! bytes are consumed, so the client's own first bytes (its ClientHello, or an HTTP request)
//! stay in the socket for the next phase, which peeks them as it would on a direct connection.
//! The whole header must arrive within `timeoutMs` of accept.

use super::peek::peek_now;
use crate::proxy::proxy_protocol::{parse_inbound, Inbound, MAX_INBOUND_HEADER_BYTES};
use std::io;
use std::net::SocketAddr;
use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Where a connection comes from once its header (if any) is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Origin {
    /// The client: the header's source, else the peer (canonical IP).
    pub client: SocketAddr,
    /// The address the client connected to: the header's destination, else `None` (the
    /// socket's own local address).
    pub local: Option<SocketAddr>,
}

/// Why a trusted peer's connection had no usable header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeaderFailure {
    /// The first bytes are not a PROXY v1 or v2 header.
    Invalid,
    /// The peer closed (or reset) before the header was complete.
    Closed,
    /// `timeoutMs` passed before the header was complete.
    TimedOut,
}

/// Reads the PROXY header of a connection from the trusted `peer` (canonical) by `deadline`.
/// v2 `LOCAL` and v1 `UNKNOWN` keep the peer as the client; TLVs are ignored.
pub(crate) async fn read_header(
    sock: &TcpStream,
    peer: SocketAddr,
    deadline: Instant,
) -> Result<Origin, HeaderFailure> {
    let mut buf = vec![0u8; 256];
    // Set once the peer's FIN (or a reset) was seen: what is buffered is all there will be.
    let mut fin = false;
    loop {
        match peek_now(sock, &mut buf) {
            Ok(0) => return Err(HeaderFailure::Closed),
            Ok(n) => match parse_inbound(&buf[..n]) {
                Inbound::Proxy {
                    len,
                    source,
                    destination,
                } => {
                    consume(sock, len, deadline).await?;
                    return Ok(Origin {
                        client: source,
                        local: Some(destination),
                    });
                }
                Inbound::Local { len } => {
                    consume(sock, len, deadline).await?;
                    return Ok(Origin {
                        client: peer,
                        local: None,
                    });
                }
                Inbound::Invalid => return Err(HeaderFailure::Invalid),
                Inbound::Partial if n == buf.len() => {
                    // The buffer is full: grow it (the parser caps the header's size).
                    let grown = (buf.len() * 4).min(MAX_INBOUND_HEADER_BYTES);
                    if grown == buf.len() {
                        return Err(HeaderFailure::Invalid);
                    }
                    buf.resize(grown, 0);
                    continue;
                }
                Inbound::Partial if fin => return Err(HeaderFailure::Closed),
                Inbound::Partial => {
                    // Clear readiness so the wait below sees only new bytes, then re-check once
                    // for bytes that arrived in between.
                    let _ = sock.try_io(Interest::READABLE, || {
                        Err::<(), _>(io::Error::from(io::ErrorKind::WouldBlock))
                    });
                    if matches!(peek_now(sock, &mut buf), Ok(m) if m != n) {
                        continue;
                    }
                }
            },
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(_) => return Err(HeaderFailure::Closed),
        }
        match tokio::time::timeout_at(deadline, sock.ready(Interest::READABLE)).await {
            Ok(Ok(r)) => fin = r.is_read_closed(),
            Ok(Err(_)) => return Err(HeaderFailure::Closed),
            Err(_) => return Err(HeaderFailure::TimedOut),
        }
    }
}

/// Reads and drops exactly `len` bytes (already peeked, so they are in the socket).
async fn consume(sock: &TcpStream, mut len: usize, deadline: Instant) -> Result<(), HeaderFailure> {
    let mut scratch = [0u8; 1024];
    while len > 0 {
        let want = len.min(scratch.len());
        match sock.try_read(&mut scratch[..want]) {
            Ok(0) => return Err(HeaderFailure::Closed),
            Ok(n) => len -= n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                match tokio::time::timeout_at(deadline, sock.readable()).await {
                    Ok(Ok(())) => {}
                    Ok(Err(_)) => return Err(HeaderFailure::Closed),
                    Err(_) => return Err(HeaderFailure::TimedOut),
                }
            }
            Err(_) => return Err(HeaderFailure::Closed),
        }
    }
    Ok(())
}
