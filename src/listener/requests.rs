//! The request hooks of a terminated HTTP/1.1 connection ([`RequestBudget`]) and the per-request
//! limits its follower applies ([`conn_limits`]), both from the listener's protection policy.
//! The connection path ([`super::conn`]) builds them for each connection of a route that carries
//! HTTP.

use crate::config::proxy::ListenerId;
use crate::protection::policy::ProtectionPolicy;
use crate::protection::{BlockReason, Mode, Verdict};
use crate::proxy::answers;
use crate::proxy::forward_headers::{Answer, AnswerReason, ConnLimits, RequestHooks};
use crate::shared::Shared;
use std::net::IpAddr;
use std::time::Duration;

/// `requestLimit` on one connection's requests: each request head asks the listener's engine
/// ([`crate::protection::Engine::request`]); over budget it is answered `429` with the
/// rate-limit fields ([`answers::too_many_requests`]) and the connection ends (reported
/// `request_rate_limited` by the connection path). In observe mode the first request over
/// budget of the connection is reported (observed) and every request goes on.
pub struct RequestBudget<'a> {
    shared: &'a Shared,
    li: ListenerId,
    ip: IpAddr,
    reported: bool,
}

impl<'a> RequestBudget<'a> {
    /// The budget of client `ip` on listener `li`.
    pub fn new(shared: &'a Shared, li: ListenerId, ip: IpAddr) -> Self {
        RequestBudget {
            shared,
            li,
            ip,
            reported: false,
        }
    }
}

impl RequestHooks for RequestBudget<'_> {
    fn request(&mut self, now_ns: u64) -> Result<(), Answer> {
        let engine = &self.shared.listener(self.li).engine;
        match engine.request(self.ip, now_ns) {
            Ok(()) => Ok(()),
            Err(l) if l.observed => {
                if !self.reported {
                    self.reported = true;
                    let v = Verdict {
                        reason: BlockReason::RequestRateLimited,
                        observed: true,
                    };
                    self.shared
                        .report_block(self.li, self.ip, v, None, ("", ""));
                }
                Ok(())
            }
            Err(l) => Err(Answer {
                bytes: answers::too_many_requests(l.retry_after_ns, l.limit, l.burst),
                reason: AnswerReason::RequestRateLimited,
            }),
        }
    }

    #[inline]
    fn responded(&mut self, _: u64) {}

    /// Only while the policy in force has `requestLimit` (one policy load per request).
    #[inline]
    fn active(&self) -> bool {
        self.shared.listener(self.li).engine.requests_limited()
    }
}

/// The `slowRequest` limits of one HTTP/1.1 connection under `policy`: every request head within
/// `headTimeoutMs` of its first byte, `keepAliveTimeoutMs` between requests,
/// `maxRequestsPerConnection`. In observe mode only the head deadline is watched (reported, not
/// enforced); without a policy nothing applies.
pub fn conn_limits(policy: Option<&ProtectionPolicy>) -> ConnLimits {
    let Some(p) = policy else {
        return ConnLimits::default();
    };
    let observe = p.mode() == Mode::Observe;
    let ns = |n: u64| Some(Duration::from_nanos(n));
    ConnLimits {
        head_timeout: ns(p.head_timeout_ns()),
        keep_alive_timeout: if observe {
            None
        } else {
            ns(p.keep_alive_timeout_ns())
        },
        max_requests: if observe {
            0
        } else {
            p.max_requests_per_connection()
        },
        observe,
    }
}
