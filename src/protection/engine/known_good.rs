//! Known-good clients: the mark in an entry's standing, its TTL and the known-good listener.

use super::*;

impl Engine {
    /// Marks `ip`'s client known-good until `now_ns + knownGoodTtlMs` (rounded up to the
    /// second): call it once a connection of the client completed its TLS handshake and moved
    /// application bytes both ways without a refusal. Returns whether a mark was set (not for an
    /// allowlisted or boxed client, an untracked one, or without a policy).
    pub fn mark_known_good(&self, ip: IpAddr, now_ns: u64) -> bool {
        let inst = self.installed.load();
        let Some(p) = inst.policy.as_deref() else {
            return false;
        };
        let ip = ip.to_canonical();
        if p.allowlist().contains(ip) {
            return false;
        }
        let epoch = self.epoch.load(Ordering::Acquire);
        let ctx = self.ctx(&inst, p, now_ns, epoch, Tier::Client);
        let until_s = now_ns
            .saturating_add(p.known_good_ttl_ns())
            .div_ceil(crate::clock::NS_PER_SEC)
            .min(u64::from(u32::MAX)) as u32;
        let key = IpKey::new(ip, p.ipv6_prefix_length());
        let half_s = (p.known_good_ttl_ns().div_ceil(2_000_000_000)).max(1) as u32;
        let marked = self.table.with(
            key,
            &ctx,
            || now_ns,
            |e, s, now| {
                if p.penalty_box() && penalty::is_boxed(e.penalty, epoch, now) {
                    return (false, false);
                }
                let fresh = s.marks & MARK_KNOWN_GOOD == 0 || !s.known_good(now);
                if s.marks & MARK_KNOWN_GOOD == 0 {
                    s.marks |= MARK_KNOWN_GOOD;
                    self.table.marked.fetch_add(1, Ordering::Relaxed);
                }
                let before = s.known_good_s;
                s.known_good_s = s.known_good_s.max(until_s);
                // A fresh mark starts its age now; a refreshed one keeps its first-marked time.
                let age = if fresh {
                    until_s.saturating_sub(now.div_ceil(crate::clock::NS_PER_SEC) as u32)
                } else {
                    u32::from(s.known_good_age_s) + (s.known_good_s - before)
                };
                s.known_good_age_s = age.min(u32::from(u16::MAX)) as u16;
                s.marks &= !MARK_NEW;
                (true, fresh || before / half_s != s.known_good_s / half_s)
            },
        );
        let (marked, tell) = marked.map(|(m, _)| m).unwrap_or((false, false));
        if tell {
            if let Some(l) = self.known_good_listener.load().as_ref() {
                let deadline = u64::from(until_s.saturating_add(half_s)) * crate::clock::NS_PER_SEC;
                (l.0)(key, deadline);
            }
        }
        marked
    }

    /// Every client known-good at `now_ns`, with the deadline the known-good listener would be
    /// told for it (its mark's end plus half a `knownGoodTtlMs`, CLOCK_MONOTONIC ns): what a
    /// newly attached XDP program is given, so a site's regular users pass its SYN budget from
    /// the first packet. O(tracked clients), each shard under its lock in turn; empty without a
    /// policy.
    pub fn known_good_marks(&self, now_ns: u64) -> Vec<(IpKey, u64)> {
        let Some(p) = self.installed.load().policy.clone() else {
            return Vec::new();
        };
        let half_s = u64::from((p.known_good_ttl_ns().div_ceil(2_000_000_000)).max(1) as u32);
        let mut out = Vec::new();
        self.table.for_each(|e, s| {
            if s.marks & MARK_KNOWN_GOOD != 0 && s.known_good(now_ns) {
                out.push((
                    e.key(),
                    (u64::from(s.known_good_s) + half_s) * crate::clock::NS_PER_SEC,
                ));
            }
        });
        out
    }

    /// Whether `ip`'s client may use a route's reserved capacity (`capacity::Class::Priority`):
    /// known-good at `now_ns` AND first marked at or before `since_ns` — standing earned during
    /// a flood must not buy priority. `since_ns` is the overload episode's start minus
    /// [`crate::capacity::PRIORITY_SEASONING_NS`] (`Capacity::priority_since`). A refreshed mark
    /// keeps its first-marked time (rounded up to the second); a mark that lapsed and was earned
    /// again starts over. False without a policy.
    pub fn is_priority(&self, ip: IpAddr, now_ns: u64, since_ns: u64) -> bool {
        let inst = self.installed.load();
        let Some(p) = inst.policy.as_deref() else {
            return false;
        };
        let key = IpKey::new(ip.to_canonical(), p.ipv6_prefix_length());
        self.table.inspect_standing(key, |s| {
            s.is_some_and(|s| s.known_good(now_ns) && s.known_good_since_ns() <= since_ns)
        })
    }

    /// Whether `ip`'s client is known-good at `now_ns`.
    pub fn is_known_good(&self, ip: IpAddr, now_ns: u64) -> bool {
        let inst = self.installed.load();
        let Some(p) = inst.policy.as_deref() else {
            return false;
        };
        let key = IpKey::new(ip.to_canonical(), p.ipv6_prefix_length());
        self.table
            .inspect_standing(key, |s| s.is_some_and(|s| s.known_good(now_ns)))
    }

    /// Clients holding a known-good mark (`metrics().listeners[].knownGoodClients`): counted when
    /// marked, uncounted when the mark is found expired (by the client's next connection or the
    /// eviction sweep), when the client is boxed or its entry evicted — so an expired mark is
    /// counted until the sweep passes it.
    pub fn known_good_clients(&self) -> u64 {
        self.table.marked.load(Ordering::Relaxed)
    }
}
