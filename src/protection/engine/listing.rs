//! What the engine holds, for `blockedIps()`, `metrics()` and tests: boxed and rate-limited
//! clients, counts, table sizes and memory, and the incremental eviction pass.

use super::*;

impl Engine {
    /// Every boxed client and prefix with its deadline (CLOCK_MONOTONIC ns) and whether it is a
    /// prefix, in O(number boxed): for syncing the XDP ban map when it is attached.
    pub fn boxed(&self, now_ns: u64) -> Vec<(IpKey, u64, bool)> {
        let epoch = self.epoch.load(Ordering::Acquire);
        let mut out = Vec::new();
        for (table, prefix) in [(&self.table, false), (&self.prefixes, true)] {
            for key in table.lists.snapshot(FLAG_BOX) {
                let deadline = table.inspect(key, |e| {
                    let e = e?;
                    penalty::remaining_ms(e.penalty, epoch, now_ns)?;
                    penalty::deadline_ms(e.penalty, epoch).map(ms_to_ns)
                });
                if let Some(d) = deadline {
                    out.push((key, d, prefix));
                }
            }
        }
        out.extend(
            self.offenders
                .boxed(now_ns)
                .into_iter()
                .map(|(k, d)| (k, d, false)),
        );
        out.extend(
            self.prefix_boxes
                .running(now_ns)
                .into_iter()
                .map(|(k, d)| (k, d, true)),
        );
        out
    }

    /// Blocked clients and networks at `now_ns`, in O(number blocked) (see [`crate::protection::blocked`]).
    /// Prefixes of the prefix tier are listed as CIDRs (`203.0.113.0/24`): rate-limited ones
    /// with reason `prefix_rate_limited`, concurrency-limited ones `prefix_too_many_connections`,
    /// boxed ones `penalty_boxed` with the note `prefix`.
    pub fn blocked(&self, now_ns: u64) -> BlockedView {
        let inst = self.installed.load();
        let p = inst.policy.as_deref();
        let epoch = self.epoch.load(Ordering::Acquire);
        let mut view = BlockedView {
            dynamic_blocklist: self.dynamic.entries(Some(self.port), now_ns),
            ..BlockedView::default()
        };
        if let Some(p) = p {
            view.cidr_blocklist = p
                .blocklist()
                .nets()
                .iter()
                .map(|n| BlockedEntry {
                    ip: n.to_string(),
                    reason: BlockReason::CidrBlocked,
                    remaining_ms: None,
                    note: None,
                })
                .collect();
        }
        let client = Side {
            table: &self.table,
            tier: Tier::Client,
            note: None,
        };
        let prefix = Side {
            table: &self.prefixes,
            tier: Tier::Prefix,
            note: Some(PREFIX_NOTE),
        };
        let retry = |gs| retry_after_ms(gs, now_ns).map(Some);
        view.rate_limited = self.collect(&client, FLAG_RATE, BlockReason::RateLimited, |e, lim| {
            p?;
            retry([
                lim.rate.map(|g| (g, e.tat_rate)),
                lim.sustained.map(|g| (g, e.tat_sustained)),
            ])
        });
        view.rate_limited.extend(self.collect(
            &prefix,
            FLAG_RATE,
            BlockReason::PrefixRateLimited,
            |e, lim| {
                p?;
                retry([lim.prefix.map(|g| (g, e.tat_rate)), None])
            },
        ));
        view.concurrency_limited = self.collect(
            &client,
            FLAG_CONC,
            BlockReason::TooManyConnections,
            |e, _| {
                let max = p?.max_concurrent_per_ip();
                (max > 0 && u64::from(e.active) >= max).then_some(None)
            },
        );
        view.concurrency_limited.extend(self.collect(
            &prefix,
            FLAG_CONC,
            BlockReason::PrefixTooManyConnections,
            |e, _| {
                let max = p?.prefix_limit()?.max_concurrent;
                (max > 0 && u64::from(e.active) >= max).then_some(None)
            },
        ));
        for side in [&client, &prefix] {
            view.penalty_boxed.extend(self.collect(
                side,
                FLAG_BOX,
                BlockReason::PenaltyBoxed,
                |e, _| {
                    p?.penalty_duration_ns()?;
                    penalty::remaining_ms(e.penalty, epoch, now_ns).map(Some)
                },
            ));
        }
        for (key, deadline) in self.offenders.boxed(now_ns) {
            view.penalty_boxed.push(BlockedEntry {
                ip: key.to_string(),
                reason: BlockReason::PenaltyBoxed,
                remaining_ms: Some(ns_to_ms_ceil(deadline - now_ns)),
                note: Some(H2_BOX_NOTE.to_string()),
            });
        }
        for (key, deadline) in self.prefix_boxes.running(now_ns) {
            view.penalty_boxed.push(BlockedEntry {
                ip: key.to_string(),
                reason: BlockReason::PenaltyBoxed,
                remaining_ms: Some(ns_to_ms_ceil(deadline - now_ns)),
                note: Some(PREFIX_NOTE.to_string()),
            });
        }
        view.sort();
        view
    }

