//! `ProxyConfig.cluster` (docs/cluster.md): parsing and validation.
//!
//! `cluster: { redis: { url, keyPrefix='rampart:', connectTimeoutMs=1000, commandTimeoutMs=200 },
//! nodeId=hostname:pid, shareBans=true, shareTicketKeys=false, breaker: { failures=3, openMs=1000 } }`. Every problem is
//! reported with its full path (`cluster.redis.url`, ...), all at once.

use super::error::Issues;
use super::value::{self as v, field, join};
use serde_json::Value;

/// Default `cluster.redis.keyPrefix`.
pub const DEFAULT_KEY_PREFIX: &str = "rampart:";
/// Default `cluster.redis.connectTimeoutMs`.
pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 1_000;
/// Default `cluster.redis.commandTimeoutMs`.
pub const DEFAULT_COMMAND_TIMEOUT_MS: u64 = 200;
/// Default `cluster.breaker.failures`.
pub const DEFAULT_BREAKER_FAILURES: u32 = 3;
/// Default `cluster.breaker.openMs`.
pub const DEFAULT_BREAKER_OPEN_MS: u64 = 1_000;
/// Longest `keyPrefix` / `nodeId`, in bytes.
pub const MAX_NAME_BYTES: usize = 128;

/// `cluster.redis`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisConfig {
    /// `redis://[user:pass@]host:port[/db]` or `unix:///path` (checked by the `redis` crate).
    pub url: String,
    /// Prefix of every key and channel Rampart uses (no `{`, `}` or whitespace).
    pub key_prefix: String,
    /// Connect timeout, ms (1..=60000).
    pub connect_timeout_ms: u64,
    /// Timeout of one command, ms (1..=60000); a timed-out command counts as a breaker failure.
    pub command_timeout_ms: u64,
}

/// `cluster.breaker`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerConfig {
    /// Consecutive failed or timed-out commands that open the breaker (1..=1000).
    pub failures: u32,
    /// How long an open breaker keeps Redis unasked, ms (10..=600000).
    pub open_ms: u64,
}

/// The validated `cluster` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    /// Redis connection.
    pub redis: RedisConfig,
    /// This node's name in ban messages and `blockedIps({detail:true}).node` (`hostname:pid`).
    pub node_id: String,
    /// Publish local bans and apply the other nodes' (false: only `clusterRateLimit` is shared).
    pub share_bans: bool,
    /// `shareTicketKeys`: every node seals and opens TLS session tickets with the same rotating
    /// keys, kept in Redis (a session made on one node resumes on any; default false).
    pub share_ticket_keys: bool,
    /// Circuit breaker.
    pub breaker: BreakerConfig,
}

/// The default `nodeId`: `hostname:pid`.
pub fn default_node_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into());
    format!("{host}:{}", std::process::id())
}

/// Checks a key prefix or node id: 1..=[`MAX_NAME_BYTES`] bytes, no whitespace or control
/// character, no `{` or `}` (they would change the keys' hash tags). The same rule holds for the
/// `node` of a ban message read from Redis (`crate::cluster::message::BanMessage::check`).
/// `Err` is the message, quoting `s`.
pub fn check_name(s: &str) -> Result<(), String> {
    if s.is_empty()
        || s.len() > MAX_NAME_BYTES
        || s.chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '{' || c == '}')
    {
        let shown: String = s.chars().take(MAX_NAME_BYTES).collect();
        let cut = if shown.len() < s.len() { "..." } else { "" };
        return Err(format!(
            "must be 1 to {MAX_NAME_BYTES} bytes without whitespace, control characters, '{{' or '}}', got {shown:?}{cut}"
        ));
    }
    Ok(())
}

/// A key prefix or node id ([`check_name`]).
fn name(v: &Value, path: &str, issues: &mut Issues) -> Option<String> {
    let s = v::string(v, path, issues)?;
    if let Err(message) = check_name(s) {
        issues.push(path, message);
        return None;
    }
    Some(s.to_string())
}

fn ms(
    obj: &serde_json::Map<String, Value>,
    key: &str,
    path: &str,
    (min, max, default): (u64, u64, u64),
    issues: &mut Issues,
) -> u64 {
    match field(obj, key) {
        Some(x) => v::number_in(x, &join(path, key), min as f64, max as f64, true, issues)
            .map_or(default, |n| n as u64),
        None => default,
    }
}

