// SPDX-License-Identifier: MIT
/*
 * rampart.c — Rampart's XDP filter: per-listener CIDR lists, dynamic blocks, bans (per source
 * and per boxed prefix), a per-source SYN limit (GCRA), a per-port SYN budget for sources that
 * are not known-good, non-TCP and fragment drops, decided before the kernel allocates an skb.
 *
 * Scope: the program acts on TCP connection attempts (SYN without ACK) whose destination port
 * has an entry in the live port-policy map: a blocked or banned source cannot open new
 * connections, exactly like the userspace engine, which refuses at accept. UDP, UDP-Lite, SCTP
 * and DCCP packets to a protected port are dropped (nonTcp): nothing listens there but the TCP
 * proxy. With the set header's RAMPART_SET_DROP_FRAGMENTS every IPv4 fragment (MF or offset set)
 * and every IPv6 packet with a fragment header is dropped (fragment), whatever its port.
 * Everything else — other ports (an operator's SSH), ICMP, segments of established connections —
 * is XDP_PASS. One exception, by design: a packet from a banned or blocklisted source whose port
 * cannot be read (IPv4/IPv6 non-first fragment, ESP, IP-in-IP, GRE, too many IPv6 extension
 * headers, a cut TCP header) is dropped and counted as unparsed, since it may carry a SYN to a
 * protected port.
 *
 * Decision order for a SYN to a protected port (the userspace check order): allowlist (pass,
 * skips everything) → blocklist (drop, cidr) → dynamic blocks (drop, dynamic) → live ban of the
 * source, then of its longest boxed prefix (drop, by ban reason) → SYN limit (conforming: go on;
 * excess: ban for penalty_ns, drop, synFlood) → SYN budget (known-good source: pass; else within
 * the port's budget: pass; beyond: drop, synBudget).
 * While banned (reason penalty or synFlood) each SYN is measured against the port's ban rate
 * (xdp.synPerSecond, else the listener's rateLimit) with a GCRA whose TAT lives in the ban value:
 * a conforming one is debited, an excess one moves the deadline to now + penalty_ns (never
 * backwards, saturating) — the userspace penalty-box rule. So a source that keeps flooding stays
 * banned, and is released penalty_ns after its excess stops.
 *
 * Policy sets: the port, allow and block maps exist twice; rampart_active[0] (one u32) names
 * the live set. The loader fills the idle set, then writes the index, so a packet sees either
 * the old or the new policy, never a mix (the set is read once per packet). The allow and
 * block tries of a set serve every port: one key per CIDR, valued with the bitmask of the
 * ports (their list_bit) whose list holds it.
 *
 * SYN budget: one GCRA TAT per port in a shared (not per-CPU) array, updated with a
 * compare-and-swap: the budget is exact whatever the RSS spread (a per-CPU budget would admit up
 * to n_cpus × the budget when the flood hashes onto every queue, and starve a queue it hashes
 * onto alone). The cost is one contended cache line per non-known-good SYN during a flood; a
 * CAS lost CAS_TRIES times counts as over budget (fail-closed for unknown sources only).
 *
 * Bounds: at most RAMPART_MAX_VLAN VLAN tags and RAMPART_MAX_IPV6_EXT IPv6 extension headers
 * are walked; every read is bounds-checked against data_end. Cost per SYN to a protected
 * port: one array + one hash lookup, up to 1 + 1 + 2 LPM lookups, one LRU hash lookup, one LPM
 * lookup (prefix bans), for a SYN limit one more LRU lookup and a compare-and-swap, for a SYN
 * budget one LRU lookup (known-good) and one array CAS. A fragment costs one more hash lookup
 * (the set header). Time is bpf_ktime_get_ns (CLOCK_MONOTONIC ns), the clock the loader's
 * deadlines use.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "rampart.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* ---- maps (pinned by name under the loader's pin directory) ---- */

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rampart_meta);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} rampart_meta SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} rampart_active SEC(".maps");

#define PORT_MAP(name)                                                                        \
	struct {                                                                              \
		__uint(type, BPF_MAP_TYPE_HASH);                                              \
		__uint(max_entries, RAMPART_MAX_PORTS);                                       \
		__type(key, __u16);                                                           \
		__type(value, struct rampart_port_policy);                                    \
		__uint(pinning, LIBBPF_PIN_BY_NAME);                                          \
	} name SEC(".maps")

