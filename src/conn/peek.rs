//! Peek: the ClientHello, read with `MSG_PEEK` (not consumed) until the parser has the whole
//! message, within the handshake deadline and `slowHandshake.minBytesPerSecond`.

use super::{Conn, Refusal};
use crate::metrics::ErrorReason;
use crate::protection::BlockReason;
use crate::tls::clienthello::{parse_client_hello, ClientHello, HelloParse, MAX_HELLO_BYTES};
use std::io;
use std::time::Duration;
use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio::time::Instant;

/// A hello growing by fewer bytes than this per peek is "dribbling" ...
pub(super) const DRIBBLE_BYTES: usize = 512;
/// ... and is parsed again only after this pause.
pub(super) const DRIBBLE_PAUSE: Duration = Duration::from_millis(2);

enum Peeked {
    Hello(Box<ClientHello>),
    NotTls,
    /// The client closed (or reset) after sending part of a hello.
    Closed,
    /// The client closed (or reset) without sending a byte: a TCP health check, a port scan.
    Empty,
    TimedOut,
    TooSlow,
}

/// How a client that closed after `seen` bytes of its hello ends the peek.
fn closed_after(seen: usize) -> Peeked {
    if seen == 0 {
        Peeked::Empty
    } else {
        Peeked::Closed
    }
}

/// One `recv(MSG_PEEK)` of what the socket holds now (`WouldBlock` when nothing).
pub(super) fn peek_now(sock: &TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    sock.try_io(Interest::READABLE, || {
        // SAFETY: `buf` is valid for writes of `buf.len()` bytes; the fd is owned by `sock`.
        let n = unsafe {
            libc::recv(
                std::os::fd::AsRawFd::as_raw_fd(sock),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_PEEK,
            )
        };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    })
}

/// Peeks until a whole ClientHello is buffered in the socket, the client closes, the deadline
/// passes, or the client is slower than `min_bps` bytes/s (after 1 s).
async fn peek_hello(sock: &TcpStream, deadline: Instant, min_bps: u64) -> Peeked {
    let start = Instant::now();
    let mut buf = vec![0u8; 2048];
    let mut seen = 0usize;
    loop {
        match peek_now(sock, &mut buf) {
            Ok(0) => return closed_after(seen),
            Ok(n) => {
                if n != seen {
                    let grew = n - seen.min(n);
                    seen = n;
                    match parse_client_hello(&buf[..n]) {
                        HelloParse::Complete(h) => return Peeked::Hello(Box::new(h)),
                        HelloParse::NotTls(_) | HelloParse::Malformed(_) => return Peeked::NotTls,
                        HelloParse::Incomplete => {
                            if n == buf.len() {
                                if buf.len() >= MAX_HELLO_BYTES + 5 {
                                    return Peeked::NotTls;
                                }
                                let grown = (buf.len() * 2).min(MAX_HELLO_BYTES + 5);
                                buf.resize(grown, 0);
                                continue;
                            }
                            if grew < DRIBBLE_BYTES {
                                // A hello trickling in tiny pieces: let the kernel coalesce
                                // before parsing again, so a dribbling client costs O(timeout /
                                // pause) parses instead of one per byte.
                                let pause = (Instant::now() + DRIBBLE_PAUSE).min(deadline);
                                tokio::time::sleep_until(pause).await;
                                continue;
                            }
                        }
                    }
                }
                // Clear readiness so the next wait sees only new data, then re-check once to
                // close the race with data that arrived in between.
                let _ = sock.try_io(Interest::READABLE, || {
                    Err::<(), _>(io::Error::from(io::ErrorKind::WouldBlock))
                });
                if let Ok(n2) = peek_now(sock, &mut buf) {
                    if n2 != seen {
                        continue;
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(_) => return closed_after(seen),
        }
        let mut wake = deadline;
        let mut slow_check = false;
        if min_bps > 0 {
            // Fail once the average rate since accept falls below min_bps (1 s grace).
            let allowed = Duration::from_secs_f64((seen as f64 / min_bps as f64).max(1.0));
            let t = start + allowed;
            if t < wake {
                wake = t;
                slow_check = true;
            }
        }
        if Instant::now() >= deadline {
            return Peeked::TimedOut;
        }
        match tokio::time::timeout_at(wake, sock.ready(Interest::READABLE)).await {
            Ok(Ok(r)) => {
                if r.is_read_closed() {
                    // FIN (or reset): whatever is buffered is all there will be.
                    return match peek_now(sock, &mut buf) {
                        Ok(n) if n != seen && n > 0 => match parse_client_hello(&buf[..n]) {
                            HelloParse::Complete(h) => Peeked::Hello(Box::new(h)),
                            HelloParse::Incomplete => Peeked::Closed,
                            _ => Peeked::NotTls,
                        },
                        _ => closed_after(seen),
                    };
                }
            }
            Ok(Err(_)) => return closed_after(seen),
            Err(_) => {
                return if slow_check {
                    Peeked::TooSlow
                } else {
                    Peeked::TimedOut
                }
            }
        }
    }
}

impl Conn<'_> {
    /// Phase 1b: the ClientHello peek within the handshake deadline. A client that closes
    /// without sending a byte (a TCP health check) is `client_closed`, before any hello check:
    /// with no hello there is nothing to judge, whatever lists or `requireSni` are set.
    pub(super) async fn peek(
        &mut self,
        sock: &TcpStream,
        deadline: Instant,
        min_bps: u64,
    ) -> Result<bool, Refusal> {
        let closed = match peek_hello(sock, deadline, min_bps).await {
            Peeked::Hello(h) => {
                self.hello = Some(h);
                false
            }
            Peeked::TimedOut => return Err(Refusal::Blocked(BlockReason::HandshakeTimeout)),
            Peeked::TooSlow => return Err(Refusal::Blocked(BlockReason::SlowHandshake)),
            Peeked::Closed => true,
            Peeked::Empty => return Err(Refusal::Failed(ErrorReason::ClientClosed, None)),
            Peeked::NotTls => false,
        };
        Ok(closed)
    }
}
