//! TEMPORARY stand-in until the engine lands (replaced wholesale).
#![allow(missing_docs, dead_code, unused_variables)]
use crate::config::error::Issues;
use std::net::IpAddr;
use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BlockReason {
    CidrBlocked,
    DynamicBlocked,
    PenaltyBoxed,
    RateLimited,
    TooManyConnections,
    MaxConnections,
    NoSni,
    Ja3Blocked,
    Ja4Blocked,
    IncompleteHandshake,
    HandshakeTimeout,
    SlowHandshake,
    XdpDropped,
}
impl BlockReason {
    pub const ALL: [BlockReason; 13] = [
        Self::CidrBlocked,
        Self::DynamicBlocked,
        Self::PenaltyBoxed,
        Self::RateLimited,
        Self::TooManyConnections,
        Self::MaxConnections,
        Self::NoSni,
        Self::Ja3Blocked,
        Self::Ja4Blocked,
        Self::IncompleteHandshake,
        Self::HandshakeTimeout,
        Self::SlowHandshake,
        Self::XdpDropped,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            Self::CidrBlocked => "cidr_blocked",
            Self::DynamicBlocked => "dynamic_blocked",
            Self::PenaltyBoxed => "penalty_boxed",
            Self::RateLimited => "rate_limited",
            Self::TooManyConnections => "too_many_connections",
            Self::MaxConnections => "max_connections",
            Self::NoSni => "no_sni",
            Self::Ja3Blocked => "ja3_blocked",
            Self::Ja4Blocked => "ja4_blocked",
            Self::IncompleteHandshake => "incomplete_handshake",
            Self::HandshakeTimeout => "handshake_timeout",
            Self::SlowHandshake => "slow_handshake",
            Self::XdpDropped => "xdp_dropped",
        }
    }
}
#[derive(Debug)]
pub struct ProtectionPolicy {
    pub tls_handshake_timeout_ms: u64,
    pub min_bytes_per_second: u64,
}
pub fn parse_protection(
    v: &serde_json::Value,
    path: &str,
    issues: &mut Issues,
) -> Option<ProtectionPolicy> {
    Some(ProtectionPolicy {
        tls_handshake_timeout_ms: 10000,
        min_bytes_per_second: 0,
    })
}
#[derive(Default)]
pub struct DynamicBlocks;
impl DynamicBlocks {
    pub fn block(
        &self,
        cidr: &str,
        ttl_ms: Option<u64>,
        reason: Option<String>,
        port: Option<u16>,
        now_ns: u64,
    ) -> Result<(), String> {
        Ok(())
    }
    pub fn unblock(&self, cidr: &str, port: Option<u16>) -> Result<bool, String> {
        Ok(false)
    }
}
pub struct Engine;
pub struct HelloFacts<'a> {
    pub complete: bool,
    pub has_sni: bool,
    pub ja3: Option<&'a str>,
    pub ja4: Option<&'a str>,
}
#[derive(Clone, Copy, Debug)]
pub struct Verdict {
    pub reason: BlockReason,
    pub observed: bool,
}
pub struct ConnGuard;
pub struct PendingGuard;
pub struct Admission {
    pub verdict: Option<Verdict>,
    pub guard: Option<ConnGuard>,
}
#[derive(Default)]
pub struct BlockedView {
    pub rate_limited: Vec<BlockedEntry>,
    pub concurrency_limited: Vec<BlockedEntry>,
    pub cidr_blocklist: Vec<BlockedEntry>,
    pub penalty_boxed: Vec<BlockedEntry>,
    pub dynamic_blocklist: Vec<BlockedEntry>,
}
pub struct BlockedEntry {
    pub ip: String,
    pub reason: BlockReason,
    pub remaining_ms: Option<u64>,
}
impl Engine {
    pub fn new(port: u16, dynamic: Arc<DynamicBlocks>) -> Engine {
        Engine
    }
    pub fn set_policy(&self, p: Option<Arc<ProtectionPolicy>>, now_ns: u64) {}
    pub fn policy(&self) -> Option<Arc<ProtectionPolicy>> {
        None
    }
    pub fn admit(&self, ip: IpAddr, now_ns: u64) -> Admission {
        Admission {
            verdict: None,
            guard: Some(ConnGuard),
        }
    }
    pub fn check_hello(&self, ip: IpAddr, facts: &HelloFacts<'_>, now_ns: u64) -> Option<Verdict> {
        None
    }
    pub fn pending_handshake(&self, ip: IpAddr, now_ns: u64) -> Result<PendingGuard, Verdict> {
        Ok(PendingGuard)
    }
    pub fn blocked(&self, now_ns: u64) -> BlockedView {
        BlockedView::default()
    }
    pub fn tracked_ips(&self) -> usize {
        0
    }
    pub fn evict_tick(&self, now_ns: u64, budget: usize) -> usize {
        0
    }
}
