//! `'blocked'`, `'blockedSummary'`, `'error'`, `'ban'`, `'defense'`, `'overload'` and
//! `'suspended'` events; `'blocked'`, `'error'` and `'ban'` capped per second.
//!
//! At most `blockedEvents.maxPerSecond` `'blocked'` events are emitted per wall second (a fixed
//! one-second window on CLOCK_MONOTONIC, one atomic add per event); the excess is counted in
//! `eventsDropped` and aggregated (total, per reason, per IP in a sharded map capped at
//! [`MAX_SUMMARY_IPS`] distinct IPs) into a `'blockedSummary'` emitted by [`EventHub::flush_summary`]
//! for each second in which any event was dropped. `'error'` events share the same cap, counted
//! separately, and so do `'ban'` events (see [`ban`]: coalesced per ban and tick first). The sink is the napi thread-safe function; nothing here blocks.

pub mod ban;

use crate::config::ConfigIssue;
use crate::protection::BlockReason;
use dashmap::DashMap;
use serde::Serialize;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Distinct IPs remembered per summary second (the rest only count in `total`/`byReason`).
pub const MAX_SUMMARY_IPS: usize = 10_000;
/// IPs listed in a summary's `topIps`.
pub const TOP_IPS: usize = 10;

/// Where events go: `(event name, JSON payload)`.
pub type EventSink = Arc<dyn Fn(&'static str, String) + Send + Sync>;

/// Payload of `'blocked'` (docs/integrating.md: Events).
#[derive(Debug, Serialize)]
pub struct BlockedEvent<'a> {
    /// Client IP (IPv4 bare, IPv4-mapped normalised) or IPv6 address; formatted only when the
    /// event is actually emitted, so a capped flood costs no allocation per refusal.
    pub ip: IpAddr,
    /// Listener port.
    pub port: u16,
    /// Listener `host:port`.
    pub listener: &'a str,
    /// Block reason label.
    pub reason: &'static str,
    /// JA3 MD5, `''` when the ClientHello was not read.
    pub ja3: &'a str,
    /// JA4, `''` when the ClientHello was not read.
    pub ja4: &'a str,
    /// True in observe mode (the connection was admitted).
    pub observed: bool,
    /// Which limit, for reasons that have several (`h2_flood`: `rapid_reset`, `continuation`,
    /// ...); `''` for every other reason. Always present, like `ja3`/`ja4`.
    pub detail: &'static str,
    /// A refusal of `protection.shadow` (the connection was admitted); the field is present only
    /// then (`true`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub shadow: bool,
}

/// Payload of `'defense'`: defense mode turned on or off on one listener.
#[derive(Debug, Serialize)]
pub struct DefenseEvent<'a> {
    /// Listener port.
    pub port: u16,
    /// Listener `host:port`.
    pub listener: &'a str,
    /// On (true) or off.
    pub active: bool,
    /// New connections in the last second measured.
    pub rate: u64,
    /// The threshold that second was compared with (`max(minConnectionsPerSecond, mean + sigma ×
    /// deviation)`).
    pub threshold: f64,
}

/// Payload of `'overload'`: a route's upstream capacity became overloaded or recovered
/// (docs/protection.md: Upstream capacity).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OverloadEvent<'a> {
    /// The route's name (its `sni`, `''` for the default route).
    pub route: &'a str,
    /// Overloaded now (true) or recovered.
    pub on: bool,
    /// Requests in flight to the route's upstreams.
    pub in_flight: u32,
    /// The route's concurrency limit (`null` with `mode: 'off'`).
    pub limit: Option<u32>,
    /// Mean response-head latency of the last measured window, ms.
    pub latency_ms: f64,
    /// The no-load latency baseline, ms.
    pub baseline_ms: f64,
}

/// Payload of `'suspended'`: a connection of a suspended route is held until
/// `resolveConnection(id, route | null)` (docs/proxy.md: Suspended routes).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SuspendedEvent<'a> {
    /// Opaque id for `resolveConnection` (a decimal string, never reused by this proxy).
    pub id: String,
    /// The ClientHello's server_name as sent, `''` without one.
    pub sni: &'a str,
    /// Client IP (from a trusted PROXY header when one named it; IPv4-mapped normalised).
    pub peer_ip: String,
    /// Client port.
    pub peer_port: u16,
    /// Listener `host:port`.
    pub listener: &'a str,
}

