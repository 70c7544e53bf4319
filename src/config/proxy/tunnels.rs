//! `routes[].tunnels` (docs/proxy.md: What Rampart refuses on forwarding routes): which `Upgrade`
//! protocols and whether `CONNECT` may turn a followed HTTP/1.x connection into a tunnel.

use crate::config::error::Issues;
use crate::config::value::{self as v, field, join};
use serde_json::Value;
use std::sync::Arc;

/// What may turn a followed HTTP/1.x connection into a tunnel (`routes[].tunnels`; docs/proxy.md:
/// What Rampart refuses on forwarding routes): the `Upgrade` protocols (RFC 9110 §7.8) a bodiless
/// upgrade request may ask for, and whether `CONNECT` (RFC 9110 §9.3.6) is forwarded. Anything
/// else keeps the connection HTTP/1.x, followed request by request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tunnels {
    /// `upgrade`: protocol names, lower case (default `['websocket']`; never `h2c`).
    pub upgrade: Arc<[String]>,
    /// `connect`: forward `CONNECT` (default false: Rampart answers it `405` and closes).
    pub connect: bool,
}

impl Default for Tunnels {
    fn default() -> Tunnels {
        Tunnels {
            upgrade: Arc::from(["websocket".to_string()]),
            connect: false,
        }
    }
}

impl Tunnels {
    /// Whether `protocol`, one element of an `Upgrade` field (`name[/version]`, RFC 9110 §7.8),
    /// names a protocol in `upgrade` (its name compared in any case, the version ignored).
    pub fn allows_upgrade(&self, protocol: &[u8]) -> bool {
        let name = protocol.split(|&b| b == b'/').next().unwrap_or(protocol);
        let name = name.trim_ascii();
        self.upgrade
            .iter()
            .any(|u| name.eq_ignore_ascii_case(u.as_bytes()))
    }
}

/// `tunnels`: `{ upgrade = ['websocket'], connect = false }`; `upgrade` holds HTTP tokens
/// (RFC 9110 §5.6.2), kept in lower case, without repeats (in any case) and never `h2c`.
pub(super) fn parse_tunnels(val: &Value, path: &str, issues: &mut Issues) -> Option<Tunnels> {
    let obj = v::object(val, path, issues)?;
    let before = issues.len();
    v::reject_unknown(obj, &["upgrade", "connect"], path, issues);
    let mut tunnels = Tunnels::default();
    if let Some(u) = field(obj, "upgrade") {
        let p = join(path, "upgrade");
        let mut names: Vec<String> = Vec::new();
        for (i, x) in v::array(u, &p, issues).into_iter().flatten().enumerate() {
            let pi = v::index(&p, i);
            let Some(s) = v::string(x, &pi, issues) else {
                continue;
            };
            let name = s.to_ascii_lowercase();
            if name.is_empty() || !name.bytes().all(is_tchar) {
                issues.push(
                    pi,
                    format!("must be an HTTP token (RFC 9110 §5.6.2), got {s:?}"),
                );
            } else if name == "h2c" {
                issues.push(
                    pi,
                    "h2c is never a tunnel: HTTP/2 reaches an upstream only over ALPN h2, through the HTTP/2 guard",
                );
            } else if names.contains(&name) {
                issues.push(pi, "repeats an earlier entry");
            } else {
                names.push(name);
            }
        }
        tunnels.upgrade = names.into();
    }
    if let Some(c) = field(obj, "connect") {
        tunnels.connect = v::boolean(c, &join(path, "connect"), issues).unwrap_or(false);
    }
    (issues.len() == before).then_some(tunnels)
}

/// Whether `b` is a `tchar` of an HTTP token (RFC 9110 §5.6.2).
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}
