/* SPDX-License-Identifier: MIT */
/*
 * rampart.h — the layout shared by the XDP program (ebpf/rampart.c) and its loader
 * (src/xdp/abi.rs). Every map key and value is defined here once; the Rust side has a
 * #[repr(C)] twin of each struct with compile-time size and offset assertions, and the
 * _Static_asserts below pin the same numbers on the C side, so a layout drift fails the build.
 *
 * ABI: RAMPART_ABI_VERSION is part of the pin directory (/sys/fs/bpf/rampart/v<ABI>/<ifname>/)
 * and is stored in the `rampart_meta` map. Bump it whenever a struct, a map definition or the
 * meaning of a field changes: pins of an older build are then never opened (different directory),
 * and a pinned map whose type/key/value/max_entries differ from this build's is refused at load.
 *
 * Addresses: one 16-byte form for both families. IPv4 is stored IPv4-mapped (::ffff:a.b.c.d),
 * so an IPv4 /N is the 16-byte prefix /(96+N).
 *
 * Byte order: ports in keys and values are host order (the program converts the TCP
 * destination port with bpf_ntohs); addresses are network order (as on the wire).
 */
#ifndef RAMPART_H
#define RAMPART_H

#include <linux/types.h>

#define RAMPART_ABI_VERSION 3

/* Parser bounds. */
#define RAMPART_MAX_VLAN 3     /* 802.1Q / 802.1ad tags walked before the L3 header */
#define RAMPART_MAX_IPV6_EXT 8 /* IPv6 extension headers walked before giving up */

/* Map sizes (max_entries). LRU maps are preallocated: about 100 bytes per entry in the kernel.
 * The sized maps (bans, prefix bans, SYN states, known-good) are created with the loader's size
 * (the largest maxTrackedIps of the protected listeners, or xdp.maxBans); the values below are
 * the object's defaults, used by unattached loads. */
#define RAMPART_MAX_PORTS 1024       /* per policy set, including the set header at port 0 */
#define RAMPART_MAX_CIDRS (1u << 20) /* per allow/block trie per set (LPM tries are not preallocated) */
#define RAMPART_MAX_LIST_PORTS 64    /* protected ports per set that carry allow/block lists */
#define RAMPART_MAX_DYNAMIC (1u << 18)
#define RAMPART_MAX_BANS (1u << 17)
#define RAMPART_MAX_SYN_STATES (1u << 17)
#define RAMPART_MAX_KNOWN_GOOD (1u << 17)
#define RAMPART_MAX_PREFIX_BANS (1u << 17)
#define RAMPART_BUDGET_SLOTS 65536 /* one SYN-budget TAT per destination port */

/* rampart_port_policy.flags */
#define RAMPART_PORT_PROTECTED (1u << 0) /* lists, bans and the SYN limit apply */
#define RAMPART_PORT_HAS_ALLOW (1u << 1) /* the allow trie has entries for this port */
#define RAMPART_PORT_HAS_BLOCK (1u << 2) /* the block trie has entries for this port */
#define RAMPART_PORT_SYN_LIMIT (1u << 3) /* syn_interval_ns / syn_tolerance_ns are set */
#define RAMPART_PORT_BAN_RATE (1u << 4)  /* ban_interval_ns / ban_tolerance_ns: banned SYNs measured */
#define RAMPART_PORT_SYN_BUDGET (1u << 5) /* budget_*: SYNs of non-known-good sources budgeted */
#define RAMPART_SET_DROP_FRAGMENTS (1u << 6) /* set header only: every IP fragment is dropped */
#define RAMPART_PORT_SET_HEADER (1u << 31) /* port-0 entry: set-wide settings, never a listener */

/* rampart_ban.reason */
#define RAMPART_BAN_DYNAMIC 1  /* blockIp of one address: fixed deadline, never extended */
#define RAMPART_BAN_PENALTY 2  /* userspace penalty box: extended by continued SYN excess */
#define RAMPART_BAN_SYNFLOOD 3 /* the kernel SYN limit: extended by continued SYN excess */