#define LPM_MAP(name, key_type, value_type, entries)                                          \
	struct {                                                                              \
		__uint(type, BPF_MAP_TYPE_LPM_TRIE);                                          \
		__uint(max_entries, entries);                                                 \
		__uint(map_flags, BPF_F_NO_PREALLOC);                                         \
		__type(key, key_type);                                                        \
		__type(value, value_type);                                                    \
		__uint(pinning, LIBBPF_PIN_BY_NAME);                                          \
	} name SEC(".maps")

PORT_MAP(rampart_ports0);
PORT_MAP(rampart_ports1);
LPM_MAP(rampart_allow0, struct rampart_cidr_key, __u64, RAMPART_MAX_CIDRS);
LPM_MAP(rampart_allow1, struct rampart_cidr_key, __u64, RAMPART_MAX_CIDRS);
LPM_MAP(rampart_block0, struct rampart_cidr_key, __u64, RAMPART_MAX_CIDRS);
LPM_MAP(rampart_block1, struct rampart_cidr_key, __u64, RAMPART_MAX_CIDRS);
LPM_MAP(rampart_dyn, struct rampart_lpm_key, struct rampart_dyn_value, RAMPART_MAX_DYNAMIC);

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, RAMPART_MAX_BANS);
	__type(key, struct rampart_ip);
	__type(value, struct rampart_ban);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} rampart_bans SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, RAMPART_MAX_SYN_STATES);
	__type(key, struct rampart_syn_key);
	__type(value, struct rampart_syn_state);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} rampart_syn SEC(".maps");

/* Boxed prefixes of the prefix tier (prefixLimit): longest prefix holding the source. */
LPM_MAP(rampart_prefix_bans, struct rampart_cidr_key, struct rampart_ban, RAMPART_MAX_PREFIX_BANS);

/* Known-good sources per (source, port), mirrored from userspace: value = mark deadline ns. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, RAMPART_MAX_KNOWN_GOOD);
	__type(key, struct rampart_syn_key);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} rampart_known_good SEC(".maps");

/* The SYN budget's GCRA TAT per destination port (shared by every CPU, see the header). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, RAMPART_BUDGET_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} rampart_budget SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, RAMPART_CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} rampart_stats SEC(".maps");

/* ---- wire headers (only the fields read) ---- */

struct eth_hdr {
	__u8 dst[6];
	__u8 src[6];
	__be16 proto;
} __attribute__((packed));

struct vlan_hdr {
	__be16 tci;
	__be16 proto;
};

struct ipv4_hdr {
	__u8 ver_ihl;
	__u8 tos;
	__be16 tot_len;
	__be16 id;
	__be16 frag_off;
	__u8 ttl;
	__u8 protocol;
	__u16 check;
	__be32 saddr;
	__be32 daddr;
};

struct ipv6_hdr {
	__be32 ver_tc_flow;
	__be16 payload_len;
	__u8 nexthdr;
	__u8 hop_limit;
	__u8 saddr[16];
	__u8 daddr[16];
};

struct ipv6_ext_hdr {
	__u8 nexthdr;
	__u8 hdrlen;
	__be16 frag_off; /* fragment header only */
};

struct tcp_hdr {
	__be16 source;
	__be16 dest;
	__be32 seq;
	__be32 ack_seq;
	__u8 doff_res;
	__u8 flags;
	__be16 window;
	__u16 check;
	__be16 urg_ptr;
};

#define ETH_P_IPV4 0x0800
#define ETH_P_IPV6 0x86DD
#define ETH_P_8021Q 0x8100
#define ETH_P_8021AD 0x88A8

#define TCP_FLAG_SYN 0x02
#define TCP_FLAG_ACK 0x10

#define PROTO_TCP 6
#define PROTO_UDP 17
#define PROTO_DCCP 33
#define PROTO_SCTP 132
#define PROTO_UDPLITE 136

enum parse_result {
	PARSE_IGNORE = 0,   /* not ours: no source address, or no port-carrying L4 */
	PARSE_TCP = 1,      /* source, destination port and flags read */
	PARSE_UNPARSED = 2, /* source read, port not: fragment, encapsulation, cut header */
	PARSE_OTHER_L4 = 3, /* UDP / UDP-Lite / SCTP / DCCP: source and destination port read */
};

