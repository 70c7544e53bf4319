//! The route table: SNI → route, matched exact first, then `*.suffix` (exactly one more label),
//! then the default route `''`. Matching is case-insensitive and ignores one trailing dot. A name
//! with an empty label (`.example.com`, `a..example.com`, `a.example.com..`) matches no wildcard:
//! `*.` stands for exactly one non-empty label, and configured names never have empty labels, so
//! such a name can only get the default route.
//!
//! The table is immutable; `updateConfig({ routes })` builds a new one and swaps a pointer, so a
//! connection keeps the `Arc<CompiledRoute>` it was routed with until it closes.

use crate::capacity::{Capacity, CapacityRegistry};
use crate::config::proxy::{AppProtocol, Balance, ListenerConfig, RouteConfig, SniPattern};
use crate::gcra::Gcra;
use crate::metrics::route::{RouteMetrics, RouteRegistry};
use crate::proxy::cpu::{CpuSlot, CONNECTION_WEIGHT};
use crate::tls::certs::server_config;
use crate::tls::sessions::{Generation, SessionKey, TlsCache};
use rustls::ServerConfig;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// A route ready to serve.
#[derive(Debug)]
pub(crate) struct CompiledRoute {
    /// The validated config.
    pub config: RouteConfig,
    /// TLS config per listener index (route cert, else that listener's default cert); `None` for
    /// passthrough routes.
    pub tls: Vec<Option<Arc<ServerConfig>>>,
    /// The upstreams a client is balanced over, per the protocol it speaks: one set of every
    /// upstream when none has a `protocol`, else one per [`AppProtocol`] (by its index) of the
    /// upstreams that serve it.
    pub sets: Vec<UpstreamSet>,
    /// Route-wide GCRA (`maxConnectionsPerSecond`, `burst`) and its theoretical arrival time.
    pub limit: Option<(Gcra, AtomicU64)>,
    /// This route's counters (`routeMetrics`).
    pub metrics: Arc<RouteMetrics>,
    /// This route's upstream capacity (`routeMetrics[].upstream`; kept across reloads).
    pub capacity: Arc<Capacity>,
    /// Open connections of this route per upstream (for `balance: 'leastConnections'`).
    pub upstream_active: Vec<AtomicUsize>,
    /// CPU use per upstream (`upstreams[].pid` / `tid`), sampled by the background task.
    pub upstream_cpu: Vec<CpuSlot>,
    /// `ipAffinity`: client IP → (upstream index, deadline ns), and the TTL in ns.
    pub affinity: Option<(AffinityMap, u64)>,
}

/// Upstreams of a route that serve one protocol (`upstreams[].protocol`), with their
/// round-robin cursor.
#[derive(Debug)]
pub(crate) struct UpstreamSet {
    /// Indexes into `config.upstreams`, in config order.
    pub members: Vec<usize>,
    /// Round-robin cursor over `members`.
    pub cursor: AtomicUsize,
}

impl UpstreamSet {
    fn new(members: Vec<usize>) -> Self {
        UpstreamSet {
            members,
            cursor: AtomicUsize::new(0),
        }
    }
}

/// `ipAffinity` entries: client IP → (upstream index, deadline in CLOCK_MONOTONIC ns).
pub(crate) type AffinityMap = dashmap::DashMap<IpAddr, (usize, u64)>;

/// Affinity entries kept before expired ones are swept (on insert).
pub(crate) const AFFINITY_SWEEP_AT: usize = 65_536;

/// One open connection on upstream `i` of a route (its `upstream_active` count).
#[derive(Debug)]
pub(crate) struct UpstreamGuard(Arc<CompiledRoute>, usize);

impl UpstreamGuard {
    /// The upstream's index in its route's `upstreams`.
    pub(crate) fn index(&self) -> usize {
        self.1
    }
}

impl Drop for UpstreamGuard {
    fn drop(&mut self) {
        self.0.upstream_active[self.1].fetch_sub(1, Ordering::Relaxed);
    }
}

