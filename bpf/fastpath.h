/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Definitions shared by the XDP fast path (fastpath.c) and its Go control
 * plane (bpf2go generates the Go types from these with -type). Change both
 * sides together: the layouts are the contract. */
#ifndef SLUICE_FASTPATH_H
#define SLUICE_FASTPATH_H

#include <linux/types.h>
#include <linux/bpf.h>

/* Distinct selector shapes (prefix lengths, proto, port masks) per family
 * and generation. More shapes than this and the control plane refuses the
 * policy set (everything goes to the kernel) rather than guess. */
#define FP_MAX_TUPLES 64
#define FP_DIRS 3 /* XFRM_POLICY_IN, _OUT, _FWD */
#define FP_FAM_V4 0
#define FP_FAM_V6 1
/* Interfaces get a counter slot (1..FP_MAX_IFACE_SLOTS-1); slot 0 counts
 * packets from interfaces the gateway does not know. */
#define FP_MAX_IFACE_SLOTS 64
/* fwd_dsts: one bit per value of a destination's first FP_DST_BITS bits
 * (an IPv4 /24; for IPv6, its first 24 bits), per family. */
#define FP_DST_BITS 24
#define FP_DST_WORDS (1 << (FP_DST_BITS - 6)) /* 64-bit words per family */
/* Per-policy counter slots (policy_counts, policy_slots): the control plane
 * gives each policy of the tables a dense slot, 1..FP_MAX_COUNTER_SLOTS-1,
 * kept while the policy exists; slot 0 counts nothing. */
#define FP_MAX_COUNTER_SLOTS 262144
/* Redirect ports (tx_ports, a DEVMAP array): the control plane numbers
 * every device a forward may leave by, 1..FP_MAX_PORTS-1 (0: none), and
 * never gives a number back out before the numbers after it were all
 * used: a cached flow holds its egress's number, and a device that took
 * over a freed number is not the one the flow was decided for. */
#define FP_MAX_PORTS 4096

enum fp_action {
	FP_ALLOW = 0,
	FP_BLOCK = 1,
};

enum fp_policy_flags {
	/* The kernel's choice depends on something XDP cannot see (mark,
	 * if_id, selector ifindex, sub policy, security context, equal
	 * priority overlap): a packet whose best match is this goes to the
	 * kernel. */
	FP_F_UNCERTAIN = 1 << 0,
	/* A non-optional template: cleartext matching this FWD policy is
	 * dropped by the kernel unless it was decrypted. */
	FP_F_TMPL_REQUIRED = 1 << 1,
	/* The policy's SA is packet-offloaded, but its device's tables
	 * would miss some of the policy's packets and send them in
	 * cleartext: a template with reqid 0 (mlx5 matches its TX SA rule on
	 * the reqid alone), or a subnet selector on a driver that matches
	 * selector addresses exactly (mlx5 before 2025). OUT only: such a
	 * packet goes to the kernel (FP_R_DEVICE_MISS). */
	FP_F_DEVICE_MISS = 1 << 2,
};

enum fp_l2_mode {
	FP_L2_NIC = 0, /* the NIC writes the Ethernet header (mlx5 tunnel-mode packet offload) */
	FP_L2_FIB = 1, /* sluice writes MACs from bpf_fib_lookup */
};