struct pkt {
	struct rampart_ip src; /* IPv4-mapped or IPv6, not masked */
	__u16 dport;           /* host order */
	__u8 flags;            /* TCP flags */
	__u8 is_v6;            /* native IPv6 source (masked by ipv6_prefix_len for bans) */
	__u8 frag;             /* an IP fragment (IPv4 MF or offset, IPv6 fragment header) */
};

/* Transports with a 16-bit destination port at offset 2, other than TCP. */
static __always_inline int ported_l4(__u8 proto)
{
	return proto == PROTO_UDP || proto == PROTO_UDPLITE || proto == PROTO_SCTP ||
	       proto == PROTO_DCCP;
}

/* UDP-like header: the destination port only. A cut header is ignored (nothing to judge). */
static __always_inline int parse_ported(void *l4, void *end, struct pkt *p)
{
	__be16 *ports = l4;

	if ((void *)(ports + 2) > end)
		return PARSE_IGNORE;
	p->dport = bpf_ntohs(ports[1]);
	return PARSE_OTHER_L4;
}

/* Protocols whose payload may hide a TCP header we do not parse. */
static __always_inline int opaque_l4(__u8 proto)
{
	return proto == 4 /* IPIP */ || proto == 41 /* IPv6-in-IP */ || proto == 47 /* GRE */ ||
	       proto == 50 /* ESP */ || proto == 51 /* AH (IPv4) */ || proto == 115 /* L2TPv3 */ ||
	       proto == 137 /* MPLS-in-IP */;
}

static __always_inline int parse_tcp(void *l4, void *end, struct pkt *p)
{
	struct tcp_hdr *t = l4;

	if ((void *)(t + 1) > end)
		return PARSE_UNPARSED;
	p->dport = bpf_ntohs(t->dest);
	p->flags = t->flags;
	return PARSE_TCP;
}

static __always_inline int parse_ipv4(void *cur, void *end, struct pkt *p)
{
	struct ipv4_hdr *ip = cur;
	__u32 ihl;

	if ((void *)(ip + 1) > end || (ip->ver_ihl >> 4) != 4)
		return PARSE_IGNORE;
	p->src.addr[10] = 0xff;
	p->src.addr[11] = 0xff;
	__builtin_memcpy(&p->src.addr[12], &ip->saddr, 4);
	ihl = (ip->ver_ihl & 0x0f) * 4;
	if (ihl < sizeof(*ip))
		return PARSE_UNPARSED;
	if (ip->frag_off & bpf_htons(0x3fff)) /* MF or an offset: a fragment */
		p->frag = 1;
	if (ip->frag_off & bpf_htons(0x1fff)) /* fragment offset != 0: no L4 header here */
		return PARSE_UNPARSED;
	if (ip->protocol == PROTO_TCP)
		return parse_tcp(cur + ihl, end, p);
	if (ported_l4(ip->protocol))
		return parse_ported(cur + (ihl & 0x3c), end, p);
	return opaque_l4(ip->protocol) ? PARSE_UNPARSED : PARSE_IGNORE;
}