impl CompiledRoute {
    /// Compiles one route: its TLS config per listener (route cert, else that listener's
    /// default cert), limits and upstream counters. `listeners[i]` is listener `i`'s config, or
    /// `None` for a listener the route will not serve (a resolved suspended connection is
    /// compiled for its own listener only: one rustls config, not one per listener). `metrics`
    /// and `capacity` are its counters and upstream capacity (a route-table route's from the
    /// registries, a resolved suspended connection's those of its suspended route).
    pub(crate) fn compile(
        r: &RouteConfig,
        listeners: &[Option<&ListenerConfig>],
        metrics: Arc<RouteMetrics>,
        capacity: Arc<Capacity>,
    ) -> Arc<CompiledRoute> {
        let sessions = TlsCache::default();
        Self::compile_in(r, listeners, metrics, capacity, &mut sessions.generation())
    }

    /// [`Self::compile`] with the resumption state of `tls` (kept across route tables).
    fn compile_in(
        r: &RouteConfig,
        listeners: &[Option<&ListenerConfig>],
        metrics: Arc<RouteMetrics>,
        capacity: Arc<Capacity>,
        sessions: &mut Generation<'_>,
    ) -> Arc<CompiledRoute> {
        let mtls_of = |l: &ListenerConfig| r.mtls.clone().or_else(|| l.mtls.clone());
        let tls = listeners
            .iter()
            .map(|l| {
                let l = l.filter(|_| r.terminate_tls)?;
                let cert = r.cert.clone().or_else(|| l.default_cert.clone())?;
                let mtls = mtls_of(l);
                let opts = r.tls.as_ref().unwrap_or(&l.tls);
                let key = SessionKey::new(&cert, mtls.as_ref().map(|m| m.digest), opts);
                let s = sessions.sessions(key);
                let cfg = server_config(cert, r.alpn_offered(), mtls.map(|m| m.verifier), opts, &s);
                Some(cfg.expect("tls options are validated by config::tls with the same check"))
            })
            .collect();
        Arc::new(CompiledRoute {
            config: r.clone(),
            tls,
            sets: upstream_sets(r),
            limit: r.rate_limit.map(|(rate, burst)| {
                (
                    Gcra::per_period(rate, crate::clock::NS_PER_SEC, burst),
                    AtomicU64::new(0),
                )
            }),
            upstream_active: r.upstreams.iter().map(|_| AtomicUsize::new(0)).collect(),
            upstream_cpu: (0..r.upstreams.len())
                .map(|i| CpuSlot::new(r.upstream_cpu.get(i).copied().flatten()))
                .collect(),
            affinity: r.ip_affinity_ttl_ms.map(|ms| {
                (
                    AffinityMap::new(),
                    ms.saturating_mul(crate::clock::NS_PER_MS),
                )
            }),
            metrics,
            capacity,
        })
    }

    /// The upstreams that serve clients speaking `p`.
    pub(crate) fn set(&self, p: AppProtocol) -> &UpstreamSet {
        match self.sets.as_slice() {
            [all] => all,
            sets => &sets[p.index()],
        }
    }

    /// Index of the upstream to try first for `ip`, speaking `p`, at `now_ns`: with
    /// `ipAffinity`, the upstream `ip` last used while its entry lives and it serves `p`; else
    /// [`Self::pick`]. `None` when no upstream serves `p`.
    pub(crate) fn pick_for(&self, ip: IpAddr, p: AppProtocol, now_ns: u64) -> Option<usize> {
        if let Some((map, _)) = &self.affinity {
            if let Some(e) = map.get(&ip) {
                if e.1 > now_ns && self.set(p).members.contains(&e.0) {
                    return Some(e.0);
                }
            }
        }
        self.pick(p)
    }

    /// Records that `ip` was served by upstream `i` at `now_ns` (`ipAffinity`; no-op without).
    pub(crate) fn remember(&self, ip: IpAddr, i: usize, now_ns: u64) {
        if let Some((map, ttl)) = &self.affinity {
            if map.len() >= AFFINITY_SWEEP_AT {
                map.retain(|_, e| e.1 > now_ns);
            }
            map.insert(ip, (i, now_ns.saturating_add(*ttl)));
        }
    }

