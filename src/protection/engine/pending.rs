//! Handshakes in progress: `slowHandshake.maxPendingPerIp`, `defense.newClientMaxPending` and
//! `listenerLimit.maxPendingHandshakes`.

use super::*;

impl Engine {
    /// Counts one handshake in progress for `ip` against `slowHandshake.maxPendingPerIp` (in
    /// defense mode, `defense.newClientMaxPending` for a client first seen while it is on), then
    /// against `listenerLimit.maxPendingHandshakes` (not for known-good clients); keep the guard
    /// until the handshake ends ([`PendingGuard::tightened`] says whether defense mode's shorter
    /// handshake timeout applies). `Err(slow_handshake)` / `Err(listener_overloaded)` when a cap
    /// is reached (nothing is counted); in observe mode the verdict is `observed` and the
    /// handshake goes on uncounted. An allowlisted client, or a listener without a policy, gets
    /// an empty guard; an untracked client is counted on the listener only.
    pub fn pending_handshake(&self, ip: IpAddr, now_ns: u64) -> Result<PendingGuard, Verdict> {
        let inst = self.installed.load();
        let Some(p) = inst.policy.as_deref() else {
            return Ok(PendingGuard::empty());
        };
        let ip = ip.to_canonical();
        if p.allowlist().contains(ip) {
            return Ok(PendingGuard::empty());
        }
        let observed = p.mode() == Mode::Observe;
        let refuse = |reason| Verdict { reason, observed };
        let defended = self.defended.load(Ordering::Relaxed);
        let max = p.slow_handshake().max_pending_per_ip;
        let new_max = p.defense().new_client_max_pending;
        let listener_max = p.listener_limit().map_or(0, |l| l.max_pending_handshakes);
        let ctx = self.ctx(
            &inst,
            p,
            now_ns,
            self.epoch.load(Ordering::Acquire),
            Tier::Client,
        );
        let key = IpKey::new(ip, p.ipv6_prefix_length());
        let counted = self.table.with(
            key,
            &ctx,
            || now_ns,
            |e, s, now| {
                expire_mark(s, now, Some(&self.table.marked));
                let known_good = s.known_good(now);
                let tight = defended && !known_good;
                let max = if tight && s.marks & MARK_NEW != 0 {
                    max.min(new_max)
                } else {
                    max
                };
                if u64::from(e.pending) >= max {
                    return Err(BlockReason::SlowHandshake);
                }
                let on_listener = listener_max != 0 && !known_good;
                if on_listener && !take_pending(&self.pending, listener_max) {
                    return Err(BlockReason::ListenerOverloaded);
                }
                e.pending += 1;
                Ok((on_listener, tight))
            },
        );
        let listener = |counted: bool| counted.then(|| Arc::clone(&self.pending));
        match counted {
            None => {
                let on_listener = listener_max != 0;
                if on_listener && !take_pending(&self.pending, listener_max) {
                    return Err(refuse(BlockReason::ListenerOverloaded));
                }
                Ok(PendingGuard::listener_only(listener(on_listener), defended))
            }
            Some((Ok((on_listener, tight)), slot)) => {
                Ok(slot.pending_guard(listener(on_listener), tight))
            }
            Some((Err(reason), _)) => Err(refuse(reason)),
        }
    }
}

/// Takes one pending handshake on the listener if fewer than `max` are counted.
fn take_pending(cell: &AtomicU64, max: u64) -> bool {
    cell.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
        (n < max).then_some(n + 1)
    })
    .is_ok()
}