/// Parses `cluster` found at `path`; pushes every problem to `issues`.
pub fn parse_cluster(val: &Value, path: &str, issues: &mut Issues) -> Option<ClusterConfig> {
    let before = issues.len();
    let obj = v::object(val, path, issues)?;
    v::reject_unknown(
        obj,
        &["redis", "nodeId", "shareBans", "shareTicketKeys", "breaker"],
        path,
        issues,
    );
    let mut redis = None;
    let rpath = join(path, "redis");
    match field(obj, "redis") {
        Some(r) => {
            if let Some(o) = v::object(r, &rpath, issues) {
                v::reject_unknown(
                    o,
                    &["url", "keyPrefix", "connectTimeoutMs", "commandTimeoutMs"],
                    &rpath,
                    issues,
                );
                let url_path = join(&rpath, "url");
                let url = match field(o, "url") {
                    Some(u) => {
                        v::string(u, &url_path, issues).and_then(|u| match redis::Client::open(u) {
                            Ok(_) => Some(u.to_string()),
                            Err(e) => {
                                issues.push(
                                    &url_path,
                                    format!("must be a redis:// or unix:// URL, got {u:?} ({e})"),
                                );
                                None
                            }
                        })
                    }
                    None => {
                        issues.push(&url_path, "is required (e.g. 'redis://127.0.0.1:6379')");
                        None
                    }
                };
                let key_prefix = match field(o, "keyPrefix") {
                    Some(k) => name(k, &join(&rpath, "keyPrefix"), issues),
                    None => Some(DEFAULT_KEY_PREFIX.to_string()),
                };
                let connect_timeout_ms = ms(
                    o,
                    "connectTimeoutMs",
                    &rpath,
                    (1, 60_000, DEFAULT_CONNECT_TIMEOUT_MS),
                    issues,
                );
                let command_timeout_ms = ms(
                    o,
                    "commandTimeoutMs",
                    &rpath,
                    (1, 60_000, DEFAULT_COMMAND_TIMEOUT_MS),
                    issues,
                );
                if let (Some(url), Some(key_prefix)) = (url, key_prefix) {
                    redis = Some(RedisConfig {
                        url,
                        key_prefix,
                        connect_timeout_ms,
                        command_timeout_ms,
                    });
                }
            }
        }
        None => issues.push(&rpath, "is required: { url }"),
    }
    let node_id = match field(obj, "nodeId") {
        Some(n) => name(n, &join(path, "nodeId"), issues),
        None => Some(default_node_id()),
    };
    let share_bans = field(obj, "shareBans")
        .and_then(|b| v::boolean(b, &join(path, "shareBans"), issues))
        .unwrap_or(true);
    let share_ticket_keys = field(obj, "shareTicketKeys")
        .and_then(|b| v::boolean(b, &join(path, "shareTicketKeys"), issues))
        .unwrap_or(false);
    let mut breaker = BreakerConfig {
        failures: DEFAULT_BREAKER_FAILURES,
        open_ms: DEFAULT_BREAKER_OPEN_MS,
    };
    if let Some(b) = field(obj, "breaker") {
        let bpath = join(path, "breaker");
        if let Some(o) = v::object(b, &bpath, issues) {
            v::reject_unknown(o, &["failures", "openMs"], &bpath, issues);
            breaker.failures = ms(
                o,
                "failures",
                &bpath,
                (1, 1_000, DEFAULT_BREAKER_FAILURES as u64),
                issues,
            ) as u32;
            breaker.open_ms = ms(
                o,
                "openMs",
                &bpath,
                (10, 600_000, DEFAULT_BREAKER_OPEN_MS),
                issues,
            );
        }
    }
    if issues.len() > before {
        return None;
    }
    Some(ClusterConfig {
        redis: redis?,
        node_id: node_id?,
        share_bans,
        share_ticket_keys,
        breaker,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn paths(v: Value) -> Vec<String> {
        let mut issues = Issues::default();
        assert!(parse_cluster(&v, "cluster", &mut issues).is_none());
        issues.0.into_iter().map(|i| i.path).collect()
    }

    #[test]
    fn defaults_fill_every_optional_field() {
        let mut issues = Issues::default();
        let c = parse_cluster(
            &json!({ "redis": { "url": "redis://127.0.0.1:6379" } }),
            "cluster",
            &mut issues,
        )
        .unwrap();
        assert!(issues.is_empty());
        assert_eq!(c.redis.key_prefix, "rampart:");
        assert_eq!(c.redis.connect_timeout_ms, 1000);
        assert_eq!(c.redis.command_timeout_ms, 200);
        assert_eq!(
            c.breaker,
            BreakerConfig {
                failures: 3,
                open_ms: 1000
            }
        );
        assert!(c.share_bans);
        assert!(!c.share_ticket_keys, "shareTicketKeys is opt-in");
        assert!(c.node_id.ends_with(&format!(":{}", std::process::id())));
    }

    #[test]
    fn every_bad_field_is_named_at_once() {
        let got = paths(json!({
            "redis": { "url": "http://x", "keyPrefix": "a{b}", "connectTimeoutMs": -1,
                       "commandTimeoutMs": "fast", "extra": 1 },
            "nodeId": "",
            "shareBans": "yes",
            "breaker": { "failures": 0, "openMs": 1.5 },
        }));
        assert_eq!(
            got,
            [
                "cluster.redis.extra",
                "cluster.redis.url",
                "cluster.redis.keyPrefix",
                "cluster.redis.connectTimeoutMs",
                "cluster.redis.commandTimeoutMs",
                "cluster.nodeId",
                "cluster.shareBans",
                "cluster.breaker.failures",
                "cluster.breaker.openMs",
            ]
        );
        assert_eq!(paths(json!({})), ["cluster.redis"]);
        assert_eq!(paths(json!({ "redis": {} })), ["cluster.redis.url"]);
    }

    #[test]
    fn cluster_rate_limit_is_validated_and_needs_cluster() {
        use crate::config::protection::policy_from_json;
        let p = policy_from_json(&json!({ "clusterRateLimit": { "connectionsPerSecond": 25 } }))
            .unwrap();
        let c = p.cluster_rate_limit().unwrap();
        assert_eq!((c.limit.burst, c.lease), (25, 3));
        let e = policy_from_json(&json!({
            "clusterRateLimit": { "connectionsPerSecond": -1, "burst": 2, "lease": 0, "x": 1 }
        }))
        .unwrap_err();
        let got: Vec<_> = e.issues.iter().map(|i| i.path.as_str()).collect();
        assert_eq!(
            got,
            [
                "protection.clusterRateLimit.x",
                "protection.clusterRateLimit.connectionsPerSecond",
                "protection.clusterRateLimit.lease",
            ]
        );
        let e = policy_from_json(&json!({
            "clusterRateLimit": { "connectionsPerSecond": 10, "burst": 4, "lease": 5 }
        }))
        .unwrap_err();
        assert_eq!(e.issues[0].path, "protection.clusterRateLimit.lease");
    }
}
