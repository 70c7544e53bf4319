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

use crate::config::cluster::check_name;
use crate::config::update::MAX_REASON_CHARS;
use crate::config::value::MAX_DURATION_MS;
use crate::protection::policy::{CLIENT_V6_LENGTHS, PREFIX_V4_LENGTHS, PREFIX_V6_LENGTHS};
use ipnet::IpNet;
use serde::{Deserialize, Serialize};

/// PX of a ban with no TTL (refreshed by its origin while the ban stands), ms.
pub(crate) const PERMANENT_TTL_MS: u64 = 3_600_000;
/// How often the origin refreshes the keys of its bans with no TTL, ms.
pub(crate) const REFRESH_MS: u64 = 60_000;
/// Largest ban message (or ban key value) read from Redis, bytes: a valid one is at most ~1.5 KiB
/// (a 128-byte `node`, a 200-character `note` JSON-escaped); a larger one is refused unread.
pub(crate) const MAX_MESSAGE_BYTES: usize = 4096;

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
pub(crate) enum Op {
    /// Apply.
    Ban,
    /// Remove (`unblockIp`).
    Unban,
}

/// One message on the ban channel, also the value of a ban key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct BanMessage {
    /// Ban or unban.
    pub op: Op,
    /// The origin node's `nodeId` (a node ignores its own messages: no echo).
    pub node: String,
    /// What kind of ban.
    pub kind: BanKind,
    /// The banned network, canonical (`192.0.2.7/32`, `2001:db8::/64`): read with the CIDR rules
    /// of local input ([`crate::protection::cidr::parse_cidr`]) and only in its canonical text.
    #[serde(with = "canonical_net")]
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

impl BanMessage {
    /// Checks a message read from Redis (the ban channel or a ban key) as local input is checked:
    /// `node` a valid `nodeId` ([`check_name`]); `port` 1..=65535; per kind, a box or SYN ban is
    /// one client (IPv4 /32, IPv6 a client prefix: `ipv6PrefixLength`'s range) and a prefix ban a
    /// prefix of the prefix tier (`prefixLimit`'s length ranges), both with a TTL and no note; a
    /// block is what `blockIp` accepts (any canonical CIDR, a TTL or none, a note of at most
    /// [`MAX_REASON_CHARS`] characters); an unban is a block's (no TTL, no note); every TTL is
    /// 1..=[`MAX_DURATION_MS`] ms. `net` is already canonical (the deserializer's rule).
    /// Whether `node` is this node's own id is the caller's question. `Err`: why, for the
    /// operator.
    pub(crate) fn check(&self) -> Result<(), String> {
        check_name(&self.node).map_err(|e| format!("node {e}"))?;
        if self.port == Some(0) {
            return Err("port must be in [1, 65535], got 0".into());
        }
        let len = self.net.prefix_len();
        let lengths = match (self.op, self.kind, self.net) {
            (Op::Unban, BanKind::Block, _) | (Op::Ban, BanKind::Block, _) => None,
            (Op::Unban, kind, _) => {
                return Err(format!("an unban is of kind block, got {}", kind.as_str()))
            }
            (Op::Ban, BanKind::Box | BanKind::Syn, IpNet::V4(_)) => Some(32..=32),
            (Op::Ban, BanKind::Box | BanKind::Syn, IpNet::V6(_)) => Some(CLIENT_V6_LENGTHS),
            (Op::Ban, BanKind::Prefix, IpNet::V4(_)) => Some(PREFIX_V4_LENGTHS),
            (Op::Ban, BanKind::Prefix, IpNet::V6(_)) => Some(PREFIX_V6_LENGTHS),
        };
        if let Some(r) = lengths {
            if !r.contains(&len) {
                return Err(format!(
                    "a {} ban of {} must have a prefix length in [{}, {}], got {}",
                    self.kind.as_str(),
                    if self.net.addr().is_ipv4() {
                        "IPv4"
                    } else {
                        "IPv6"
                    },
                    r.start(),
                    r.end(),
                    self.net
                ));
            }
            if self.ttl_ms.is_none() {
                return Err(format!("a {} ban needs a TTL", self.kind.as_str()));
            }
        }
        if let Some(t) = self.ttl_ms {
            if self.op == Op::Unban {
                return Err("an unban has no TTL".into());
            }
            if !(1..=MAX_DURATION_MS).contains(&t) {
                return Err(format!("ttlMs must be in [1, 2^53-1], got {t}"));
            }
        }
        if let Some(n) = &self.note {
            if (self.op, self.kind) != (Op::Ban, BanKind::Block) {
                return Err(format!("a {} ban has no note", self.kind.as_str()));
            }
            let chars = n.chars().count();
            if chars > MAX_REASON_CHARS {
                return Err(format!(
                    "note must be at most {MAX_REASON_CHARS} characters, got {chars}"
                ));
            }
        }
        Ok(())
    }
}

