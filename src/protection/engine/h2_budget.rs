//! The engine's side of the HTTP/2 guard's per-client budgets ([`crate::protection::h2_budget`]):
//! the handle a connection counts against, and the rapid-reset box.

use super::*;
use crate::http2::Violation;
use crate::protection::policy::Http2Policy;

impl Engine {
    /// The HTTP/2 budget of `ip`'s client over all its connections, for one new connection:
    /// the limits of the policy in force (`http2` × `http2.clientFactor`; the defaults without
    /// a policy). An allowlisted client gets a budget that admits everything.
    pub fn h2_client_budget(&self, ip: IpAddr) -> H2ClientBudget<'_> {
        let policy = self.installed.load().policy.clone();
        let http2 = policy
            .as_deref()
            .map_or_else(Http2Policy::default, |p| *p.http2());
        let key = self.offender_key(ip).map(|(key, _, _)| key);
        let limits = client_limits(&http2.guard, http2.client_factor);
        self.h2_budgets.client(key, limits)
    }

    /// Clients whose HTTP/2 budget was forgotten while it still held debt, because their set of
    /// the table was full of clients that did too (see the module doc).
    pub fn h2_budget_evictions(&self) -> u64 {
        self.h2_budgets.evictions()
    }

    /// An HTTP/2 guard violation `v` by `ip`'s client at `now_ns`: a rapid reset
    /// ([`Violation::RapidReset`]: streams reset before their answer faster than the budget)
    /// boxes the client at once, for the box duration [`Engine::record_h2_violation`] uses;
    /// any other violation is counted toward `boxAfterViolations` by it. Returns the box
    /// deadline (ns) when this violation boxed the client; `None` for an allowlisted one.
    pub fn record_h2_flood(&self, ip: IpAddr, v: Violation, now_ns: u64) -> Option<u64> {
        if v != Violation::RapidReset {
            return self.record_h2_violation(ip, now_ns);
        }
        let (_, _, duration_ns) = self.offender_key(ip)?;
        self.box_client(ip, duration_ns, now_ns)
    }
}

#[cfg(test)]
#[path = "h2_budget_tests.rs"]
mod tests;