/* Why the program did what it did; index of the per-CPU reason counters. */
enum fp_reason {
	FP_R_NOT_READY = 0,   /* control plane not in sync: fail closed to the kernel */
	FP_R_NOT_CONFIGURED,  /* ingress interface unknown to the gateway config */
	FP_R_NOT_IP,          /* ARP, LLDP, ... */
	FP_R_MALFORMED,       /* truncated headers */
	FP_R_VLAN_UNKNOWN,    /* tag without a VLAN child we know */
	FP_R_IP_OPTIONS,
	FP_R_FRAGMENT,
	FP_R_IPV6_EXT,        /* IPv6 extension headers */
	FP_R_IPSEC,           /* ESP/AH itself */
	FP_R_IKE,             /* UDP 500/4500 */
	FP_R_TTL,             /* TTL/hop limit <= 1: the kernel sends time exceeded */
	FP_R_NO_POLICY,
	FP_R_BLOCK,           /* block policy: the kernel drops and counts */
	FP_R_UNCERTAIN,       /* best match depends on state XDP cannot see */
	FP_R_NOT_OFFLOADED,   /* OUT allow, but its SA is not packet-offloaded */
	FP_R_FWD_CHECK,       /* the kernel's FWD check would not pass it as cleartext */
	FP_R_INBOUND,         /* IN/FWD match; inbound forwarding not enabled here */
	FP_R_LOCAL,           /* destined to this host */
	FP_R_NO_ROUTE,        /* fib lookup failed (unreachable, blackhole, forwarding off) */
	FP_R_ROUTE_MISMATCH,  /* route egress differs from the SA's offload device */
	FP_R_NO_NEXTHOP,      /* neighbour unresolved */
	FP_R_MTU,             /* larger than the egress MTU: the kernel fragments or sends PTB */
	FP_R_NO_TX_PORT,      /* egress device not in the redirect map */
	FP_R_FWD_OUT,         /* forwarded: outbound via the SA's packet-offload device */
	FP_R_FWD_IN,          /* forwarded: inbound (opt-in) */
	/* Appended, so older counter indexes keep their meaning. */
	FP_R_L2_NOT_OURS,     /* destination MAC broadcast, multicast or another host's: the kernel does not forward it */
	FP_R_BAD_IP_HEADER,   /* IPv4 checksum or total length, IPv6 payload length: ip_rcv/ip6_rcv drop it */
	FP_R_MARTIAN,         /* martian source or destination, or (IPv4) one of this host's addresses as source */
	FP_R_ICMP_ERROR,      /* ICMP error with no FWD match: the kernel checks the quoted packet instead */
	FP_R_RP_FILTER,       /* IPv4 under strict rp_filter, or loose without a route back: the kernel decides */
	FP_R_NOT_FORWARDABLE, /* no forwardable policy covers the destination (fwd_dsts): passed before the exact checks */
	FP_R_SA_MTU,          /* larger than the SA's MTU (xfrm_state_mtu): the kernel sends frag-needed/PTB or fragments */
	FP_R_USE_TIME,        /* forwardable, but handed to the kernel so it stamps the policies' use time (one per policy per route epoch) */
	FP_R_DEVICE_MISS,     /* the offload device would send it in cleartext (FP_F_DEVICE_MISS: reqid 0, subnet selector on an exact-match driver) */
	FP_R_SA_GONE,         /* the kernel no longer holds the policy's SA (config.sa_check): the SA-deletion window */
	FP_R_MAX,
};

struct fp_config {
	__u32 gen;                /* active generation (0/1) of tuples + policy tables */
	__u32 ready;              /* 0: pass everything to the kernel */
	__u32 fwd_default_block;  /* `ip xfrm policy setdefault fwd block` */
	__u32 counters;           /* per-policy counters on/off */
	__u32 ntuples[2][2];      /* [gen][family] */
	/* Bumped by the control plane on every route, neighbour or interface
	 * change: flow-cache entries from an older epoch are ignored. */
	__u32 route_epoch;
	/* 1: flow-cache keys carry protocol and ports; 0: they do not,
	 * because no policy selects on them and the FIB does not hash or
	 * route on them (one entry per host pair, not per connection). */
	__u32 flow_l4;
	/* How long xdp_lease_renew keeps the fast path open (see struct
	 * fp_lease); <= 0: close it now. Read only by the renew program. */
	__s64 lease_ns;
	/* 1: hand the kernel one packet per policy per route epoch, so it
	 * stamps the policies' use times (use_due in fastpath.c). Off for a
	 * static policy source: no kernel policy to stamp. */
	__u32 use_time;
	/* 1: the FIB's answer for an IPv4 packet depends on its ingress,
	 * destination, TOS and length alone (no policy rules but the
	 * default ones, no multipath route: the control plane checks on
	 * every route and rule event and every second), so decide_full may
	 * reuse an answer from fib_cache made in the same route epoch. 0:
	 * every lookup is bpf_fib_lookup's. */
	__u32 fib_dst_only;
	/* Which half of iface_slots is current (0/1): the control plane
	 * writes the other half whole, then flips this word. */
	__u32 iface_gen;
	/* Before an outbound forward, cached or not, check that the
	 * policy's SA still exists (sa_refs in fastpath.c): an SA deleted
	 * under its policy is gone from the device too, and a frame
	 * redirected past the kernel would leave in cleartext on a driver
	 * without a TX miss rule. enum fp_sa_check. */
	__u32 sa_check;
	/* The next redirect port number to try (see FP_MAX_PORTS). Written
	 * and read by the control plane only: here so that a restarted
	 * daemon, which adopts the pinned flow cache, goes on numbering
	 * after its predecessor instead of handing out a number a cached
	 * flow still holds. */
	__u32 port_next;
};