static __always_inline int parse_ipv6(void *cur, void *end, struct pkt *p)
{
	struct ipv6_hdr *ip6 = cur;
	__u8 nh;

	if ((void *)(ip6 + 1) > end || (((__u8 *)ip6)[0] >> 4) != 6)
		return PARSE_IGNORE;
	__builtin_memcpy(p->src.addr, ip6->saddr, 16);
	p->is_v6 = 1;
	nh = ip6->nexthdr;
	cur = ip6 + 1;

#pragma unroll
	for (int i = 0; i < RAMPART_MAX_IPV6_EXT; i++) {
		struct ipv6_ext_hdr *ext = cur;

		switch (nh) {
		case 0:   /* hop-by-hop options */
		case 43:  /* routing */
		case 60:  /* destination options */
		case 135: /* mobility */
		case 139: /* HIP */
		case 140: /* shim6 */
			if ((void *)ext + 2 > end)
				return PARSE_UNPARSED;
			nh = ext->nexthdr;
			cur += ((__u32)ext->hdrlen + 1) * 8;
			break;
		case 51: /* AH: length in 4-byte units, minus 2 */
			if ((void *)ext + 2 > end)
				return PARSE_UNPARSED;
			nh = ext->nexthdr;
			cur += ((__u32)ext->hdrlen + 2) * 4;
			break;
		case 44: /* fragment */
			p->frag = 1;
			if ((void *)(ext + 1) > end)
				return PARSE_UNPARSED;
			if (ext->frag_off & bpf_htons(0xfff8)) /* non-first fragment */
				return PARSE_UNPARSED;
			nh = ext->nexthdr;
			cur += 8;
			break;
		case PROTO_TCP:
			return parse_tcp(cur, end, p);
		case PROTO_UDP:
		case PROTO_UDPLITE:
		case PROTO_SCTP:
		case PROTO_DCCP:
			return parse_ported(cur, end, p);
		default:
			return opaque_l4(nh) ? PARSE_UNPARSED : PARSE_IGNORE;
		}
	}
	/* Still inside the extension chain after the bound: its L4 header is out of reach. */
	if (nh == PROTO_TCP)
		return parse_tcp(cur, end, p);
	return (nh == 0 || nh == 43 || nh == 60 || nh == 135 || nh == 139 || nh == 140 ||
		nh == 51 || nh == 44 || opaque_l4(nh))
		       ? PARSE_UNPARSED
		       : PARSE_IGNORE;
}

static __always_inline int parse(struct xdp_md *ctx, struct pkt *p)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct eth_hdr *eth = data;
	void *cur;
	__be16 proto;

	if ((void *)(eth + 1) > end)
		return PARSE_IGNORE;
	proto = eth->proto;
	cur = eth + 1;

#pragma unroll
	for (int i = 0; i < RAMPART_MAX_VLAN; i++) {
		struct vlan_hdr *vlan = cur;

		if (proto != bpf_htons(ETH_P_8021Q) && proto != bpf_htons(ETH_P_8021AD))
			break;
		if ((void *)(vlan + 1) > end)
			return PARSE_IGNORE;
		proto = vlan->proto;
		cur = vlan + 1;
	}
	/* Fold the 0..3-tag paths into one verifier state (an offset known only to be < 64), so
	 * the L3/L4 code is verified once instead of once per tag count. */
	cur = data + ((__u32)(cur - data) & 0x3f);

	if (proto == bpf_htons(ETH_P_IPV4))
		return parse_ipv4(cur, end, p);
	if (proto == bpf_htons(ETH_P_IPV6))
		return parse_ipv6(cur, end, p);
	/* ARP, MPLS, PPPoE, a fourth VLAN tag, ...: no source address read. */
	return PARSE_IGNORE;
}

/* ---- helpers ---- */

static __always_inline __u64 sat_add(__u64 a, __u64 b)
{
	__u64 s = a + b;

	return s < a ? ~0ULL : s;
}

static __always_inline int count(__u32 idx)
{
	__u64 *c = bpf_map_lookup_elem(&rampart_stats, &idx);

	if (c)
		*c += 1;
	return 0;
}

static __always_inline int pass(void)
{
	count(RAMPART_CNT_PASSED);
	return XDP_PASS;
}

static __always_inline int drop(__u32 counter)
{
	count(counter);
	return XDP_DROP;
}

static __always_inline __u32 active_set(void)
{
	__u32 zero = 0;
	__u32 *set = bpf_map_lookup_elem(&rampart_active, &zero);

	return set ? (*set & 1) : 0;
}

static __always_inline struct rampart_port_policy *port_policy(__u32 set, __u16 port)
{
	if (set)
		return bpf_map_lookup_elem(&rampart_ports1, &port);
	return bpf_map_lookup_elem(&rampart_ports0, &port);
}

/* Port bits of the longest allow/block prefix holding the source (0: not listed; also the
 * IPv4 family marker's value, see src/xdp/lpm.rs). */
static __always_inline __u64 bits(__u64 *v)
{
	return v ? *v : 0;
}

static __always_inline __u64 allow_bits(__u32 set, struct rampart_cidr_key *k)
{
	if (set)
		return bits(bpf_map_lookup_elem(&rampart_allow1, k));
	return bits(bpf_map_lookup_elem(&rampart_allow0, k));
}