/// Payload of `'error'`.
#[derive(Debug, Serialize)]
pub struct ErrorEvent<'a> {
    /// Error code (`upstream_connect_failed`, `handshake_failed`, ...).
    pub code: &'static str,
    /// Human-readable cause.
    pub message: String,
    /// Client IP, when there is one.
    pub ip: Option<String>,
    /// Listener port (`null` for proxy-wide errors such as `xdp_sync_failed`).
    pub port: Option<u16>,
    /// Listener `host:port` (`null` for proxy-wide errors).
    pub listener: Option<&'a str>,
    /// `resolve_route_invalid` only: every problem of the route as `{ path, message }` (paths
    /// under `route`), the same list the message spells out; left out of the JSON when empty.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub errors: &'a [ConfigIssue],
}

/// Payload of the `'error'` event of a route that failed to build (code `route_failed`,
/// docs/proxy.md: Route isolation): the fields of [`ErrorEvent`] (no client, no listener) and the
/// route's.
#[derive(Debug, Serialize)]
pub struct RouteFailedEvent<'a> {
    /// `route_failed`.
    pub code: &'static str,
    /// The route and every problem, in one line.
    pub message: String,
    /// Always `null` (no client).
    pub ip: Option<String>,
    /// Always `null` (routes serve every listener).
    pub port: Option<u16>,
    /// Always `null`.
    pub listener: Option<&'a str>,
    /// The route's `sni` as written (`null` when it was not a string).
    pub route: Option<&'a str>,
    /// Its index in `routes`.
    pub index: usize,
    /// Every problem: `{ path, message }`, paths under `routes[index]`.
    pub errors: &'a [ConfigIssue],
    /// Only its certificate failed and it serves the live route's last good one (`updateConfig`).
    #[serde(rename = "lastGoodCert")]
    pub last_good_cert: bool,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Summary {
    interval_ms: u64,
    total: u64,
    by_reason: std::collections::BTreeMap<&'static str, u64>,
    top_ips: Vec<TopIp>,
}

#[derive(Debug, Serialize)]
struct TopIp {
    ip: String,
    count: u64,
}

/// Event fan-out with the per-second cap.
pub struct EventHub {
    sink: EventSink,
    max_per_second: AtomicU64,
    window_sec: AtomicU64,
    window_count: AtomicU64,
    error_window_sec: AtomicU64,
    error_window_count: AtomicU64,
    ban_window_sec: AtomicU64,
    ban_window_count: AtomicU64,
    dropped_total: AtomicU64,
    pending_total: AtomicU64,
    pending_by_reason: [AtomicU64; BlockReason::ALL.len()],
    pending_ips: DashMap<IpAddr, u64>,
}

impl EventHub {
    /// New hub emitting into `sink`, at most `max_per_second` `'blocked'` events per second.
    pub fn new(sink: EventSink, max_per_second: u64) -> Self {
        EventHub {
            sink,
            max_per_second: AtomicU64::new(max_per_second),
            window_sec: AtomicU64::new(0),
            window_count: AtomicU64::new(0),
            error_window_sec: AtomicU64::new(0),
            error_window_count: AtomicU64::new(0),
            ban_window_sec: AtomicU64::new(0),
            ban_window_count: AtomicU64::new(0),
            dropped_total: AtomicU64::new(0),
            pending_total: AtomicU64::new(0),
            pending_by_reason: Default::default(),
            pending_ips: DashMap::new(),
        }
    }

    /// `eventsDropped`.
    pub fn dropped(&self) -> u64 {
        self.dropped_total.load(Ordering::Relaxed)
    }

    fn take_slot(&self, sec_cell: &AtomicU64, count_cell: &AtomicU64, now_ns: u64) -> bool {
        let sec = now_ns / crate::clock::NS_PER_SEC;
        let cur = sec_cell.load(Ordering::Relaxed);
        if cur != sec
            && sec_cell
                .compare_exchange(cur, sec, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            count_cell.store(0, Ordering::Relaxed);
        }
        count_cell.fetch_add(1, Ordering::Relaxed) < self.max_per_second.load(Ordering::Relaxed)
    }

    /// Emits (or counts) one `'blocked'` event.
    pub fn blocked(&self, ev: &BlockedEvent<'_>, ip: IpAddr, reason: BlockReason, now_ns: u64) {
        if self.take_slot(&self.window_sec, &self.window_count, now_ns) {
            if let Ok(json) = serde_json::to_string(ev) {
                (self.sink)("blocked", json);
            }
            return;
        }
        self.dropped_total.fetch_add(1, Ordering::Relaxed);
        self.pending_total.fetch_add(1, Ordering::Relaxed);
        self.pending_by_reason[reason.index()].fetch_add(1, Ordering::Relaxed);
        if let Some(mut c) = self.pending_ips.get_mut(&ip) {
            *c += 1;
        } else if self.pending_ips.len() < MAX_SUMMARY_IPS {
            *self.pending_ips.entry(ip).or_insert(0) += 1;
        }
    }

