//! Socket behaviour of proxied connections (docs/config.md: Proxy: listeners and routes;
//! Symphony-compatible `ProxyConfig` fields): `tcpKeepalive`, `halfCloseTimeoutMs`,
//! `readBufferSize`, `clientReadBufferSize`, `upstreamReadBufferSize`.
//!
//! Keepalive times are whole seconds (the kernel's `TCP_KEEPIDLE` / `TCP_KEEPINTVL` unit) given in
//! ms, within the kernel's ranges; a buffer size outside 512..=1048576 bytes is an error, never a
//! clamp.

use super::error::Issues;
use super::value::{self as v, field, join};
use serde_json::{Map, Value};
use std::time::Duration;

/// Default `tcpKeepalive.idleMs`: first probe after 5 minutes without traffic.
pub(crate) const DEFAULT_KEEPALIVE_IDLE_MS: u64 = 300_000;
/// Default `tcpKeepalive.intervalMs`: 30 s between probes.
pub(crate) const DEFAULT_KEEPALIVE_INTERVAL_MS: u64 = 30_000;
/// Default `tcpKeepalive.retries`: unanswered probes before the kernel drops the connection.
pub(crate) const DEFAULT_KEEPALIVE_RETRIES: u32 = 5;
/// Largest keepalive idle/interval the kernel takes (`MAX_TCP_KEEPIDLE`, 32767 s), in ms.
pub(crate) const MAX_KEEPALIVE_MS: u64 = 32_767_000;
/// Largest `retries` the kernel takes (`MAX_TCP_KEEPCNT`).
pub(crate) const MAX_KEEPALIVE_RETRIES: u32 = 127;
/// Default `halfCloseTimeoutMs`: a half-closed pair is closed 5 minutes after the first EOF.
pub(crate) const DEFAULT_HALF_CLOSE_TIMEOUT_MS: u64 = 300_000;
/// Smallest copy buffer, bytes.
pub(crate) const MIN_READ_BUFFER: u64 = 512;
/// Largest copy buffer, bytes (1 MiB).
pub(crate) const MAX_READ_BUFFER: u64 = 1_048_576;
/// Default client → upstream copy buffer (bytes read from the client per read).
pub(crate) const DEFAULT_CLIENT_READ_BUFFER: usize = 16 * 1024;
/// Default upstream → client copy buffer (bytes read from the upstream per read).
pub(crate) const DEFAULT_UPSTREAM_READ_BUFFER: usize = 64 * 1024;

/// TCP keepalive on client and TCP upstream sockets (`SO_KEEPALIVE`, `TCP_KEEPIDLE`,
/// `TCP_KEEPINTVL`, `TCP_KEEPCNT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keepalive {
    /// Time without traffic before the first probe.
    pub idle: Duration,
    /// Time between unanswered probes.
    pub interval: Duration,
    /// Unanswered probes before the connection is dropped.
    pub retries: u32,
}

/// The validated socket fields of a `ProxyConfig`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketOptions {
    /// Keepalive (`None`: `tcpKeepalive.enabled: false`).
    pub keepalive: Option<Keepalive>,
    /// Close a pair this long after one direction ended while the other still runs (`None`:
    /// `halfCloseTimeoutMs: 0`, wait for the idle timeout).
    pub half_close_timeout: Option<Duration>,
    /// Copy buffer for bytes read from the client, bytes.
    pub client_read_buffer: usize,
    /// Copy buffer for bytes read from the upstream, bytes.
    pub upstream_read_buffer: usize,
}

impl Default for SocketOptions {
    fn default() -> Self {
        SocketOptions {
            keepalive: Some(Keepalive {
                idle: Duration::from_millis(DEFAULT_KEEPALIVE_IDLE_MS),
                interval: Duration::from_millis(DEFAULT_KEEPALIVE_INTERVAL_MS),
                retries: DEFAULT_KEEPALIVE_RETRIES,
            }),
            half_close_timeout: Some(Duration::from_millis(DEFAULT_HALF_CLOSE_TIMEOUT_MS)),
            client_read_buffer: DEFAULT_CLIENT_READ_BUFFER,
            upstream_read_buffer: DEFAULT_UPSTREAM_READ_BUFFER,
        }
    }
}

/// The `ProxyConfig` keys this module reads.
pub(crate) const SOCKET_FIELDS: [&str; 5] = [
    "tcpKeepalive",
    "halfCloseTimeoutMs",
    "readBufferSize",
    "clientReadBufferSize",
    "upstreamReadBufferSize",
];

/// A keepalive time in ms: a whole number of seconds in `[1000, 32767000]`.
fn keepalive_ms(v: &Value, path: &str, default: u64, issues: &mut Issues) -> u64 {
    match v::number_in(v, path, 1000.0, MAX_KEEPALIVE_MS as f64, true, issues) {
        Some(n) if n % 1000.0 == 0.0 => n as u64,
        Some(n) => {
            issues.push(
                path,
                format!("must be a whole number of seconds (a multiple of 1000 ms: the kernel counts keepalive time in seconds), got {n}"),
            );
            default
        }
        None => default,
    }
}