/// `BanMessage::net` on the wire: the canonical CIDR text; reading goes through
/// [`crate::protection::cidr::parse_cidr`] and refuses any other spelling of the network
/// (host bits, a bare address, an IPv4-mapped form).
mod canonical_net {
    use crate::protection::cidr::parse_cidr;
    use ipnet::IpNet;
    use serde::{de::Error, Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(net: &IpNet, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(net)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<IpNet, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        let net = parse_cidr(&text).map_err(|e| D::Error::custom(format!("net {e}")))?;
        if net.to_string() != text {
            return Err(D::Error::custom(format!(
                "net must be written canonically ({net}), got {text:?}"
            )));
        }
        Ok(net)
    }
}

/// Key and channel names under one `keyPrefix`.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    prefix: String,
}

impl Keys {
    /// Names under `prefix` (validated: no braces, no whitespace).
    pub(crate) fn new(prefix: &str) -> Keys {
        Keys {
            prefix: prefix.to_string(),
        }
    }

    /// The key of one ban.
    pub(crate) fn ban(&self, kind: BanKind, port: Option<u16>, net: &IpNet) -> String {
        let port = port.map_or_else(|| "*".to_string(), |p| p.to_string());
        format!("{}{{bans}}:{}:{port}:{net}", self.prefix, kind.as_str())
    }

    /// `SCAN MATCH` pattern of every ban key.
    pub(crate) fn ban_pattern(&self) -> String {
        format!("{}{{bans}}:*", glob_escape(&self.prefix))
    }

    /// `SCAN MATCH` pattern of every `blockIp` key of `net`, whatever its port.
    pub(crate) fn block_pattern(&self, net: &IpNet) -> String {
        glob_escape(&self.ban(BanKind::Block, None, net)).replacen(":\\*:", ":*:", 1)
    }

    /// The key of one client's `clusterRateLimit` TAT.
    pub(crate) fn rate(&self, port: u16, client: &str) -> String {
        format!("{}rl:{{{port}:{client}}}", self.prefix)
    }

    /// The shared TLS session-ticket key set of the rotation period `rotation_s`.
    pub(crate) fn ticket_keys(&self, rotation_s: u64) -> String {
        format!("{}tls-ticket-keys:{rotation_s}", self.prefix)
    }

