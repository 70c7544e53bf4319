//! What Rampart writes to Redis: key names, the ban channel and the ban message.
//!
//! Keys (every one written with a PX TTL, never without):
//! - `<keyPrefix>{bans}:<kind>:<port|*>:<cidr>`: one live ban; the value is its [`BanMessage`]
//!   (JSON), the TTL its remaining time (a ban until `unblockIp` is written with
//!   [`PERMANENT_TTL_MS`] and refreshed by its origin every [`REFRESH_MS`]). Every ban key shares
//!   the hash tag `{bans}`, so on Redis Cluster they live on one shard and one `SCAN` there finds
//!   them all.
//! - `<keyPrefix>rl:{<port>:<client>}`: one client's `clusterRateLimit` TAT; the hash tag is the
//!   client, so clients spread over the shards and the script's one key is in its slot.
//!
//! Channel: `<keyPrefix>bans` carries every ban and unban as a [`BanMessage`].

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

/// PX of a ban with no TTL (refreshed by its origin while the ban stands), ms.
pub const PERMANENT_TTL_MS: u64 = 3_600_000;
/// How often the origin refreshes the keys of its bans with no TTL, ms.
pub const REFRESH_MS: u64 = 60_000;

/// What a ban is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BanKind {
    /// A client's penalty box (any reason: limits, HTTP/2 guard, a box the kernel extended).
    Box,
    /// A source the kernel banned on its own for SYN excess (`xdp.synPerSecond`); applied by
    /// the receivers as a box of the client.
    Syn,
    /// A prefix of the prefix tier in the penalty box.
    Prefix,
    /// A `blockIp` entry.
    Block,
}

impl BanKind {
    /// The key segment.
    pub fn as_str(self) -> &'static str {
        match self {
            BanKind::Box => "box",
            BanKind::Syn => "syn",
            BanKind::Prefix => "prefix",
            BanKind::Block => "block",
        }
    }
}

/// Ban or unban.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    /// Apply.
    Ban,
    /// Remove (`unblockIp`).
    Unban,
}

/// One message on the ban channel, also the value of a ban key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BanMessage {
    /// Ban or unban.
    pub op: Op,
    /// The origin node's `nodeId` (a node ignores its own messages: no echo).
    pub node: String,
    /// What kind of ban.
    pub kind: BanKind,
    /// The banned network, canonical (`192.0.2.7/32`, `2001:db8::/64`).
    pub net: IpNet,
    /// The listener port it applies to; `None`: every port.
    pub port: Option<u16>,
    /// Remaining time when sent, ms; `None`: until `unblockIp`.
    pub ttl_ms: Option<u64>,
    /// The `blockIp` reason text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Wall-clock time of sending, µs since the Unix epoch (propagation-delay metric only).
    pub sent_us: u64,
}

/// Key and channel names under one `keyPrefix`.
#[derive(Debug, Clone)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    /// Names under `prefix` (validated: no braces, no whitespace).
    pub fn new(prefix: &str) -> Keys {
        Keys {
            prefix: prefix.to_string(),
        }
    }

    /// The key of one ban.
    pub fn ban(&self, kind: BanKind, port: Option<u16>, net: &IpNet) -> String {
        let port = port.map_or_else(|| "*".to_string(), |p| p.to_string());
        format!("{}{{bans}}:{}:{port}:{net}", self.prefix, kind.as_str())
    }

    /// `SCAN MATCH` pattern of every ban key.
    pub fn ban_pattern(&self) -> String {
        format!("{}{{bans}}:*", glob_escape(&self.prefix))
    }

    /// `SCAN MATCH` pattern of every `blockIp` key of `net`, whatever its port.
    pub fn block_pattern(&self, net: &IpNet) -> String {
        glob_escape(&self.ban(BanKind::Block, None, net)).replacen(":\\*:", ":*:", 1)
    }

    /// The key of one client's `clusterRateLimit` TAT.
    pub fn rate(&self, port: u16, client: &str) -> String {
        format!("{}rl:{{{port}:{client}}}", self.prefix)
    }

    /// The ban channel.
    pub fn channel(&self) -> String {
        format!("{}bans", self.prefix)
    }
}

/// Escapes the glob metacharacters of `SCAN MATCH`.
fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Wall-clock µs since the Unix epoch.
pub fn wall_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_carry_hash_tags() {
        let k = Keys::new("rampart:");
        let net: IpNet = "192.0.2.7/32".parse().unwrap();
        assert_eq!(
            k.ban(BanKind::Box, Some(8443), &net),
            "rampart:{bans}:box:8443:192.0.2.7/32"
        );
        assert_eq!(
            k.ban(BanKind::Block, None, &net),
            "rampart:{bans}:block:*:192.0.2.7/32"
        );
        assert_eq!(k.block_pattern(&net), "rampart:{bans}:block:*:192.0.2.7/32");
        assert_eq!(k.ban_pattern(), "rampart:{bans}:*");
        assert_eq!(k.rate(8443, "10.0.0.1"), "rampart:rl:{8443:10.0.0.1}");
        assert_eq!(Keys::new("a*:").ban_pattern(), "a\\*:{bans}:*");
    }

    #[test]
    fn messages_round_trip() {
        let m = BanMessage {
            op: Op::Ban,
            node: "a:1".into(),
            kind: BanKind::Prefix,
            net: "2001:db8::/48".parse().unwrap(),
            port: None,
            ttl_ms: Some(5),
            note: None,
            sent_us: 7,
        };
        let j = serde_json::to_string(&m).unwrap();
        assert_eq!(
            j,
            r#"{"op":"ban","node":"a:1","kind":"prefix","net":"2001:db8::/48","port":null,"ttlMs":5,"sentUs":7}"#
        );
        assert_eq!(serde_json::from_str::<BanMessage>(&j).unwrap(), m);
    }
}