fn parse_keepalive(v: &Value, issues: &mut Issues) -> Option<Keepalive> {
    let path = "tcpKeepalive";
    let o = v::object(v, path, issues)?;
    v::reject_unknown(
        o,
        &["enabled", "idleMs", "intervalMs", "retries"],
        path,
        issues,
    );
    let enabled = field(o, "enabled")
        .and_then(|b| v::boolean(b, &join(path, "enabled"), issues))
        .unwrap_or(true);
    let idle = field(o, "idleMs").map_or(DEFAULT_KEEPALIVE_IDLE_MS, |n| {
        keepalive_ms(n, &join(path, "idleMs"), DEFAULT_KEEPALIVE_IDLE_MS, issues)
    });
    let interval = field(o, "intervalMs").map_or(DEFAULT_KEEPALIVE_INTERVAL_MS, |n| {
        keepalive_ms(
            n,
            &join(path, "intervalMs"),
            DEFAULT_KEEPALIVE_INTERVAL_MS,
            issues,
        )
    });
    let retries = field(o, "retries")
        .and_then(|n| {
            v::number_in(
                n,
                &join(path, "retries"),
                1.0,
                MAX_KEEPALIVE_RETRIES as f64,
                true,
                issues,
            )
        })
        .map_or(DEFAULT_KEEPALIVE_RETRIES, |n| n as u32);
    enabled.then_some(Keepalive {
        idle: Duration::from_millis(idle),
        interval: Duration::from_millis(interval),
        retries,
    })
}

fn buffer_size(o: &Map<String, Value>, key: &str, issues: &mut Issues) -> Option<usize> {
    let n = field(o, key)?;
    v::number_in(
        n,
        key,
        MIN_READ_BUFFER as f64,
        MAX_READ_BUFFER as f64,
        true,
        issues,
    )
    .map(|n| n as usize)
}

/// Reads the socket fields of the top-level config object `o` (paths are top-level keys).
/// `readBufferSize` sets both copy buffers; `clientReadBufferSize` / `upstreamReadBufferSize`
/// override it for one direction.
pub(crate) fn parse_socket_options(o: &Map<String, Value>, issues: &mut Issues) -> SocketOptions {
    let mut s = SocketOptions::default();
    if let Some(k) = field(o, "tcpKeepalive") {
        s.keepalive = parse_keepalive(k, issues);
    }
    if let Some(n) = field(o, "halfCloseTimeoutMs") {
        if let Some(ms) = v::duration_ms(n, "halfCloseTimeoutMs", 0, issues) {
            s.half_close_timeout = (ms > 0).then(|| Duration::from_millis(ms));
        }
    }
    let both = buffer_size(o, "readBufferSize", issues);
    let client = buffer_size(o, "clientReadBufferSize", issues);
    let upstream = buffer_size(o, "upstreamReadBufferSize", issues);
    s.client_read_buffer = client.or(both).unwrap_or(DEFAULT_CLIENT_READ_BUFFER);
    s.upstream_read_buffer = upstream.or(both).unwrap_or(DEFAULT_UPSTREAM_READ_BUFFER);
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> (SocketOptions, Vec<(String, String)>) {
        let mut issues = Issues::default();
        let s = parse_socket_options(v.as_object().unwrap(), &mut issues);
        let got = issues.0.into_iter().map(|i| (i.path, i.message)).collect();
        (s, got)
    }

    #[test]
    fn defaults_and_overrides() {
        let (s, e) = parse(json!({}));
        assert!(e.is_empty());
        assert_eq!(s, SocketOptions::default());
        let (s, e) = parse(
            json!({"readBufferSize": 600, "upstreamReadBufferSize": 1048576,
            "halfCloseTimeoutMs": 0, "tcpKeepalive": {"idleMs": 7000, "retries": 3}}),
        );
        assert!(e.is_empty());
        assert_eq!(s.client_read_buffer, 600);
        assert_eq!(s.upstream_read_buffer, 1_048_576);
        assert_eq!(s.half_close_timeout, None);
        let k = s.keepalive.unwrap();
        assert_eq!(
            (k.idle.as_secs(), k.interval.as_secs(), k.retries),
            (7, 30, 3)
        );
        let (s, _) = parse(json!({"tcpKeepalive": {"enabled": false}}));
        assert_eq!(s.keepalive, None);
    }

    #[test]
    fn every_bad_field_is_named() {
        let (_, e) = parse(
            json!({"readBufferSize": 511, "clientReadBufferSize": 1048577,
            "halfCloseTimeoutMs": -1,
            "tcpKeepalive": {"idleMs": 1500, "intervalMs": 0, "retries": 128, "enabled": "yes"}}),
        );
        let paths: Vec<_> = e.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(
            paths,
            [
                "tcpKeepalive.enabled",
                "tcpKeepalive.idleMs",
                "tcpKeepalive.intervalMs",
                "tcpKeepalive.retries",
                "halfCloseTimeoutMs",
                "readBufferSize",
                "clientReadBufferSize",
            ]
        );
        assert_eq!(e[1].1, "must be a whole number of seconds (a multiple of 1000 ms: the kernel counts keepalive time in seconds), got 1500");
        assert_eq!(e[5].1, "must be an integer in [512, 1048576], got 511");
    }
}