static __always_inline __u64 block_bits(__u32 set, struct rampart_cidr_key *k)
{
	if (set)
		return bits(bpf_map_lookup_elem(&rampart_block1, k));
	return bits(bpf_map_lookup_elem(&rampart_block0, k));
}

static __always_inline void cidr_key(struct rampart_cidr_key *k, struct pkt *p)
{
	k->prefixlen = 128;
	__builtin_memcpy(k->addr, p->src.addr, 16);
}

static __always_inline void lpm_key(struct rampart_lpm_key *k, __u16 scope, struct pkt *p)
{
	k->prefixlen = 16 + 128;
	k->scope = scope;
	__builtin_memcpy(k->addr, p->src.addr, 16);
	k->pad = 0;
}

/* Dynamic block live for this source at `scope`: `any` selects the any-port deadline. */
static __always_inline int dyn_blocked(struct rampart_lpm_key *k, __u16 scope, __u64 now,
				       int any)
{
	struct rampart_dyn_value *v;

	k->scope = scope;
	v = bpf_map_lookup_elem(&rampart_dyn, k);
	if (!v)
		return 0;
	return (any ? v->any_deadline_ns : v->all_deadline_ns) > now;
}

static __always_inline int is_v4_mapped(const __u8 *a)
{
	return a[0] == 0 && a[1] == 0 && a[2] == 0 && a[3] == 0 && a[4] == 0 && a[5] == 0 &&
	       a[6] == 0 && a[7] == 0 && a[8] == 0 && a[9] == 0 && a[10] == 0xff && a[11] == 0xff;
}

/* The ban / SYN-state identity of a source: IPv6 masked to prefix_len bits, IPv4 as is.
 * Branch-light: the address is masked as two big-endian 64-bit halves. */
static __always_inline void source_id(struct rampart_ip *id, struct pkt *p, __u32 prefix_len)
{
	__u64 hi, lo, hi_mask, lo_mask;

	__builtin_memcpy(id->addr, p->src.addr, 16);
	if (!p->is_v6 || is_v4_mapped(p->src.addr) || prefix_len >= 128)
		return;
	__builtin_memcpy(&hi, &id->addr[0], 8);
	__builtin_memcpy(&lo, &id->addr[8], 8);
	if (prefix_len >= 64) {
		hi_mask = ~0ULL;
		lo_mask = prefix_len == 64 ? 0 : ~0ULL << (128 - prefix_len);
	} else {
		hi_mask = prefix_len == 0 ? 0 : ~0ULL << (64 - prefix_len);
		lo_mask = 0;
	}
	hi &= bpf_cpu_to_be64(hi_mask);
	lo &= bpf_cpu_to_be64(lo_mask);
	__builtin_memcpy(&id->addr[0], &hi, 8);
	__builtin_memcpy(&id->addr[8], &lo, 8);
}

static __always_inline int ban_live(struct rampart_ban *b, __u64 now)
{
	return b && b->deadline_ns > now;
}

/* The counter a live ban's drops are booked under. */
static __always_inline __u32 ban_counter(__u32 reason)
{
	if (reason == RAMPART_BAN_DYNAMIC)
		return RAMPART_CNT_DROP_DYNAMIC;
	if (reason == RAMPART_BAN_SYNFLOOD)
		return RAMPART_CNT_DROP_SYNFLOOD;
	return RAMPART_CNT_DROP_PENALTY;
}

#define GCRA_EXCESS 0
#define GCRA_CONFORM 1
#define CAS_TRIES 4

/*
 * GCRA on the (source, port) state: conforming iff TAT - tau <= now, i.e. max(TAT, now) - now
 * <= tau; a conforming SYN moves TAT to max(TAT, now) + T, an excess one leaves it unchanged
 * (a refused attempt does not consume). One compare-and-swap per decision; under contention
 * on one source from several CPUs it retries CAS_TRIES times, then counts as excess.
 */