/* The control plane's lease. xdp_lease_renew (run by the daemon through
 * BPF_PROG_RUN) clears expired and arms the timer; a daemon that stops
 * renewing lets the timer fire, which sets expired, and from then on
 * everything goes to the kernel: the daemon may have missed an SA going
 * away. A timer rather than a deadline, so a packet reads a flag instead
 * of a clock (the coarse clock cost ~15 ns a packet: its cache line is
 * written on every tick). Never armed: no lease (tests). Its own map,
 * because a user-space update of a map value cancels the timer in it. */
struct fp_lease {
	struct bpf_timer timer;
	__u32 expired;
	__u32 pad;
};

struct fp_tuple {
	__u32 min_prio[FP_DIRS];  /* best priority in this tuple per dir: early exit */
	__be32 src_mask[4];       /* prefix masks, computed by the control plane */
	__be32 dst_mask[4];       /* so the program does no branchy bit math */
	__u8 src_plen;
	__u8 dst_plen;
	__u8 proto_set;           /* selector names a protocol */
	__u8 dirs;                /* bit per dir with policies in this tuple */
	__be16 sport_mask;
	__be16 dport_mask;
	/* Which values of the first 8 bits of source and destination some
	 * entry of this tuple covers (bit v of the 256): a packet outside
	 * either cannot match any, so its lookup is skipped. Written with
	 * the tuple, per generation. */
	__u64 src_top8[4];
	__u64 dst_top8[4];
};

/* Key of a policy table: the selector, masked to its tuple's shape. One
 * key holds the policies of all three directions (struct fp_pentry), so a
 * shape costs one hash lookup, not three. */
struct fp_pkey {
	__u8 family;
	__u8 pad;
	__u8 tuple;
	__u8 proto;
	__be16 sport;
	__be16 dport;
	__be32 src[4];
	__be32 dst[4];
};

/* The same key for IPv4, in tables of their own (policy_tables4): hashing
 * and comparing 16 bytes instead of 40 is cheaper on every first packet. */
struct fp_pkey4 {
	__u8 tuple;
	__u8 proto;
	__be16 sport;
	__be16 dport;
	__u16 pad;
	__be32 src;
	__be32 dst;
};

struct fp_policy {
	__u32 priority;
	__u32 index;              /* the kernel's policy index */
	__u32 offload_ifindex;    /* packet-offload device of the policy's SA, 0 if none */
	__u8 action;              /* enum fp_action */
	__u8 flags;               /* enum fp_policy_flags */
	/* Largest L3 packet the SA carries (xfrm_state_mtu of its route's
	 * MTU, computed by the control plane; the smallest over the SAs the
	 * template may resolve to). 0: not known, nothing is forwarded. */
	__u16 sa_mtu;
	/* The policy's counter slot in policy_counts (0: not counted): an
	 * array index, so counting is an inline load, not a hash lookup. */
	__u32 cslot;
};

/* Value of a policy table: the best policy per direction for one key. */
struct fp_pentry {
	struct fp_policy dir[FP_DIRS];
	__u32 present;            /* bit per direction with a policy */
};

/* The destination index (see classify_direct4 in fastpath.c): per
 * generation, 256 blocks of 256 words, one word per IPv4 /16 of a
 * destination (a block number + 1, 0: none); FP_DIDX_BLOCKS blocks of 256
 * words, one per /24 of a /16 (a rule number + 1, 0: none); and
 * FP_DIDX_RULES rules. What does not fit is left to the tuples. */
#define FP_DIDX_BLOCKS 1024
#define FP_DIDX_RULES 65536

