//! `routes[].upstreams[]` (README: Config): TCP and unix-socket upstreams, what each speaks
//! (`protocol`, the ALPN split), and how a route balances over them.

use crate::config::error::Issues;
use crate::config::value::{self as v, field, join};
use serde_json::Value;
use std::path::PathBuf;

/// Default upstream connect timeout, in ms.
pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 5_000;

/// Default `ipAffinityTtlMs`: a client keeps its upstream while it reconnects within 1 hour.
pub const DEFAULT_IP_AFFINITY_TTL_MS: u64 = 3_600_000;

/// Where a route sends its connections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Upstream {
    /// TCP `host:port` (host may be a name, resolved at connect time).
    Tcp {
        /// Host name or IP literal.
        host: String,
        /// TCP port.
        port: u16,
    },
    /// Unix domain socket path.
    Uds {
        /// Socket path.
        path: PathBuf,
    },
}

/// What an upstream speaks (`upstreams[].protocol`): a client goes only to upstreams that speak
/// the application protocol it negotiated in ALPN (README: Upstream protocols).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AppProtocol {
    /// `'http/1.1'`: also what a client without ALPN speaks.
    Http1,
    /// `'h2'`: HTTP/2 with prior knowledge (h2c) to the upstream.
    H2,
}

impl AppProtocol {
    /// Every protocol, in [`AppProtocol::index`] order.
    pub const ALL: [AppProtocol; 2] = [AppProtocol::Http1, AppProtocol::H2];

    /// The ALPN protocol id (RFC 7301): `http/1.1` or `h2`.
    pub fn alpn_id(self) -> &'static [u8] {
        match self {
            AppProtocol::Http1 => b"http/1.1",
            AppProtocol::H2 => b"h2",
        }
    }

    /// The protocol a negotiated ALPN id stands for: `h2` is HTTP/2, anything else (no ALPN
    /// included) HTTP/1.1.
    pub fn of_alpn(id: Option<&[u8]>) -> AppProtocol {
        if id == Some(b"h2") {
            AppProtocol::H2
        } else {
            AppProtocol::Http1
        }
    }

    /// Position in [`AppProtocol::ALL`].
    pub const fn index(self) -> usize {
        self as usize
    }
}

/// How a route spreads new connections over its upstreams (`routes[].balance`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Balance {
    /// Each new connection starts at the next upstream in turn.
    RoundRobin,
    /// Each new connection starts at the upstream with the fewest open connections from this
    /// route (ties in turn): the default when every upstream is a Unix socket, as in Symphony.
    LeastConnections,
}

/// Parses one `upstreams[]` entry: where it is, and the `protocol` it speaks (`None`: any).
pub(super) fn parse_upstream(
    val: &Value,
    path: &str,
    issues: &mut Issues,
) -> Option<(Upstream, Option<AppProtocol>)> {
    let obj = v::object(val, path, issues)?;
    let before = issues.len();
    let protocol = field(obj, "protocol").and_then(|p| {
        match v::one_of(p, &join(path, "protocol"), &["h2", "http/1.1"], issues)? {
            "h2" => Some(AppProtocol::H2),
            _ => Some(AppProtocol::Http1),
        }
    });
    let up = parse_upstream_address(obj, path, issues)?;
    (issues.len() == before).then_some((up, protocol))
}

/// The address part of an `upstreams[]` entry (`kind` and `host`/`port` or `path`).
pub(super) fn parse_upstream_address(
    obj: &serde_json::Map<String, Value>,
    path: &str,
    issues: &mut Issues,
) -> Option<Upstream> {
    let kind = match field(obj, "kind") {
        Some(k) => v::one_of(k, &join(path, "kind"), &["tcp", "uds"], issues)?,
        None => {
            issues.push(join(path, "kind"), "is required ('tcp' or 'uds')");
            return None;
        }
    };
    if kind == "tcp" {
        v::reject_unknown(obj, &["kind", "host", "port", "protocol"], path, issues);
        let host = match field(obj, "host") {
            Some(h) => v::string(h, &join(path, "host"), issues).map(str::to_string),
            None => {
                issues.push(join(path, "host"), "is required for kind 'tcp'");
                None
            }
        };
        if let Some(h) = &host {
            if h.is_empty() || h.contains(char::is_whitespace) {
                issues.push(
                    join(path, "host"),
                    format!("must be a host name or IP, got {h:?}"),
                );
                return None;
            }
        }
        let port = match field(obj, "port") {
            Some(p) => v::number_in(p, &join(path, "port"), 1.0, 65535.0, true, issues),
            None => {
                issues.push(join(path, "port"), "is required for kind 'tcp'");
                None
            }
        };
        Some(Upstream::Tcp {
            host: host?,
            port: port? as u16,
        })
    } else {
        v::reject_unknown(obj, &["kind", "path", "protocol"], path, issues);
        match field(obj, "path") {
            Some(p) => {
                let s = v::string(p, &join(path, "path"), issues)?;
                if s.is_empty() || s.len() > 107 {
                    issues.push(
                        join(path, "path"),
                        format!("must be a socket path of 1..=107 bytes, got {s:?}"),
                    );
                    return None;
                }
                Some(Upstream::Uds { path: s.into() })
            }
            None => {
                issues.push(join(path, "path"), "is required for kind 'uds'");
                None
            }
        }
    }
}

/// Symphony's default: least connections for a set of Unix-socket upstreams (local workers),
/// round robin otherwise.
pub(super) fn default_balance(ups: &[Upstream]) -> Balance {
    if !ups.is_empty() && ups.iter().all(|u| matches!(u, Upstream::Uds { .. })) {
        Balance::LeastConnections
    } else {
        Balance::RoundRobin
    }
}