static __always_inline int gcra_tat(__u64 *tat_p, __u64 now, __u64 interval, __u64 tolerance)
{
#pragma unroll
	for (int i = 0; i < CAS_TRIES; i++) {
		__u64 tat = *(volatile __u64 *)tat_p;
		__u64 base = tat > now ? tat : now;

		if (base - now > tolerance)
			return GCRA_EXCESS;
		if (__sync_val_compare_and_swap(tat_p, tat, sat_add(base, interval)) == tat)
			return GCRA_CONFORM;
	}
	return GCRA_EXCESS;
}

static __always_inline int gcra(struct rampart_syn_key *key, __u64 now, __u64 interval,
				__u64 tolerance)
{
	struct rampart_syn_state *st = bpf_map_lookup_elem(&rampart_syn, key);

	if (!st) {
		struct rampart_syn_state first = {.tat_ns = sat_add(now, interval)};

		if (bpf_map_update_elem(&rampart_syn, key, &first, BPF_NOEXIST) == 0)
			return GCRA_CONFORM;
		st = bpf_map_lookup_elem(&rampart_syn, key);
		if (!st)
			return GCRA_CONFORM;
	}
	return gcra_tat(&st->tat_ns, now, interval, tolerance);
}

/* deadline = max(deadline, target): never backwards. */
static __always_inline void extend_ban(struct rampart_ban *b, __u64 target)
{
#pragma unroll
	for (int i = 0; i < CAS_TRIES; i++) {
		__u64 old = *(volatile __u64 *)&b->deadline_ns;

		if (old >= target)
			return;
		if (__sync_val_compare_and_swap(&b->deadline_ns, old, target) == old) {
			count(RAMPART_CNT_BAN_EXTENDED);
			return;
		}
	}
}

/* A SYN from a banned source (or prefix): measured against the port's ban rate; excess extends
 * the ban to now + penalty_ns. Dynamic bans (blockIp) keep their fixed deadline. */
static __always_inline void judge_banned(struct rampart_ban *ban, struct rampart_port_policy *pol,
					 __u64 now)
{
	if (ban->reason == RAMPART_BAN_DYNAMIC || !(pol->flags & RAMPART_PORT_BAN_RATE))
		return;
	if (gcra_tat(&ban->tat_ns, now, pol->ban_interval_ns, pol->ban_tolerance_ns) ==
	    GCRA_EXCESS)
		extend_ban(ban, sat_add(now, pol->penalty_ns));
}

/* ---- decisions ---- */

/* Port unknown: drop only if the source is blocked or banned somewhere. */
static __always_inline int decide_unparsed(__u32 set, struct pkt *p)
{
	struct rampart_port_policy *hdr = port_policy(set, 0);
	struct rampart_cidr_key ck;
	struct rampart_lpm_key k;
	struct rampart_ip id;
	__u64 now;

	if (!hdr)
		return pass();
	cidr_key(&ck, p);
	if (allow_bits(set, &ck)) /* allowlisted on some port */
		return pass();
	if (block_bits(set, &ck)) /* blocklisted on some port */
		return drop(RAMPART_CNT_DROP_UNPARSED);
	lpm_key(&k, 0, p);
	now = bpf_ktime_get_ns();
	if (dyn_blocked(&k, 0, now, 1))
		return drop(RAMPART_CNT_DROP_UNPARSED);
	source_id(&id, p, hdr->ipv6_prefix_len);
	if (ban_live(bpf_map_lookup_elem(&rampart_bans, &id), now))
		return drop(RAMPART_CNT_DROP_UNPARSED);
	if (ban_live(bpf_map_lookup_elem(&rampart_prefix_bans, &ck), now))
		return drop(RAMPART_CNT_DROP_UNPARSED);
	return pass();
}