    /// Walks one side set of one table: `still` says whether an entry is still blocked (and its
    /// remaining ms), given the entry rescaled to the generation in force and that generation;
    /// stale keys are removed and their flag cleared.
    fn collect(
        &self,
        side: &Side<'_>,
        flag: u8,
        reason: BlockReason,
        still: impl Fn(&Entry, &Installed) -> Option<Option<u64>>,
    ) -> Vec<BlockedEntry> {
        let mut out = Vec::new();
        let table = side.table;
        for key in table.lists.snapshot(flag) {
            let hit = table.inspect(key, |mut e| {
                let latest = self.installed.load();
                if let Some(e) = e.as_deref_mut() {
                    latest.rescale(e, side.tier);
                }
                let hit = e.as_deref().and_then(|e| still(e, &latest));
                if hit.is_none() {
                    if let Some(e) = e {
                        e.flags &= !flag;
                    }
                    table.lists.remove(flag, key);
                }
                hit
            });
            if let Some(remaining_ms) = hit {
                out.push(BlockedEntry {
                    ip: key.to_string(),
                    reason,
                    remaining_ms,
                    note: side.note.map(str::to_string),
                });
            }
        }
        out
    }

    /// Number of tracked clients (entries in the per-IP table).
    pub fn tracked_ips(&self) -> usize {
        self.table.len()
    }

    /// Number of tracked prefixes (entries in the prefix table).
    pub fn tracked_prefixes(&self) -> usize {
        self.prefixes.len()
    }

    /// Background eviction: examines at most `budget` slots of each table (bounded work, short
    /// lock holds) and drops expired dynamic blocks. Returns the number of entries evicted. Call
    /// it periodically (e.g. every 100 ms with a budget of 10_000).
    pub fn evict_tick(&self, now_ns: u64, budget: usize) -> usize {
        self.dynamic.purge_expired(now_ns);
        self.offenders.purge(now_ns, H2_VIOLATION_WINDOW_NS);
        self.prefix_boxes.purge(now_ns);
        let inst = self.installed.load();
        let epoch = self.epoch.load(Ordering::Acquire);
        let p = inst.policy.as_deref();
        let ctx = |tier: Tier| Ctx {
            now: now_ns,
            epoch,
            cap: p.map_or(usize::MAX, |p| p.max_tracked_ips()),
            tag: inst.tag(),
            latest: Some(&self.installed),
            tier,
            memory_ns: p.map_or(0, |p| memory_ns(p, epoch)),
            marked: (tier == Tier::Client).then_some(&self.table.marked),
            new_marks: 0,
        };
        let mut n = self.table.evict_tick(&ctx(Tier::Client), budget);
        if self.prefixes.len() > 0 {
            n += self.prefixes.evict_tick(&ctx(Tier::Prefix), budget);
        }
        n
    }

    /// The client's (active connections, pending handshakes) as counted by its guards; `(0, 0)`
    /// when it is not tracked or there is no policy.
    pub fn counts(&self, ip: IpAddr) -> (u64, u64) {
        let inst = self.installed.load();
        let Some(p) = inst.policy.as_deref() else {
            return (0, 0);
        };
        let key = IpKey::new(ip, p.ipv6_prefix_length());
        self.table.inspect(key, |e| {
            e.map_or((0, 0), |e| (u64::from(e.active), u64::from(e.pending)))
        })
    }

    /// Active connections counted on `ip`'s prefix (0 when untracked or without `prefixLimit`).
    pub fn prefix_active(&self, ip: IpAddr) -> u64 {
        let inst = self.installed.load();
        let Some(pl) = inst.policy.as_deref().and_then(|p| p.prefix_limit()) else {
            return 0;
        };
        let key = pl.key(ip);
        self.prefixes
            .inspect(key, |e| e.map_or(0, |e| u64::from(e.active)))
    }

    /// Handshakes in progress counted against `listenerLimit.maxPendingHandshakes`.
    pub fn listener_pending(&self) -> u64 {
        self.pending.load(Ordering::Acquire)
    }

    /// Whether `ip`'s client has an entry in the per-IP table.
    pub fn is_tracked(&self, ip: IpAddr) -> bool {
        let inst = self.installed.load();
        let Some(p) = inst.policy.as_deref() else {
            return false;
        };
        let key = IpKey::new(ip, p.ipv6_prefix_length());
        self.table.inspect(key, |e| e.is_some())
    }

    /// Whether `ip`'s prefix has an entry in the prefix table.
    pub fn is_prefix_tracked(&self, ip: IpAddr) -> bool {
        let inst = self.installed.load();
        let Some(pl) = inst.policy.as_deref().and_then(|p| p.prefix_limit()) else {
            return false;
        };
        let key = pl.key(ip);
        self.prefixes.inspect(key, |e| e.is_some())
    }

    /// Clients admitted without an entry because the table was full of connected clients.
    pub fn untracked_admissions(&self) -> u64 {
        self.untracked.load(Ordering::Relaxed)
    }

    /// Connections whose prefix could not be tracked (prefix table full of connected prefixes).
    pub fn untracked_prefixes(&self) -> u64 {
        self.untracked_prefixes.load(Ordering::Relaxed)
    }

    /// Heap bytes held by the per-IP table (entries, index, free lists).
    pub fn table_memory_bytes(&self) -> usize {
        self.table.memory_bytes()
    }

    /// Heap bytes held by the prefix table.
    pub fn prefix_table_memory_bytes(&self) -> usize {
        self.prefixes.memory_bytes()
    }

    /// The shared dynamic blocks.
    pub fn dynamic(&self) -> &Arc<DynamicBlocks> {
        &self.dynamic
    }
}

/// One table of the blocked view.
struct Side<'a> {
    table: &'a Table,
    tier: Tier,
    note: Option<&'static str>,
}