/* Index into rampart_counters (a per-CPU array of __u64). */
#define RAMPART_CNT_PASSED 0
#define RAMPART_CNT_DROP_CIDR 1
#define RAMPART_CNT_DROP_DYNAMIC 2
#define RAMPART_CNT_DROP_PENALTY 3
#define RAMPART_CNT_DROP_SYNFLOOD 4
#define RAMPART_CNT_DROP_UNPARSED 5
#define RAMPART_CNT_BAN_EXTENDED 6 /* deadline pushed forward by SYN excess while banned */
#define RAMPART_CNT_BANNED 7       /* sources banned by the kernel SYN limit */
#define RAMPART_CNT_DROP_SYN_BUDGET 8 /* SYNs of non-known-good sources beyond the port's budget */
#define RAMPART_CNT_DROP_NON_TCP 9    /* UDP / UDP-Lite / SCTP / DCCP to a protected port */
#define RAMPART_CNT_DROP_FRAGMENT 10  /* IP fragments (RAMPART_SET_DROP_FRAGMENTS) */
#define RAMPART_CNT_MAX 11

/* Value of rampart_meta[0], written by the loader; a mismatch with a pinned copy is refused. */
struct rampart_meta {
	__u32 abi_version;
	__u32 layout; /* RAMPART_LAYOUT: the struct sizes below folded into one number */
};

/* Key of the per-set port maps: the TCP destination port, host order. Port 0 holds the set
 * header (flags = RAMPART_PORT_SET_HEADER, ipv6_prefix_len) used for packets whose port cannot
 * be read. */
struct rampart_port_policy {
	__u32 flags;           /* RAMPART_PORT_* */
	__u32 syn_per_second;  /* informational: the configured rate (SYN/s), 0 = no limit */
	__u32 syn_burst;       /* informational: the configured burst (SYNs) */
	__u32 ipv6_prefix_len; /* IPv6 sources share bans and SYN state by this prefix (0..128) */
	__u64 syn_interval_ns; /* GCRA emission interval T = 1e9 / syn_per_second */
	__u64 syn_tolerance_ns; /* GCRA tolerance tau = T * (syn_burst - 1) */
	__u64 penalty_ns;      /* ban duration after SYN excess, and its extension while banned */
	__u32 list_bit;        /* this port's bit in allow/block values (0..63) */
	__u32 syn_budget_per_second; /* informational: xdp.synBudgetPerSecond, 0 = no budget */
	__u64 ban_interval_ns;  /* GCRA T of a banned source's SYNs (synPerSecond's, else rateLimit's) */
	__u64 ban_tolerance_ns; /* its tau */
	__u64 budget_interval_ns;  /* GCRA T of the port's SYN budget = 1e9 / synBudgetPerSecond */
	__u64 budget_tolerance_ns; /* its tau = T * (budget - 1): one second's worth at once */
};

/* Key of the allow and block LPM tries: prefixlen = 96 + N for IPv4 /N, N for IPv6 /N.
 * Value (__u64): a bitmask of the ports (their list_bit) whose list holds the CIDR, OR-ed with
 * the bits of every same-family CIDR that covers it (a longest-prefix hit never hides a
 * shorter entry of another port). Value 0 at ::ffff:0:0/96 is the family marker, written when
 * an IPv6 CIDR such as ::/0 covers the IPv4-mapped range so it never matches IPv4 sources.
 * Any bit set = listed on some port: used when the port cannot be read. */
struct rampart_cidr_key {
	__u32 prefixlen;
	__u8 addr[16];
};

/* Key of the dynamic-block LPM trie. prefixlen counts bits of the data that follows it:
 * 16 bits of scope, then the address prefix, i.e. 16 + 96 + N for IPv4 /N and 16 + N for
 * IPv6 /N. scope is the listener port the block belongs to, or 0 for every listener port.
 * The IPv4 family marker of rampart_cidr_key exists here too, per scope (deadlines 0). */
struct rampart_lpm_key {
	__u32 prefixlen;
	__u16 scope;
	__u8 addr[16];
	__u16 pad; /* beyond any prefixlen: never compared */
};

