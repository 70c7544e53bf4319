//! Block reasons: why a connection was refused (the `'blocked'` event's `reason` and the metrics
//! label). The strings are the contract shared with Harper's TLS proxy and must not change.

use std::fmt;

/// Why a connection was refused (or, in observe mode, would have been).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BlockReason {
    /// The source matched the policy's `blocklist`.
    CidrBlocked,
    /// The source matched a `blockIp` entry.
    DynamicBlocked,
    /// The source is in the penalty box.
    PenaltyBoxed,
    /// The attempt exceeded `rateLimit` or `sustained` (GCRA).
    RateLimited,
    /// The source already holds `maxConcurrentPerIp` connections.
    TooManyConnections,
    /// The listener already holds `maxConnections` connections (listener-level, not this engine).
    MaxConnections,
    /// `requireSni` and the ClientHello had no server_name.
    NoSni,
    /// The ClientHello's JA3 is in `ja3Blocklist`.
    Ja3Blocked,
    /// The ClientHello's JA4 is in `ja4Blocklist`.
    Ja4Blocked,
    /// A fingerprint list is set and the ClientHello could not be fully read.
    IncompleteHandshake,
    /// The TLS handshake did not finish within `tlsHandshakeTimeoutMs`.
    HandshakeTimeout,
    /// Too many pending handshakes from the source, or it sent below `minBytesPerSecond`.
    SlowHandshake,
    /// The HTTP/2 guard closed a terminated h2 connection (`protection.http2`); the event's
    /// `detail` says which limit.
    H2Flood,
    /// The attempt exceeded the client's prefix's `prefixLimit.connectionsPerSecond`.
    PrefixRateLimited,
    /// The client's prefix already holds `prefixLimit.maxConcurrent` connections.
    PrefixTooManyConnections,
    /// The listener's budget (`listenerLimit`) is spent and the client is not known-good.
    ListenerOverloaded,
    /// The first request head did not arrive within `slowRequest.headTimeoutMs` of the handshake.
    SlowRequest,
    /// The attempt exceeded `clusterRateLimit` (the GCRA shared by every node through Redis).
    ClusterRateLimited,
    /// A request exceeded the client's (or its prefix's) `requestLimit`: answered `429` on
    /// HTTP/1.1 (the connection then closes).
    RequestRateLimited,
    /// The route's upstream is at its concurrency limit (`routes[].concurrency`) and the client
    /// is not known-good since before the overload: a new connection refused before TLS, an
    /// HTTP/1.1 request answered `503`, an HTTP/2 connection ended with GOAWAY NO_ERROR.
    UpstreamOverloaded,
}

impl BlockReason {
    /// Every reason, in the documented order.
    pub const ALL: [BlockReason; 20] = [
        BlockReason::CidrBlocked,
        BlockReason::DynamicBlocked,
        BlockReason::PenaltyBoxed,
        BlockReason::RateLimited,
        BlockReason::TooManyConnections,
        BlockReason::MaxConnections,
        BlockReason::NoSni,
        BlockReason::Ja3Blocked,
        BlockReason::Ja4Blocked,
        BlockReason::IncompleteHandshake,
        BlockReason::HandshakeTimeout,
        BlockReason::SlowHandshake,
        BlockReason::H2Flood,
        BlockReason::PrefixRateLimited,
        BlockReason::PrefixTooManyConnections,
        BlockReason::ListenerOverloaded,
        BlockReason::SlowRequest,
        BlockReason::ClusterRateLimited,
        BlockReason::RequestRateLimited,
        BlockReason::UpstreamOverloaded,
    ];

    /// The wire string (`"cidr_blocked"`, `"rate_limited"`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            BlockReason::CidrBlocked => "cidr_blocked",
            BlockReason::DynamicBlocked => "dynamic_blocked",
            BlockReason::PenaltyBoxed => "penalty_boxed",
            BlockReason::RateLimited => "rate_limited",
            BlockReason::TooManyConnections => "too_many_connections",
            BlockReason::MaxConnections => "max_connections",
            BlockReason::NoSni => "no_sni",
            BlockReason::Ja3Blocked => "ja3_blocked",
            BlockReason::Ja4Blocked => "ja4_blocked",
            BlockReason::IncompleteHandshake => "incomplete_handshake",
            BlockReason::HandshakeTimeout => "handshake_timeout",
            BlockReason::SlowHandshake => "slow_handshake",
            BlockReason::H2Flood => "h2_flood",
            BlockReason::PrefixRateLimited => "prefix_rate_limited",
            BlockReason::PrefixTooManyConnections => "prefix_too_many_connections",
            BlockReason::ListenerOverloaded => "listener_overloaded",
            BlockReason::SlowRequest => "slow_request",
            BlockReason::ClusterRateLimited => "cluster_rate_limited",
            BlockReason::RequestRateLimited => "request_rate_limited",
            BlockReason::UpstreamOverloaded => "upstream_overloaded",
        }
    }

    /// Position in [`BlockReason::ALL`] (for per-reason counter arrays).
    pub const fn index(self) -> usize {
        self as usize
    }
}

// `index()` is the discriminant: `ALL` must list the variants in declaration order.
const _: () = {
    let mut i = 0;
    while i < BlockReason::ALL.len() {
        assert!(BlockReason::ALL[i].index() == i);
        i += 1;
    }
};

impl fmt::Display for BlockReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