    /// Index of the upstream to try first for a new connection speaking `p`, among those that
    /// serve it: the next in turn, or with least connections the one with the lowest score —
    /// open connections × 1000 + CPU use in ‰ for an upstream with `pid` ([`crate::proxy::cpu`];
    /// 0 without) — ties: the first from the next in turn. `None` when no upstream serves `p`.
    pub(crate) fn pick(&self, p: AppProtocol) -> Option<usize> {
        let set = self.set(p);
        let m = &set.members;
        if m.is_empty() {
            return None;
        }
        let start = set.cursor.fetch_add(1, Ordering::Relaxed) % m.len();
        if self.config.balance == Balance::RoundRobin {
            return Some(m[start]);
        }
        let mut best = m[start];
        let mut least = u64::MAX;
        for k in 0..m.len() {
            let i = m[(start + k) % m.len()];
            let a = self.upstream_active[i].load(Ordering::Relaxed) as u64;
            let score = a * CONNECTION_WEIGHT + u64::from(self.upstream_cpu[i].permille());
            if score < least {
                (best, least) = (i, score);
            }
        }
        Some(best)
    }

    /// The failover order for a connection speaking `p` that tries `first` first: every
    /// upstream serving `p` once, in config order from `first` around.
    pub(crate) fn failover(
        &self,
        p: AppProtocol,
        first: usize,
    ) -> impl Iterator<Item = usize> + '_ {
        let m = &self.set(p).members;
        let at = m.iter().position(|&i| i == first).unwrap_or(0);
        (0..m.len()).map(move |k| m[(at + k) % m.len()])
    }

    /// Whether an upstream of this route is CPU-sampled (`pid`).
    pub(crate) fn cpu_sampled(&self) -> bool {
        self.upstream_cpu.iter().any(|c| c.source.is_some())
    }

    /// Samples the CPU use of every upstream with `pid` at `now_ns` (the background task, every
    /// [`crate::proxy::cpu::SAMPLE_PERIOD_MS`]).
    pub(crate) fn sample_cpu(&self, now_ns: u64) {
        for c in &self.upstream_cpu {
            c.sample(now_ns);
        }
    }

    /// `routeMetrics[].upstreams`: each upstream's address, open connections and measured CPU
    /// use.
    pub(crate) fn upstream_snapshots(&self) -> Vec<crate::metrics::route::UpstreamSnapshot> {
        (self.config.upstreams.iter().enumerate())
            .map(|(i, u)| crate::metrics::route::UpstreamSnapshot {
                upstream: crate::proxy::upstream::describe(u),
                active_connections: self.upstream_active[i].load(Ordering::Relaxed) as u64,
                cpu_permille: self.upstream_cpu[i].measured(),
            })
            .collect()
    }

    /// Counts a connection open on upstream `i` until the guard drops.
    pub(crate) fn hold_upstream(self: &Arc<Self>, i: usize) -> UpstreamGuard {
        self.upstream_active[i].fetch_add(1, Ordering::Relaxed);
        UpstreamGuard(self.clone(), i)
    }

    /// Route-wide limit: true when a new connection at `now_ns` conforms (and is debited).
    pub(crate) fn admit(&self, now_ns: u64) -> bool {
        match &self.limit {
            Some((g, tat)) => g.try_debit(tat, now_ns).is_ok(),
            None => true,
        }
    }
}

/// [`CompiledRoute::sets`] of a route.
fn upstream_sets(r: &RouteConfig) -> Vec<UpstreamSet> {
    let all = || (0..r.upstreams.len()).collect::<Vec<_>>();
    if r.upstream_protocols.iter().all(Option::is_none) {
        return vec![UpstreamSet::new(all())];
    }
    AppProtocol::ALL
        .iter()
        .map(|&p| UpstreamSet::new(all().into_iter().filter(|&i| r.serves(i, p)).collect()))
        .collect()
}

/// Immutable SNI routing table.
#[derive(Debug, Default)]
pub(crate) struct RouteTable {
    exact: HashMap<String, Arc<CompiledRoute>>,
    wildcard: HashMap<String, Arc<CompiledRoute>>,
    default: Option<Arc<CompiledRoute>>,
    /// Every route, in config order (for `routeMetrics`).
    all: Vec<Arc<CompiledRoute>>,
    /// The configured routes that failed to build and are not in the table (docs/proxy.md: Route
    /// isolation).
    failing: Vec<crate::config::proxy::FailingRoute>,
}