    /// Emits one `'ban'` event, or counts it in `eventsDropped` past `blockedEvents.maxPerSecond`
    /// `'ban'` events in this second.
    pub fn ban(&self, ev: &ban::BanEvent<'_>, now_ns: u64) {
        if self.take_slot(&self.ban_window_sec, &self.ban_window_count, now_ns) {
            if let Ok(json) = serde_json::to_string(ev) {
                (self.sink)("ban", json);
            }
        } else {
            self.dropped_total.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Emits one `'defense'` event (rare: never capped).
    pub fn defense(&self, ev: &DefenseEvent<'_>) {
        if let Ok(json) = serde_json::to_string(ev) {
            (self.sink)("defense", json);
        }
    }

    /// Emits one `'overload'` event (on/off transitions of a route: never capped).
    pub fn overload(&self, ev: &OverloadEvent<'_>) {
        if let Ok(json) = serde_json::to_string(ev) {
            (self.sink)("overload", json);
        }
    }

    /// Emits one `'suspended'` event. Never capped: a dropped one would leave its connection
    /// waiting for nothing; `listeners[].maxPendingSuspended` bounds how many are outstanding.
    pub fn suspended(&self, ev: &SuspendedEvent<'_>) {
        if let Ok(json) = serde_json::to_string(ev) {
            (self.sink)("suspended", json);
        }
    }

    /// Emits (or drops, past the cap) one `'error'` event.
    pub fn error(&self, ev: &ErrorEvent<'_>, now_ns: u64) {
        if self.take_slot(&self.error_window_sec, &self.error_window_count, now_ns) {
            if let Ok(json) = serde_json::to_string(ev) {
                (self.sink)("error", json);
            }
        }
    }

    /// Emits one `'error'` of a route that failed to build. Never capped: each is a tenant not
    /// served, emitted once per constructor or `updateConfig`.
    pub fn route_failed(&self, ev: &RouteFailedEvent<'_>) {
        if let Ok(json) = serde_json::to_string(ev) {
            (self.sink)("error", json);
        }
    }

    /// Emits `'blockedSummary'` when events were dropped since the last call (called once a
    /// second by a background task, `interval_ms` apart).
    pub fn flush_summary(&self, interval_ms: u64) {
        let total = self.pending_total.swap(0, Ordering::Relaxed);
        if total == 0 {
            return;
        }
        let by_reason = BlockReason::ALL
            .iter()
            .filter_map(|r| {
                let n = self.pending_by_reason[r.index()].swap(0, Ordering::Relaxed);
                (n > 0).then_some((r.as_str(), n))
            })
            .collect();
        let mut ips: Vec<(IpAddr, u64)> = self
            .pending_ips
            .iter()
            .map(|e| (*e.key(), *e.value()))
            .collect();
        self.pending_ips.clear();
        ips.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let top_ips = ips
            .into_iter()
            .take(TOP_IPS)
            .map(|(ip, count)| TopIp {
                ip: ip.to_string(),
                count,
            })
            .collect();
        let s = Summary {
            interval_ms,
            total,
            by_reason,
            top_ips,
        };
        if let Ok(json) = serde_json::to_string(&s) {
            (self.sink)("blockedSummary", json);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn cap_counts_excess_and_summarises_it() {
        let got: Arc<Mutex<Vec<(&'static str, String)>>> = Arc::default();
        let g = got.clone();
        let hub = EventHub::new(Arc::new(move |k, j| g.lock().unwrap().push((k, j))), 2);
        let ip: IpAddr = "127.0.0.2".parse().unwrap();
        let ev = BlockedEvent {
            ip,
            port: 1,
            listener: "x",
            reason: "rate_limited",
            ja3: "",
            ja4: "",
            observed: false,
            detail: "",
            shadow: false,
        };
        let t = 5_000_000_000;
        for _ in 0..5 {
            hub.blocked(&ev, ip, BlockReason::RateLimited, t);
        }
        assert_eq!(hub.dropped(), 3);
        hub.flush_summary(1000);
        hub.flush_summary(1000);
        // next second: the window resets
        hub.blocked(&ev, ip, BlockReason::RateLimited, t + 1_000_000_000);
        let got = got.lock().unwrap();
        let kinds: Vec<_> = got.iter().map(|g| g.0).collect();
        assert_eq!(kinds, ["blocked", "blocked", "blockedSummary", "blocked"]);
        assert_eq!(
            got[2].1,
            r#"{"intervalMs":1000,"total":3,"byReason":{"rate_limited":3},"topIps":[{"ip":"127.0.0.2","count":3}]}"#
        );
    }
}
