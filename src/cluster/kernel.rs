//! Sharing the bans the kernel makes on its own: a source over `xdp.synPerSecond` banned by the
//! XDP program, and a ban (of a box, client or prefix) the kernel extended because the banned
//! source kept sending SYNs over its rate while its SYNs were dropped (userspace never sees those
//! SYNs, so its own box is not extended and not published again).
//!
//! The server's background tick (every 100 ms, with XDP attached) reads two kernel counters,
//! `banned` and `banExtended`; only when one moved does it read the ban maps back (O(bans)):
//! every tick for a new kernel ban, at most every [`EXTENDED_SCAN_NS`] for extensions. What it
//! reads goes through [`KernelBans::publishable`], which knows every deadline userspace wrote to
//! the kernel ([`KernelBans::written`]: local boxes, and the bans received from other nodes on
//! their way to the kernel), so:
//! - a ban the kernel made (no deadline known) is published with its remaining time;
//! - a ban the kernel extended by at least [`EXTENSION_MIN_NS`] past the deadline known is
//!   published again with its new remaining time (the other nodes' copies would otherwise end
//!   while the flood goes on);
//! - a ban written from userspace and not extended — a received one in particular — is never
//!   published (no echo).

use ipnet::IpNet;
use std::collections::HashMap;

/// A kernel extension shorter than this past the deadline known is not published again, ns.
pub(crate) const EXTENSION_MIN_NS: u64 = crate::clock::NS_PER_SEC;
/// Least time between two reads of the ban maps for extensions alone, ns.
pub(crate) const EXTENDED_SCAN_NS: u64 = crate::clock::NS_PER_SEC;

/// One live kernel ban as read back from the ban maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelBan {
    /// The banned network: a source (`/32`, the IPv6 source prefix) or a boxed prefix.
    pub net: IpNet,
    /// The listener port it was made for.
    pub port: u16,
    /// CLOCK_MONOTONIC deadline, ns (as the kernel holds it).
    pub deadline_ns: u64,
    /// Made by the kernel's SYN limit (`xdp.synPerSecond`), not a userspace box.
    pub syn: bool,
    /// A boxed prefix (the prefix-ban trie), not one source.
    pub prefix: bool,
}

/// What this node knows of the kernel's bans (one per proxy, behind the cluster tier's lock).
#[derive(Debug, Default)]
pub(crate) struct KernelBans {
    /// The latest deadline known per (network, port): written from userspace or published.
    known: HashMap<(IpNet, u16), u64>,
    banned: u64,
    extended: u64,
    last_scan_ns: Option<u64>,
}

impl KernelBans {
    /// Userspace wrote (or is writing) this ban to the kernel: a local box, or one received from
    /// another node.
    pub(crate) fn written(&mut self, net: IpNet, port: u16, deadline_ns: u64) {
        let d = self.known.entry((net, port)).or_insert(0);
        *d = (*d).max(deadline_ns);
    }

    /// Whether the ban maps should be read at `now_ns`, given the kernel's `banned` and
    /// `banExtended` counters: a new kernel ban at once, extensions at most every
    /// [`EXTENDED_SCAN_NS`].
    pub(crate) fn should_scan(&mut self, banned: u64, extended: u64, now_ns: u64) -> bool {
        let new_ban = banned != self.banned;
        let more_extended = extended != self.extended
            && self
                .last_scan_ns
                .is_none_or(|t| now_ns.saturating_sub(t) >= EXTENDED_SCAN_NS);
        if !(new_ban || more_extended) {
            return false;
        }
        self.banned = banned;
        self.extended = extended;
        self.last_scan_ns = Some(now_ns);
        true
    }

    /// The bans of `bans` (read back from the kernel) to publish at `now_ns`: those made by the
    /// kernel and those it extended by [`EXTENSION_MIN_NS`] or more; each is then known at its
    /// deadline. Ended ones are forgotten.
    pub(crate) fn publishable(&mut self, bans: &[KernelBan], now_ns: u64) -> Vec<KernelBan> {
        self.known.retain(|_, d| *d > now_ns);
        let mut out = Vec::new();
        for b in bans.iter().filter(|b| b.deadline_ns > now_ns) {
            let known = self.known.entry((b.net, b.port)).or_insert(0);
            if *known == 0 || b.deadline_ns >= known.saturating_add(EXTENSION_MIN_NS) {
                *known = b.deadline_ns;
                out.push(*b);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = crate::clock::NS_PER_SEC;

    fn ban(net: &str, deadline_ns: u64, syn: bool) -> KernelBan {
        KernelBan {
            net: net.parse().unwrap(),
            port: 443,
            deadline_ns,
            syn,
            prefix: false,
        }
    }

    #[test]
    fn kernel_bans_are_published_once_and_received_ones_never() {
        let mut k = KernelBans::default();
        assert!(!k.should_scan(0, 0, S), "nothing moved");
        // A box written from userspace (here: received from another node) at 10 s.
        k.written("192.0.2.1/32".parse().unwrap(), 443, 10 * S);
        assert!(k.should_scan(1, 0, S), "the kernel made a ban");
        let read = [
            ban("192.0.2.1/32", 10 * S, false),
            ban("198.51.100.7/32", 5 * S, true),
        ];
        assert_eq!(
            k.publishable(&read, S),
            vec![read[1]],
            "only the kernel's own"
        );
        assert!(k.publishable(&read, S).is_empty(), "published once");
        // Extensions: scanned at most once per second; published past 1 s beyond the known.
        assert!(k.should_scan(1, 1, 2 * S));
        assert!(
            !k.should_scan(1, 2, 2 * S + S / 2),
            "extensions alone: throttled"
        );
        assert!(k.should_scan(2, 2, 2 * S + S / 2), "a new ban is not");
        let extended = [
            ban("192.0.2.1/32", 10 * S + S / 2, false),
            ban("198.51.100.7/32", 6 * S, true),
        ];
        assert_eq!(k.publishable(&extended, 3 * S), vec![extended[1]]);
        let more = [ban("192.0.2.1/32", 11 * S, false)];
        assert_eq!(
            k.publishable(&more, 3 * S),
            vec![more[0]],
            "a received ban the kernel extended here"
        );
        // An ended ban is forgotten: the same source banned again later is new.
        let again = [ban("198.51.100.7/32", 20 * S, true)];
        assert_eq!(k.publishable(&[], 12 * S), vec![]);
        assert_eq!(k.publishable(&again, 12 * S), vec![again[0]]);
        assert!(
            k.publishable(&[ban("192.0.2.1/32", S, false)], 12 * S)
                .is_empty(),
            "ended"
        );
    }
}