/* 256 words in one array value: an array's values are 8-byte aligned, so
 * single __u32 values would take 8 bytes each. */
struct fp_didx_block {
	__u32 w[256];
};

/* A rule of the destination index: the one policy-table entry (one
 * selector) whose destination meets a /24, with that selector's fields
 * masked as in its table's key and the masks themselves. */
struct fp_didx4 {
	__be32 src;               /* masked */
	__be32 src_mask;
	__be32 dst;               /* masked */
	__be32 dst_mask;
	__be16 sport;             /* masked */
	__be16 sport_mask;
	__be16 dport;             /* masked */
	__be16 dport_mask;
	__u8 proto;               /* 0 unless proto_set */
	__u8 proto_set;
	__u16 pad;
	struct fp_pentry e;
};

struct fp_iface {
	__u32 slot;               /* counter slot, see FP_MAX_IFACE_SLOTS */
	__u8 l2_mode;             /* enum fp_l2_mode */
	__u8 inbound_forward;     /* set only with wan-antispoof: upstream (config enforces) */
	__u16 vlan_id;            /* this ifindex is a VLAN child with this tag */
	__u32 parent_ifindex;     /* ... of this parent (0: not a VLAN child) */
	__u32 hairpin_ifindex;    /* inbound forward next hop (0: use the FIB) */
	__u8 hairpin_dmac[6];
	__u8 hairpin_smac[6];
	/* The device's own MAC: the kernel forwards only frames sent to it
	 * (PACKET_HOST). All zero (loopback, L3 devices): not checked. */
	__u8 mac[6];
	__u8 rp_filter;           /* IPv4 reverse-path filter: max of all and the device's (0 off, 1 strict, 2 loose) */
	__u8 pad;
	/* The redirect port (tx_ports) of the device frames for this
	 * interface leave by: its own, or its parent's for a VLAN child.
	 * 0: none. */
	__u32 port;
};

enum fp_sa_check {
	FP_SA_CHECK_OFF = 0,
	/* sa_refs must still name an SA: the mirror clears an SA's name on
	 * XFRM_MSG_DELSA (or a hard expire) at once, before the debounce and
	 * the next generation. An inline load and a compare. */
	FP_SA_CHECK_MIRROR = 1,
	/* ... and the kernel must hold it at the moment of the packet
	 * (bpf_xdp_get_xfrm_state): no event latency, but a kfunc call. */
	FP_SA_CHECK_KERNEL = 2,
};

/* The kernel's struct bpf_xfrm_state_opts (net/xfrm/xfrm_state_bpf.c,
 * Linux 6.8+), the key of bpf_xdp_get_xfrm_state: same layout, 36 bytes
 * (BPF_XFRM_STATE_OPTS_SZ). The kfunc writes error in place on a miss. */
struct fp_sa_opts {
	__s32 error;
	__s32 netns_id;           /* -1 (BPF_F_CURRENT_NETNS): the ingress device's */
	__u32 mark;               /* the SA's mark value (0: none) */
	__be32 daddr[4];          /* the SA's destination (xfrm_address_t) */
	__be32 spi;
	__u8 proto;               /* IPPROTO_ESP */
	__u8 pad;
	__u16 family;             /* AF_INET / AF_INET6; 0: no SA, nothing is forwarded */
};

/* The SAs a packet-offloaded OUT policy's template resolves to (up to
 * two: the old and the new SA of a rekey), by the policy's counter slot.
 * A forward needs the kernel to hold one of them. */
#define FP_SA_REFS 2
struct fp_sa_ref {
	struct fp_sa_opts sa[FP_SA_REFS];
};

struct fp_vlan_key {
	__u32 ifindex;            /* parent device the tagged frame arrived on */
	__u32 vid;
};

struct fp_counter {
	__u64 packets;
	__u64 bytes;
};

/* Flow cache: outbound forwards of one flow reuse the classification and
 * FIB result while the policy generation and route epoch are unchanged. */
struct fp_flow_key {
	__u32 ifindex;            /* physical ingress */
	__u16 vid;
	__u8 family;
	__u8 proto;
	__be16 sport;
	__be16 dport;
	__u32 tos;                /* IPv4 TOS or IPv6 flowinfo: both can steer routing */
	__be32 src[4];
	__be32 dst[4];
};