impl RouteTable {
    /// Builds the table; `listeners` gives each listener's default certificate, `registry` each
    /// route's counters (kept for a route whose name and group survive; the others forgotten),
    /// `tls` each TLS config's resumption state (kept while certificate, client-certificate
    /// policy and `tls` options are unchanged; the others forgotten).
    /// `capacities` each route's upstream capacity (kept for a route whose name survives).
    pub(crate) fn build(
        routes: &[RouteConfig],
        listeners: &[ListenerConfig],
        registry: &RouteRegistry,
        tls: &TlsCache,
        capacities: &CapacityRegistry,
    ) -> RouteTable {
        let mut t = RouteTable::default();
        let listeners: Vec<_> = listeners.iter().map(Some).collect();
        let mut sessions = tls.generation();
        for r in routes {
            let name = r.sni.name();
            let group = r.metrics_group.clone().unwrap_or_else(|| name.clone());
            let metrics = registry.get(&name, &group);
            let capacity = capacities.get(&name, r.concurrency);
            let cr = CompiledRoute::compile_in(r, &listeners, metrics, capacity, &mut sessions);
            t.all.push(cr.clone());
            match &r.sni {
                SniPattern::Exact(h) => {
                    t.exact.insert(h.clone(), cr);
                }
                SniPattern::Wildcard(s) => {
                    t.wildcard.insert(s.clone(), cr);
                }
                SniPattern::Default => t.default = Some(cr),
            }
        }
        let keep: Vec<_> = t.all.iter().map(|r| r.metrics.clone()).collect();
        registry.retain(&keep);
        sessions.finish();
        let keep: Vec<_> = t.all.iter().map(|r| r.capacity.clone()).collect();
        capacities.retain(&keep);
        t
    }

    /// Every route, in config order.
    pub(crate) fn routes(&self) -> &[Arc<CompiledRoute>] {
        &self.all
    }

    /// The table with `failing`, the configured routes that failed to build, recorded beside it.
    pub(crate) fn with_failing(mut self, failing: Vec<crate::config::proxy::FailingRoute>) -> Self {
        self.failing = failing;
        self
    }

    /// The configured routes that failed to build (not in the table).
    pub(crate) fn failing(&self) -> &[crate::config::proxy::FailingRoute] {
        &self.failing
    }

