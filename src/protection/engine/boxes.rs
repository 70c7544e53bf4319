//! Boxes earned on admitted connections (HTTP/2 guard violations, a box the kernel extended) and
//! prefix boxes received from another node: `offenders` and `prefix_boxes`, beside the table.

use super::*;
use crate::protection::{BanNote, BanOrigin};

impl Engine {
    /// The key and box parameters of `ip` under the policy in force: `(key, threshold,
    /// duration_ns)`; `None` for an allowlisted client (the allowlist skips every check).
    pub(super) fn offender_key(&self, ip: IpAddr) -> Option<(IpKey, u32, u64)> {
        let ip = ip.to_canonical();
        match self.installed.load().policy.as_deref() {
            Some(p) if p.allowlist().contains(ip) => None,
            Some(p) => Some((
                IpKey::new(ip, p.ipv6_prefix_length()),
                p.http2().box_after_violations,
                p.box_duration_ns(),
            )),
            None => Some((
                IpKey::new(ip, DEFAULT_IPV6_PREFIX),
                DEFAULT_H2_BOX_AFTER_VIOLATIONS,
                ms_to_ns(DEFAULT_PENALTY_MS),
            )),
        }
    }

    /// Counts one HTTP/2 guard violation by `ip`'s client at `now_ns` (CLOCK_MONOTONIC ns). The
    /// `http2.boxAfterViolations`-th within 60 s puts the client in the penalty box for
    /// `penaltyBox.durationMs` (600000 ms without a penalty box), as [`Engine::box_client`]
    /// does; returns the deadline (ns) when this violation boxed it. Allowlisted clients are
    /// never counted.
    pub fn record_h2_violation(&self, ip: IpAddr, now_ns: u64) -> Option<u64> {
        let (key, threshold, duration_ns) = self.offender_key(ip)?;
        let started = !self.offenders.is_boxed(key, now_ns);
        let deadline = self.offenders.violation(
            key,
            now_ns,
            threshold,
            H2_VIOLATION_WINDOW_NS,
            duration_ns,
        )?;
        self.notify_box(key, deadline);
        self.note_client_box(key, deadline, started, BanOrigin::Local);
        Some(deadline)
    }

    /// Puts `ip`'s client in the penalty box until `now_ns + duration_ns` (CLOCK_MONOTONIC ns;
    /// a later running deadline is kept): from then on it is refused `penalty_boxed` at accept
    /// (reported as observed in observe mode), listed in `blockedIps().penaltyBoxed`, and the
    /// box listener (the XDP ban queue) is told. Works with or without a policy, penalty box or
    /// rate limit; the box ends at its deadline. Returns the deadline in force, or `None` for an
    /// allowlisted client. Reported as a `'ban'` of origin `local` (see
    /// [`Engine::box_client_from`]).
    pub fn box_client(&self, ip: IpAddr, duration_ns: u64, now_ns: u64) -> Option<u64> {
        self.box_client_from(ip, duration_ns, now_ns, BanOrigin::Local)
    }

    /// [`Engine::box_client`] with the `origin` its `'ban'` event reports (a box received from
    /// another node: [`BanOrigin::Cluster`]).
    pub fn box_client_from(
        &self,
        ip: IpAddr,
        duration_ns: u64,
        now_ns: u64,
        origin: BanOrigin,
    ) -> Option<u64> {
        let (key, _, _) = self.offender_key(ip)?;
        let started = !self.offenders.is_boxed(key, now_ns);
        let before = self.offenders.box_deadline(key);
        let deadline = self
            .offenders
            .put_in_box(key, now_ns.saturating_add(duration_ns));
        self.notify_box(key, deadline);
        if started || before != Some(deadline) {
            self.note_client_box(key, deadline, started, origin);
        }
        Some(deadline)
    }

    /// Tells the ban sink of a box of the offenders' set (reason `h2_flood` when earned here,
    /// `penalty_boxed` when received from another node).
    fn note_client_box(&self, key: IpKey, deadline_ns: u64, started: bool, origin: BanOrigin) {
        self.note_ban(|| BanNote {
            key,
            prefix: false,
            deadline_ns,
            level: 0,
            started,
            reason: match origin {
                BanOrigin::Local => BlockReason::H2Flood.as_str(),
                _ => BlockReason::PenaltyBoxed.as_str(),
            },
            origin,
        });
    }

    /// Puts the prefix `net` (a boxed prefix of another node's prefix tier, as its box listener
    /// reported it) in the penalty box until `now_ns + duration_ns` (a later running deadline is
    /// kept): every client in it is refused `penalty_boxed` at accept (observed in observe
    /// mode), the prefix is listed in `blockedIps().penaltyBoxed` as a CIDR with the note
    /// [`PREFIX_NOTE`] as a local prefix box is, and the box listener is told (as a prefix: the
    /// XDP prefix-ban trie). Holds whatever the local policy (see `prefix_boxes`). Returns the
    /// deadline in force, or `None` when the set is full. Reported as a `'ban'` of origin
    /// `local` (see [`Engine::box_prefix_from`]).
    pub fn box_prefix(&self, net: IpNet, duration_ns: u64, now_ns: u64) -> Option<u64> {
        self.box_prefix_from(net, duration_ns, now_ns, BanOrigin::Local)
    }

    /// [`Engine::box_prefix`] with the `origin` its `'ban'` event reports.
    pub fn box_prefix_from(
        &self,
        net: IpNet,
        duration_ns: u64,
        now_ns: u64,
        origin: BanOrigin,
    ) -> Option<u64> {
        let net = crate::protection::cidr::canonical_net(net);
        let len = net.prefix_len();
        let key = IpKey::prefix(net.network(), len, len);
        let started = !self.prefix_boxes.is_running(key, now_ns);
        let deadline = self
            .prefix_boxes
            .put(key, now_ns.saturating_add(duration_ns))?;
        if let Some(l) = self.box_listener.load().as_ref() {
            (l.0)(key, deadline, true);
        }
        self.note_ban(|| BanNote {
            key,
            prefix: true,
            deadline_ns: deadline,
            level: 0,
            started,
            reason: BlockReason::PenaltyBoxed.as_str(),
            origin,
        });
        Some(deadline)
    }

    fn notify_box(&self, key: IpKey, deadline_ns: u64) {
        if let Some(l) = self.box_listener.load().as_ref() {
            (l.0)(key, deadline_ns, false);
        }
    }

    /// Clients with a recent HTTP/2 guard violation or a box earned on a connection.
    pub fn offenders(&self) -> usize {
        self.offenders.len()
    }
}
