//! `routes[].upstreams[]` (docs/config.md: Proxy: listeners and routes): TCP and unix-socket
//! upstreams, what each speaks (`protocol`, the ALPN split), and how a route balances over them.

use crate::config::error::Issues;
use crate::config::value::{self as v, field, join};
use serde_json::Value;
use std::path::PathBuf;

/// Default upstream connect timeout, in ms.
pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 5_000;

/// Default `ipAffinityTtlMs`: a client keeps its upstream while it reconnects within 1 hour.
pub const DEFAULT_IP_AFFINITY_TTL_MS: u64 = 3_600_000;

/// Default `upstreams[].ipAffinityTtlMs` (Symphony's upstream-level affinity): 5 minutes.
pub const DEFAULT_UPSTREAM_IP_AFFINITY_TTL_MS: u64 = 300_000;

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
/// the application protocol it negotiated in ALPN (docs/proxy.md: Upstream protocols).
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

/// What an `upstreams[]` entry says about the upstream beyond its address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct UpstreamExtras {
    /// `protocol` as written: `None` when left out, `Some(None)` for `'any'`.
    pub protocol: Option<Option<AppProtocol>>,
    /// Symphony's upstream-level `ipAffinity` (`None`: left out).
    pub ip_affinity: Option<bool>,
    /// Symphony's upstream-level `ipAffinityTtlMs`, ms (`None`: left out).
    pub ip_affinity_ttl_ms: Option<u64>,
    /// `pid` / `tid`: the worker whose CPU time weights least-connections balancing.
    pub cpu: Option<CpuSource>,
}

/// The process (and thread) serving an upstream (`upstreams[].pid`, `tid`): its CPU time, read
/// from `/proc/<pid>/task/<tid>/stat` (or `/proc/<pid>/stat` without `tid`) every 250 ms, weights
/// least-connections balancing as Symphony does (docs/proxy.md: Upstream protocols).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CpuSource {
    /// Linux process id.
    pub pid: u32,
    /// Linux thread id within `pid` (`None`: the whole process).
    pub tid: Option<u32>,
}

/// The fields an `upstreams[]` entry may carry beside its address.
const EXTRA_FIELDS: [&str; 5] = ["protocol", "ipAffinity", "ipAffinityTtlMs", "pid", "tid"];

/// Parses one `upstreams[]` entry: where it is, and what it speaks and how it is balanced
/// ([`UpstreamExtras`]). A conflict between its fields (`tid` without `pid`,
/// `ipAffinityTtlMs` without `ipAffinity`) goes to `build` (the route is dropped, not the
/// config).
pub(super) fn parse_upstream(
    val: &Value,
    path: &str,
    issues: &mut Issues,
    build: &mut Issues,
) -> Option<(Upstream, UpstreamExtras)> {
    let obj = v::object(val, path, issues)?;
    let before = issues.len();
    let protocol = field(obj, "protocol").and_then(|p| {
        let allowed = ["h2", "http/1.1", "any"];
        match v::one_of(p, &join(path, "protocol"), &allowed, issues)? {
            "h2" => Some(Some(AppProtocol::H2)),
            "http/1.1" => Some(Some(AppProtocol::Http1)),
            _ => Some(None),
        }
    });
    let ip_affinity =
        field(obj, "ipAffinity").and_then(|b| v::boolean(b, &join(path, "ipAffinity"), issues));
    let ip_affinity_ttl_ms = field(obj, "ipAffinityTtlMs")
        .and_then(|n| v::duration_ms(n, &join(path, "ipAffinityTtlMs"), 1, issues));
    if ip_affinity_ttl_ms.is_some() && ip_affinity != Some(true) {
        build.push(join(path, "ipAffinityTtlMs"), "needs ipAffinity: true");
    }
    let id = |key: &str, issues: &mut Issues| {
        field(obj, key)
            .and_then(|n| v::number_in(n, &join(path, key), 1.0, i32::MAX as f64, true, issues))
            .map(|n| n as u32)
    };
    let (pid, tid) = (id("pid", issues), id("tid", issues));
    if tid.is_some() && field(obj, "pid").is_none() {
        build.push(
            join(path, "tid"),
            "needs pid (the process the thread belongs to)",
        );
    }
    let up = parse_upstream_address(obj, path, issues)?;
    let extras = UpstreamExtras {
        protocol,
        ip_affinity,
        ip_affinity_ttl_ms,
        cpu: pid.map(|pid| CpuSource { pid, tid }),
    };
    (issues.len() == before).then_some((up, extras))
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
        let known: Vec<&str> = ["kind", "host", "port"]
            .into_iter()
            .chain(EXTRA_FIELDS)
            .collect();
        v::reject_unknown(obj, &known, path, issues);
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
        let known: Vec<&str> = ["kind", "path"].into_iter().chain(EXTRA_FIELDS).collect();
        v::reject_unknown(obj, &known, path, issues);
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

/// The set-wide facts of a route's `upstreams[]`, folded from each entry's [`UpstreamExtras`].
#[derive(Debug, Clone, Default)]
pub(super) struct FoldedUpstreams {
    /// What each upstream serves (`None`: any protocol): its `protocol`; without one, `'http/1.1'`
    /// in a set where another upstream has `'h2'` or `'http/1.1'` (Symphony's split: an unmarked
    /// upstream beside marked ones is the HTTP/1 worker), else any (`http2` then decides what is
    /// offered). `'any'` keeps an upstream serving both in any set.
    pub protocols: Vec<Option<AppProtocol>>,
    /// Upstream-level `ipAffinity`: `None` when no upstream gives it, else the set's TTL in ms
    /// (`Some(None)`: `ipAffinity: false`).
    pub affinity: Option<Option<u64>>,
    /// `pid` / `tid` per upstream.
    pub cpu: Vec<Option<CpuSource>>,
    /// Index of the first upstream that gives `ipAffinity` (for messages).
    pub affinity_at: Option<usize>,
}

/// Folds the entries of one upstream set: the protocols each serves, the set's upstream-level
/// affinity (every entry that gives `ipAffinity` / `ipAffinityTtlMs` must give the same: Symphony
/// applies one affinity to the whole set; a difference goes to `build` at `paths[i]`), and the
/// CPU sources.
pub(super) fn fold_upstreams(
    extras: &[UpstreamExtras],
    paths: &[String],
    build: &mut Issues,
) -> FoldedUpstreams {
    let marked = extras.iter().any(|e| matches!(e.protocol, Some(Some(_))));
    let protocols = extras
        .iter()
        .map(|e| match e.protocol {
            Some(p) => p,
            None if marked => Some(AppProtocol::Http1),
            None => None,
        })
        .collect();
    let mut affinity = None;
    let mut affinity_at = None;
    for (i, e) in extras.iter().enumerate() {
        let Some(on) = e.ip_affinity else { continue };
        let this = on.then(|| {
            e.ip_affinity_ttl_ms
                .unwrap_or(DEFAULT_UPSTREAM_IP_AFFINITY_TTL_MS)
        });
        match (affinity, affinity_at) {
            (Some(prev), Some(j)) if prev != this => build.push(
                join(&paths[i], "ipAffinity"),
                format!(
                    "differs from {} (ipAffinity and ipAffinityTtlMs apply to the whole upstream set: give the same on each, or give them once on the route)",
                    paths[j]
                ),
            ),
            (Some(_), _) => {}
            _ => {
                affinity = Some(this);
                affinity_at = Some(i);
            }
        }
    }
    FoldedUpstreams {
        protocols,
        affinity,
        cpu: extras.iter().map(|e| e.cpu).collect(),
        affinity_at,
    }
}
