//! TCP keepalive on proxied sockets (`tcpKeepalive`, docs/config.md: Proxy: listeners and routes):
//! set with socket2 on every accepted client socket and every TCP upstream socket.

use crate::config::socket::Keepalive;
use socket2::{SockRef, TcpKeepalive};
use std::io;
use std::os::fd::AsFd;

/// Turns on `SO_KEEPALIVE` with `k`'s idle time, probe interval and probe count.
pub(crate) fn apply(sock: &impl AsFd, k: &Keepalive) -> io::Result<()> {
    let ka = TcpKeepalive::new()
        .with_time(k.idle)
        .with_interval(k.interval)
        .with_retries(k.retries);
    SockRef::from(sock).set_tcp_keepalive(&ka)
}
