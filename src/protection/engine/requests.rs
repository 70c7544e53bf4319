//! `requestLimit` ([`Engine::request`]): a GCRA on each client's HTTP requests over all its
//! connections, and optionally on each prefix's, decided when a request is about to reach the
//! upstream (an HTTP/1.1 request head, an HTTP/2 stream opened).
//!
//! The client's TAT is the `tat_request` word of its standing, its prefix's the same word of the
//! prefix-tier entry; both are decided in one critical section in the documented lock order
//! (the client's shard lock, the prefix's taken inside it), and checked before either is debited,
//! so a request refused by the prefix consumes nothing of the client's budget, and one refused by
//! the client never reaches the prefix. No allocation once the tables are warm; without
//! `requestLimit` a request costs one policy load and one branch.

use super::{Engine, RequestLimited, RequestScope, Tier};
use crate::protection::key::IpKey;
use crate::protection::policy::Mode;
use std::net::IpAddr;
use std::sync::atomic::Ordering;

impl Engine {
    /// Whether the policy in force has `requestLimit` (one policy load): the connection path
    /// asks [`Engine::request`] only then.
    #[inline]
    pub fn requests_limited(&self) -> bool {
        self.installed
            .load()
            .policy
            .as_deref()
            .is_some_and(|p| p.request_limit().is_some())
    }

    /// One request of `ip` at `now_ns` (CLOCK_MONOTONIC ns) against `requestLimit`: `Ok` (and
    /// debited on the client and its prefix) or the budget it exceeded (nothing debited). `Ok`
    /// without a policy or `requestLimit`, for allowlisted clients, and for a client the table
    /// cannot track (fail-open, as admission; a prefix that cannot be tracked is skipped). In observe mode the same decision, with
    /// [`RequestLimited::observed`].
    pub fn request(&self, ip: IpAddr, now_ns: u64) -> Result<(), RequestLimited> {
        let inst = self.installed.load();
        let Some(p) = inst.policy.as_deref() else {
            return Ok(());
        };
        let Some(rl) = p.request_limit() else {
            return Ok(());
        };
        let ip = ip.to_canonical();
        if p.allowlist().contains(ip) {
            return Ok(());
        }
        let observed = p.mode() == Mode::Observe;
        let epoch = self.epoch.load(Ordering::Acquire);
        let ctx = self.ctx(&inst, p, now_ns, epoch, Tier::Client);
        let key = IpKey::new(ip, p.ipv6_prefix_length());
        let refused = |g: &crate::protection::RateLimit, scope, tat, now| RequestLimited {
            retry_after_ns: g.gcra.retry_after_ns(tat, now),
            scope,
            limit: g.rate,
            burst: g.burst,
            observed,
        };
        let r = self.table.with(
            key,
            &ctx,
            || now_ns,
            |_, s, now| {
                let g = rl.client.gcra;
                if !g.conforms(s.tat_request, now) {
                    return Err(refused(
                        &rl.client,
                        RequestScope::Client,
                        s.tat_request,
                        now,
                    ));
                }
                if let Some(pr) = &rl.prefix {
                    let (v4, v6) = p.request_prefix_lengths();
                    let pkey = IpKey::prefix(ip, v4, v6);
                    let pctx = self.ctx(&inst, p, now, epoch, Tier::Prefix);
                    let decided = self.prefixes.with(
                        pkey,
                        &pctx,
                        || now,
                        |_, ps, pnow| {
                            if pr.gcra.admit(&mut ps.tat_request, pnow) {
                                Ok(())
                            } else {
                                Err(refused(pr, RequestScope::Prefix, ps.tat_request, pnow))
                            }
                        },
                    );
                    // A prefix the full table cannot track is skipped (admission counted it).
                    if let Some((Err(l), _)) = decided {
                        return Err(l);
                    }
                }
                s.tat_request = g.next_tat(s.tat_request, now);
                Ok(())
            },
        );
        // A client the full table cannot track was admitted untracked (and counted) at accept.
        r.map_or(Ok(()), |(decision, _)| decision)
    }
}