/* Value of the dynamic trie. Userspace stores effective deadlines: the maximum over every
 * entry of the same scope that covers this prefix, so a longest-prefix hit never hides a live
 * shorter block. CLOCK_MONOTONIC ns (bpf_ktime_get_ns); U64_MAX = no expiry, 0 = none. */
struct rampart_dyn_value {
	__u64 all_deadline_ns; /* blocks this prefix on the scope's port(s) until then */
	__u64 any_deadline_ns; /* scope 0 only: blocked on some port; used when the port is unknown */
};

/* Key of the ban LRU hash and part of the SYN state key: a source address, IPv4-mapped for
 * IPv4, IPv6 masked to ipv6_prefix_len. Boxed prefixes of the prefix tier live in the prefix-ban
 * LPM trie instead (key: struct rampart_cidr_key, value: struct rampart_ban). */
struct rampart_ip {
	__u8 addr[16];
};

struct rampart_ban {
	__u64 deadline_ns; /* CLOCK_MONOTONIC ns; the ban is live while now < deadline_ns */
	__u64 tat_ns;      /* GCRA TAT of the banned source's SYNs (RAMPART_PORT_BAN_RATE) */
	__u32 reason;      /* RAMPART_BAN_* */
	__u16 port;        /* listener port the ban was made for (blockedIps lists it there) */
	__u16 prefix_len;  /* bits of the source the key holds: 32 (IPv4) or the port's IPv6 prefix */
};

/* Key of the per-source SYN GCRA state (one limit per (source, listener port)) and of the
 * known-good LRU map (value: __u64 CLOCK_MONOTONIC deadline ns of the known-good mark). */
struct rampart_syn_key {
	__u8 addr[16];
	__u16 port; /* host order */
	__u16 pad;
};

struct rampart_syn_state {
	__u64 tat_ns; /* GCRA theoretical arrival time, CLOCK_MONOTONIC ns */
};

_Static_assert(sizeof(struct rampart_meta) == 8, "rampart_meta layout");
_Static_assert(sizeof(struct rampart_port_policy) == 80, "rampart_port_policy layout");
_Static_assert(__builtin_offsetof(struct rampart_port_policy, ban_interval_ns) == 48, "policy");
_Static_assert(__builtin_offsetof(struct rampart_port_policy, budget_tolerance_ns) == 72, "policy");
_Static_assert(__builtin_offsetof(struct rampart_port_policy, list_bit) == 40, "policy");
_Static_assert(sizeof(struct rampart_cidr_key) == 20, "rampart_cidr_key layout");
_Static_assert(__builtin_offsetof(struct rampart_port_policy, syn_interval_ns) == 16, "policy");
_Static_assert(__builtin_offsetof(struct rampart_port_policy, penalty_ns) == 32, "policy");
_Static_assert(sizeof(struct rampart_lpm_key) == 24, "rampart_lpm_key layout");
_Static_assert(__builtin_offsetof(struct rampart_lpm_key, addr) == 6, "rampart_lpm_key layout");
_Static_assert(sizeof(struct rampart_dyn_value) == 16, "rampart_dyn_value layout");
_Static_assert(sizeof(struct rampart_ip) == 16, "rampart_ip layout");
_Static_assert(sizeof(struct rampart_ban) == 24, "rampart_ban layout");
_Static_assert(__builtin_offsetof(struct rampart_ban, reason) == 16, "rampart_ban layout");
_Static_assert(sizeof(struct rampart_syn_key) == 20, "rampart_syn_key layout");
_Static_assert(__builtin_offsetof(struct rampart_syn_key, port) == 16, "rampart_syn_key layout");
_Static_assert(sizeof(struct rampart_syn_state) == 8, "rampart_syn_state layout");

/* The sizes above folded into one number, stored in rampart_meta.layout. */
#define RAMPART_LAYOUT                                                                        \
	((sizeof(struct rampart_port_policy) << 24) | (sizeof(struct rampart_lpm_key) << 16) |   \
	 (sizeof(struct rampart_cidr_key) << 8) | sizeof(struct rampart_syn_key))

#endif /* RAMPART_H */