    /// The ban channel.
    pub(crate) fn channel(&self) -> String {
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
pub(crate) fn wall_us() -> u64 {
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

    // Kept whole (over 120 lines): a table of hostile messages, one case each.
    /// The checks a message read from Redis passes: each case below is what a local `blockIp`
    /// or box would refuse, and fails with the reason quoted.
    #[test]
    fn hostile_messages_are_refused_with_their_reason() {
        let read = |j: &str| -> Result<BanMessage, String> {
            let m: BanMessage = serde_json::from_str(j).map_err(|e| e.to_string())?;
            m.check().map(|()| m)
        };
        let msg = |kind: &str, net: &str, ttl: &str, extra: &str| {
            format!(
                r#"{{"op":"ban","node":"b:1","kind":"{kind}","net":"{net}","port":8443,"ttlMs":{ttl},"sentUs":1{extra}}}"#
            )
        };
        // Valid: each kind at its bounds.
        for ok in [
            msg("box", "192.0.2.7/32", "5000", ""),
            msg("box", "2001:db8:1:2::/64", "5000", ""),
            msg("syn", "2001:db8::1/128", "1", ""),
            msg("prefix", "198.51.0.0/16", "9007199254740991", ""),
            msg("prefix", "128.0.0.0/1", "5000", ""),
            msg("prefix", "2001:db8::/48", "5000", ""),
            msg("block", "0.0.0.0/0", "null", r#","note":"incident 42""#),
            msg(
                "block",
                "10.0.0.0/8",
                "5000",
                &format!(r#","note":"{}""#, "é".repeat(200)),
            ),
        ] {
            assert!(read(&ok).is_ok(), "{ok}: {:?}", read(&ok));
        }
        let unban = r#"{"op":"unban","node":"b:1","kind":"block","net":"10.0.0.0/8","port":null,"ttlMs":null,"sentUs":1}"#;
        assert!(read(unban).is_ok());
        let refused = |j: String, why: &str| {
            let e = read(&j).unwrap_err();
            assert!(e.contains(why), "{j}: {e:?} lacks {why:?}");
        };
        refused(
            msg("prefix", "0.0.0.0/0", "5000", ""),
            "prefix length in [1, 32], got 0.0.0.0/0",
        );
        refused(
            msg("prefix", "::/0", "5000", ""),
            "prefix length in [1, 128], got ::/0",
        );
        refused(
            msg("syn", "::/0", "5000", ""),
            "a syn ban of IPv6 must have a prefix length in [1, 128]",
        );
        refused(
            msg("box", "10.0.0.0/8", "5000", ""),
            "a box ban of IPv4 must have a prefix length in [32, 32]",
        );
        refused(
            msg("block", "10.0.0.1/8", "5000", ""),
            "host bits are set in \"10.0.0.1/8\"; did you mean 10.0.0.0/8?",
        );
        refused(
            msg("block", "10.0.0.1", "5000", ""),
            "net must be written canonically (10.0.0.1/32)",
        );
        refused(
            msg("block", "::ffff:10.0.0.1/128", "5000", ""),
            "net must be written canonically (10.0.0.1/32)",
        );
        refused(
            msg("block", "10.0.0.0/08", "5000", ""),
            "without leading zeros",
        );
        refused(
            msg("prefix", "10.0.0.0/8", "18446744073709551615", ""),
            "ttlMs must be in [1, 2^53-1], got 18446744073709551615",
        );
        refused(
            msg("block", "10.0.0.0/8", "9007199254740992", ""),
            "ttlMs must be in [1, 2^53-1]",
        );
        refused(
            msg("box", "192.0.2.7/32", "0", ""),
            "ttlMs must be in [1, 2^53-1], got 0",
        );
        refused(
            msg("box", "192.0.2.7/32", "null", ""),
            "a box ban needs a TTL",
        );
        refused(
            msg("box", "192.0.2.7/32", "5", r#","note":"x""#),
            "a box ban has no note",
        );
        refused(
            msg(
                "block",
                "10.0.0.0/8",
                "5",
                &format!(r#","note":"{}""#, "x".repeat(201)),
            ),
            "note must be at most 200 characters, got 201",
        );
        refused(msg("ban", "10.0.0.0/8", "5", ""), "unknown variant `ban`");
        refused(
            msg("box", "192.0.2.7/32", "5", "").replace("8443", "0"),
            "port must be in [1, 65535], got 0",
        );
        refused(
            msg("box", "192.0.2.7/32", "5", "").replace("8443", "65536"),
            "invalid value: integer `65536`",
        );
        refused(
            msg("box", "192.0.2.7/32", "5", "").replace("b:1", ""),
            "node must be 1 to 128 bytes",
        );
        refused(
            msg("box", "192.0.2.7/32", "5", "").replace("b:1", "a b"),
            "node must be 1 to 128 bytes",
        );
        refused(
            msg("box", "192.0.2.7/32", "5", "").replace("b:1", &"n".repeat(129)),
            "node must be 1 to 128 bytes",
        );
        refused(
            unban.replace("block", "box"),
            "an unban is of kind block, got box",
        );
        refused(
            unban.replace(r#""ttlMs":null"#, r#""ttlMs":5"#),
            "an unban has no TTL",
        );
        refused("{".into(), "EOF");
    }
}