    /// Finds the route for a ClientHello's server_name (`None` when the hello had no SNI).
    pub(crate) fn lookup(&self, sni: Option<&str>) -> Option<&Arc<CompiledRoute>> {
        if let Some(name) = sni {
            let name = name.strip_suffix('.').unwrap_or(name);
            let mut buf = [0u8; 256];
            let lower: String;
            let key: &str = if name.len() <= buf.len() {
                let b = &mut buf[..name.len()];
                b.copy_from_slice(name.as_bytes());
                b.make_ascii_lowercase();
                std::str::from_utf8(b).unwrap_or(name)
            } else {
                lower = name.to_ascii_lowercase();
                &lower
            };
            if let Some(r) = self.exact.get(key) {
                return Some(r);
            }
            if let Some((first, rest)) = key.split_once('.') {
                // `first` is the label `*` stands for; the suffix keys are valid host names, but
                // check the whole name so no empty label can reach a wildcard.
                if !first.is_empty() && !rest.split('.').any(str::is_empty) {
                    if let Some(r) = self.wildcard.get(rest) {
                        return Some(r);
                    }
                }
            }
        }
        self.default.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table of `routes` alone (no listener), with fresh registries.
    fn table(routes: &[RouteConfig]) -> RouteTable {
        RouteTable::build(
            routes,
            &[],
            &RouteRegistry::default(),
            &TlsCache::default(),
            &CapacityRegistry::default(),
        )
    }
    use crate::config::proxy::{parse_sni, ForwardFingerprint, SourceAddressHeader, Upstream};
    const H1: AppProtocol = AppProtocol::Http1;
    const H2: AppProtocol = AppProtocol::H2;

    fn route(sni: &str, port: u16) -> RouteConfig {
        RouteConfig {
            sni: parse_sni(sni).unwrap(),
            upstreams: vec![Upstream::Tcp {
                host: "127.0.0.1".into(),
                port,
            }],
            upstream_protocols: vec![None],
            upstream_cpu: vec![None],
            terminate_tls: false,
            cert: None,
            http2: false,
            protocol: Default::default(),
            tunnels: Default::default(),
            source_address_header: SourceAddressHeader::None,
            forward_fingerprint: ForwardFingerprint::NONE,
            connect_timeout_ms: 1000,
            rate_limit: None,
            mtls: None,
            tls: None,
            metrics_group: None,
            balance: Balance::RoundRobin,
            ip_affinity_ttl_ms: None,
            suspend_timeout_ms: None,
            concurrency: crate::config::proxy::CapacityConfig::default_for(false),
        }
    }

    fn port_of(r: Option<&Arc<CompiledRoute>>) -> Option<u16> {
        r.map(|r| match &r.config.upstreams[0] {
            Upstream::Tcp { port, .. } => *port,
            Upstream::Uds { .. } => 0,
        })
    }

    #[test]
    fn exact_then_wildcard_then_default() {
        let t = table(&[
            route("api.example.com", 1),
            route("*.example.com", 2),
            route("", 3),
        ]);
        assert_eq!(port_of(t.lookup(Some("api.example.com"))), Some(1));
        assert_eq!(port_of(t.lookup(Some("API.Example.COM."))), Some(1));
        assert_eq!(port_of(t.lookup(Some("www.example.com"))), Some(2));
        assert_eq!(port_of(t.lookup(Some("a.b.example.com"))), Some(3));
        assert_eq!(port_of(t.lookup(Some("example.com"))), Some(3));
        assert_eq!(port_of(t.lookup(None)), Some(3));
    }

    #[test]
    fn names_with_an_empty_label_match_no_wildcard() {
        let t = table(&[
            route("*.example.com", 2),
            route("*.a.example.com", 4),
            route("", 3),
        ]);
        // The wildcards do match one more non-empty label.
        assert_eq!(port_of(t.lookup(Some("www.example.com"))), Some(2));
        assert_eq!(port_of(t.lookup(Some("WWW.Example.com."))), Some(2));
        assert_eq!(port_of(t.lookup(Some("x.a.example.com"))), Some(4));
        for name in [
            ".example.com",
            ".example.com.",
            ".EXAMPLE.com",
            "..example.com",
            ".a.example.com",
            "a..example.com",
            "x..a.example.com",
            "www.example..com",
            "www.example.com..",
            "www..",
            ".",
            "",
        ] {
            assert_eq!(port_of(t.lookup(Some(name))), Some(3), "{name:?}");
        }
        // Without a default route they get no route at all.
        let t = table(&[route("*.example.com", 2), route("*.a.example.com", 4)]);
        for name in [".example.com", ".a.example.com", "a..example.com", "."] {
            assert_eq!(port_of(t.lookup(Some(name))), None, "{name:?}");
        }
        assert_eq!(port_of(t.lookup(Some("www.example.com"))), Some(2));
    }

    #[test]
    fn an_exact_route_is_not_reached_through_an_empty_label() {
        let t = table(&[route("api.example.com", 1), route("", 3)]);
        for name in [".api.example.com", "api..example.com", "api.example.com.."] {
            assert_eq!(port_of(t.lookup(Some(name))), Some(3), "{name:?}");
        }
    }

    /// The default route with three TCP upstreams (ports 1, 2, 3), no protocol marked.
    fn three_upstreams() -> RouteConfig {
        let mut r = route("", 1);
        r.upstreams = (1..=3)
            .map(|p| Upstream::Tcp {
                host: "127.0.0.1".into(),
                port: p,
            })
            .collect();
        r.upstream_protocols = vec![None; 3];
        r
    }

    #[test]
    fn ip_affinity_keeps_an_ip_on_its_upstream_until_the_ttl() {
        let mut r = three_upstreams();
        r.ip_affinity_ttl_ms = Some(1000);
        let t = table(&[r]);
        let cr = t.lookup(None).unwrap();
        let (a, b): (IpAddr, IpAddr) = ("192.0.2.1".parse().unwrap(), "192.0.2.2".parse().unwrap());
        let ms = 1_000_000;
        let first = cr.pick_for(a, H1, 0).unwrap();
        cr.remember(a, first, 0);
        // Round robin moves on for everyone else; `a` stays while its entry lives.
        assert_ne!(cr.pick_for(b, H1, ms).unwrap(), first);
        for now in [ms, 500 * ms, 999 * ms] {
            assert_eq!(cr.pick_for(a, H1, now).unwrap(), first);
        }
        // Each use refreshes the deadline (remember is called once connected).
        cr.remember(a, first, 999 * ms);
        assert_eq!(cr.pick_for(a, H1, 1998 * ms).unwrap(), first);
        // Past the TTL `a` is balanced again: the cursor is at the next upstream in turn.
        let next = cr.pick_for(a, H1, 2000 * ms).unwrap();
        assert_ne!(next, first);
    }

    #[test]
    fn upstream_protocols_split_the_set_with_their_own_turns() {
        // [h2, http/1.1, any, http/1.1]: h2 clients over {0, 2}, HTTP/1.1 clients over {1, 2, 3}.
        let mut r = route("", 1);
        r.upstreams = (1..=4)
            .map(|p| Upstream::Tcp {
                host: "127.0.0.1".into(),
                port: p,
            })
            .collect();
        r.upstream_protocols = vec![Some(H2), Some(H1), None, Some(H1)];
        r.ip_affinity_ttl_ms = Some(1000);
        let t = table(&[r]);
        let cr = t.lookup(None).unwrap();
        let picks = |p, n| (0..n).map(|_| cr.pick(p).unwrap()).collect::<Vec<_>>();
        assert_eq!(picks(H2, 3), [0, 2, 0]);
        assert_eq!(picks(H1, 4), [1, 2, 3, 1]);
        assert_eq!(picks(H2, 1), [2], "each protocol keeps its own turn");
        assert_eq!(cr.failover(H1, 3).collect::<Vec<_>>(), [3, 1, 2]);
        assert_eq!(cr.failover(H2, 0).collect::<Vec<_>>(), [0, 2]);
        // Affinity holds only while the remembered upstream serves the client's protocol.
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        cr.remember(ip, 0, 0);
        assert_eq!(cr.pick_for(ip, H2, 1), Some(0));
        assert_ne!(cr.pick_for(ip, H1, 1), Some(0));
        // A set without an upstream for a protocol picks none.
        let mut r = route("", 1);
        r.upstream_protocols = vec![Some(H2)];
        let t = table(&[r]);
        let cr = t.lookup(None).unwrap();
        assert_eq!((cr.pick(H2), cr.pick(H1)), (Some(0), None));
    }

    #[test]
    fn cpu_use_breaks_least_connection_ties_and_connections_dominate() {
        use crate::config::proxy::CpuSource;
        let mut r = three_upstreams();
        r.upstream_cpu = (1..=3)
            .map(|pid| Some(CpuSource { pid, tid: None }))
            .collect();
        r.balance = Balance::LeastConnections;
        let t = table(&[r]);
        let cr = t.lookup(None).unwrap();
        let cpu = |v: [u32; 3]| {
            for (c, p) in cr.upstream_cpu.iter().zip(v) {
                c.set_measured(p);
            }
        };
        // All idle: the least busy CPU wins, whatever the turn.
        cpu([900, 40, 300]);
        assert_eq!(
            (0..3).map(|_| cr.pick(H1).unwrap()).collect::<Vec<_>>(),
            [1, 1, 1]
        );
        // One open connection weighs a whole core: a busy worker with none beats an idle one
        // holding one.
        let _held = cr.hold_upstream(1);
        assert_eq!(cr.pick(H1), Some(2));
        cpu([999, 40, 1000]);
        assert_eq!(cr.pick(H1), Some(0), "scores 999, 1040, 1000");
        let s = cr.upstream_snapshots();
        assert_eq!(
            (
                s[1].upstream.as_str(),
                s[1].active_connections,
                s[1].cpu_permille
            ),
            ("127.0.0.1:2", 1, Some(40))
        );
    }

    #[test]
    fn no_default_means_no_route() {
        let t = table(&[route("*.Example.com.", 2)]);
        assert_eq!(port_of(t.lookup(Some("x.example.com"))), Some(2));
        assert_eq!(port_of(t.lookup(Some("other.org"))), None);
        assert_eq!(port_of(t.lookup(None)), None);
    }
}