static __always_inline int decide_syn(__u32 set, struct rampart_port_policy *pol, struct pkt *p)
{
	__u32 flags = pol->flags;
	__u64 bit = 1ULL << (pol->list_bit & 63);
	struct rampart_cidr_key ck;
	struct rampart_lpm_key k;
	struct rampart_syn_key sk;
	struct rampart_ban *ban;
	struct rampart_ip id;
	__u64 now;

	lpm_key(&k, p->dport, p);
	if (!(flags & RAMPART_PORT_PROTECTED)) {
		/* A listener without protection: only dynamic blocks (blockIp) apply. */
		now = bpf_ktime_get_ns();
		if (dyn_blocked(&k, p->dport, now, 0) || dyn_blocked(&k, 0, now, 0))
			return drop(RAMPART_CNT_DROP_DYNAMIC);
		return pass();
	}
	cidr_key(&ck, p);
	if ((flags & RAMPART_PORT_HAS_ALLOW) && (allow_bits(set, &ck) & bit))
		return pass();
	if ((flags & RAMPART_PORT_HAS_BLOCK) && (block_bits(set, &ck) & bit))
		return drop(RAMPART_CNT_DROP_CIDR);
	now = bpf_ktime_get_ns();
	if (dyn_blocked(&k, p->dport, now, 0) || dyn_blocked(&k, 0, now, 0))
		return drop(RAMPART_CNT_DROP_DYNAMIC);

	source_id(&id, p, pol->ipv6_prefix_len);
	__builtin_memcpy(sk.addr, id.addr, 16);
	sk.port = p->dport;
	sk.pad = 0;

	ban = bpf_map_lookup_elem(&rampart_bans, &id);
	if (ban_live(ban, now)) {
		__u32 reason = ban->reason;

		judge_banned(ban, pol, now);
		return drop(ban_counter(reason));
	}
	ban = bpf_map_lookup_elem(&rampart_prefix_bans, &ck);
	if (ban_live(ban, now)) {
		__u32 reason = ban->reason;

		judge_banned(ban, pol, now);
		return drop(ban_counter(reason));
	}

	if ((flags & RAMPART_PORT_SYN_LIMIT) &&
	    gcra(&sk, now, pol->syn_interval_ns, pol->syn_tolerance_ns) == GCRA_EXCESS) {
		struct rampart_ban fresh = {
			.deadline_ns = sat_add(now, pol->penalty_ns),
			/* The burst was just exceeded: the next SYN within T extends. */
			.tat_ns = sat_add(now, sat_add(pol->ban_tolerance_ns, pol->ban_interval_ns)),
			.reason = RAMPART_BAN_SYNFLOOD,
			.port = p->dport,
			.prefix_len = (p->is_v6 && !is_v4_mapped(p->src.addr)) ? pol->ipv6_prefix_len : 32,
		};

		bpf_map_update_elem(&rampart_bans, &id, &fresh, BPF_ANY);
		count(RAMPART_CNT_BANNED);
		return drop(RAMPART_CNT_DROP_SYNFLOOD);
	}

	if (flags & RAMPART_PORT_SYN_BUDGET) {
		__u64 *kg = bpf_map_lookup_elem(&rampart_known_good, &sk);
		__u32 slot = p->dport;
		__u64 *tat;

		if (kg && *kg > now)
			return pass();
		tat = bpf_map_lookup_elem(&rampart_budget, &slot);
		if (tat && gcra_tat(tat, now, pol->budget_interval_ns, pol->budget_tolerance_ns) ==
			       GCRA_EXCESS)
			return drop(RAMPART_CNT_DROP_SYN_BUDGET);
	}
	return pass();
}

SEC("xdp")
int rampart_xdp(struct xdp_md *ctx)
{
	struct pkt p = {};
	struct rampart_port_policy *pol;
	__u32 set;
	int parsed = parse(ctx, &p);

	if (p.frag) {
		struct rampart_port_policy *hdr;

		set = active_set();
		hdr = port_policy(set, 0);
		if (hdr && (hdr->flags & RAMPART_SET_DROP_FRAGMENTS))
			return drop(RAMPART_CNT_DROP_FRAGMENT);
	}
	if (parsed == PARSE_IGNORE)
		return pass();
	set = active_set();
	if (parsed == PARSE_UNPARSED)
		return decide_unparsed(set, &p);
	pol = port_policy(set, p.dport);
	if (!pol || p.dport == 0)
		return pass();
	if (parsed == PARSE_OTHER_L4)
		return (pol->flags & RAMPART_PORT_PROTECTED) ? drop(RAMPART_CNT_DROP_NON_TCP) : pass();
	/* Only connection attempts are judged; established traffic is never touched. */
	if ((p.flags & (TCP_FLAG_SYN | TCP_FLAG_ACK)) != TCP_FLAG_SYN)
		return pass();
	return decide_syn(set, pol, &p);
}