/* The same key for IPv4, in a table of its own: hashing 20 bytes instead
 * of 48 saved ~11 ns a packet (jhash is linear in the key). */
struct fp_flow_key4 {
	__u32 ifindex;
	__u16 vid;
	__u8 proto;
	__u8 tos;
	__be16 sport;
	__be16 dport;
	__be32 src;
	__be32 dst;
};

struct fp_flow {
	/* Bits of the hash of the key the entry was written for. LRU hash
	 * elements are recycled at once, so a reader on another CPU may find
	 * the element it looked up rewritten for another flow: it checks the
	 * tag before and after copying the entry. */
	__u32 key_tag;
	__u32 gen;
	__u32 epoch;
	/* The redirect port (tx_ports index) to send to, unless
	 * FP_FLOW_TX. A port number, not an ifindex: the redirect is an
	 * array load, and a number the control plane took away (the device
	 * left the configuration) misses, so the entry is decided again. */
	__u32 port;
	__u32 cslot;              /* counter slot of the deciding policy (struct fp_policy) */
	__u16 max_len;            /* largest L3 length the FIB accepted for this flow */
	/* Direction of the deciding policy (1 out: forward-out, 0 in or 2
	 * fwd: forward-in or a cached pass) | FP_FLOW_TX | FP_FLOW_L2_FIB |
	 * FP_FLOW_PASS.
	 * One byte, so the destination MAC below fits the exact-match slot's
	 * cache line. */
	__u8 dir_l2;
	__u8 slot;                /* counter slot of the ingress interface: a hit needs no interface lookup */
	__u8 dmac[6];
	__u8 smac[6];
	__u16 vid;                /* forward-in to a VLAN child: the tag to push */
	/* The destination MAC the first packet was accepted with (the
	 * ingress device's, or its VLAN child's): a hit needs the same, so
	 * a frame to another host or a group address is never replayed. */
	__u8 in_dmac[6];
};

#define FP_FLOW_DIR_MASK 3
/* The egress is the ingress device: XDP_TX, no port. The key holds the
 * ingress, so this is a fact of the flow. */
#define FP_FLOW_TX 0x04
#define FP_FLOW_L2_FIB 0x80
/* A cached pass: the full decision's verdict was `inbound` (an IN/FWD
 * policy decides, this interface does not forward inbound). Replayed as
 * XDP_PASS with that reason and policy, under the rules of a forward. */
#define FP_FLOW_PASS 0x40

/* A slot of the exact-match cache (see flow_emc in fastpath.c): an IPv4
 * key and its forward in one 64-byte cache line. key.ifindex 0: empty. */
struct fp_emc {
	struct fp_flow_key4 key;
	struct fp_flow flow;
};

/* Per CPU: the flow cache's counters, and whether it earns its keep.
 * Traffic whose flows do not repeat within the cache's reach (more live
 * flows than entries) makes every packet a miss plus an eviction, slower
 * than no cache at all; so a window in which fills outnumber hits turns
 * the cache off on that CPU for a while, then it is tried again. The
 * counters live here rather than in an array of their own so that a hit
 * touches one per-CPU line, not two. */
struct fp_cache_gate {
	__u64 off_until_ns;       /* CLOCK_MONOTONIC_COARSE; 0: on */
	__u32 hits;               /* in the current window */
	__u32 fills;
	__u64 total_hits;         /* forwards replayed from the cache */
	__u64 total_fills;        /* forward entries written */
	__u64 total_bypassed;     /* packets decided without it while it was off */
	__u64 total_pass_hits;    /* `inbound` passes replayed from the cache */
	__u64 total_pass_fills;   /* pass entries written */
};

/* What the explain instance of the program reports for one packet. */
struct fp_decision {
	__u32 reason;
	__u32 action;             /* XDP_* */
	__u32 dir;                /* direction of the deciding policy */
	__u32 policy_index;       /* 0: none */
	__u32 policy_priority;
	__u32 egress_ifindex;
	__u32 matched;            /* bit per dir with a match */
	__u32 slot;               /* counter slot of the ingress interface */
	__u32 cslot;              /* counter slot of the deciding policy (0: none) */
};

#endif
