// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* sluice XDP fast path.
 *
 * Forwards in XDP only what the kernel would have sent through a
 * packet-offloaded SA anyway, and passes everything else to the kernel.
 * The classifier reproduces the kernel's XFRM policy choice (lowest
 * priority value among matching selectors) with tuple-space search: one
 * hash lookup per distinct selector shape, independent of the policy count.
 * See docs/fastpath.md for the design and the security invariants. */
#include "parse.h"

#define AF_INET 2
#define AF_INET6 10

/* Set at load time. The explain instance reports its decision in
 * explain_out and leaves the counters alone. */
volatile const __u32 explain_mode = 0;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct fp_config);
} config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct fp_lease);
} lease SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * 2 * FP_MAX_TUPLES); /* [gen][family][i] */
	__type(key, __u32);
	__type(value, struct fp_tuple);
} tuples SEC(".maps");

/* One policy table per generation: the control plane fills the idle one and
 * then flips config.gen, so a packet never sees a half-built table. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 2);
	__type(key, __u32);
	__array(values, struct {
		__uint(type, BPF_MAP_TYPE_HASH);
		__uint(max_entries, 1); /* the control plane sizes each table */
		__type(key, struct fp_pkey);
		__type(value, struct fp_pentry);
	});
} policy_tables SEC(".maps");

/* The IPv4 entries, per generation, keyed by struct fp_pkey4; flipped with
 * policy_tables by the same config.gen. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 2);
	__type(key, __u32);
	__array(values, struct {
		__uint(type, BPF_MAP_TYPE_HASH);
		__uint(max_entries, 1); /* the control plane sizes each table */
		__type(key, struct fp_pkey4);
		__type(value, struct fp_pentry);
	});
} policy_tables4 SEC(".maps");

/* The destination index: a first classification stage for IPv4 that
 * answers without a hash lookup and without walking the tuples whenever
 * one selector alone meets the destination's /24 (strongSwan's OUT
 * policies to distinct remote subnets). Three direct-indexed arrays, each
 * with a half per generation written by the control plane before it flips
 * config.gen, as the tuples are: didx_blocks[gen][/16] names a block of
 * didx_slots, whose word for the /24 names a rule of didx_rules4. A /24
 * that any other selector meets, or that no selector meets, has no rule:
 * the tuples decide. See classify_direct4 and docs/fastpath.md. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 2 * 256); /* [gen][first 8 bits] */
	__type(key, __u32);
	__type(value, struct fp_didx_block); /* [second 8 bits] */
} didx_blocks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 2 * FP_DIDX_BLOCKS); /* [gen][block] */
	__type(key, __u32);
	__type(value, struct fp_didx_block); /* [third 8 bits] */
} didx_slots SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 2 * FP_DIDX_RULES);
	__type(key, __u32);
	__type(value, struct fp_didx4);
} didx_rules4 SEC(".maps");

/* The destinations something could be forwarded to: one bit per IPv4 /24
 * (per first 24 bits of an IPv6 address) that a forwardable policy's
 * destination selector covers, in part or whole. Forwardable: an allow
 * OUT policy whose SA is packet-offloaded, or, while some interface has
 * inbound forwarding on, such an IN or FWD policy. A packet whose bit is
 * clear cannot be forwarded whatever the exact checks say, so it is
 * passed after parsing, before the flow cache, the interface tables and
 * the classifier (everything passed, the kernel checks anyway). A set bit
 * only says "maybe": the full decision follows. The control plane writes
 * the union of the old and new policy sets' bits before it flips the
 * generation and the new set's alone after, so the map is never short of
 * the active set's bits. Mmapable: the control plane writes the words in
 * place. [family][FP_DST_WORDS] 64-bit words, 4 MiB. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 2 * FP_DST_WORDS);
	__type(key, __u32);
	__type(value, __u64);
} fwd_dsts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32); /* ifindex: any value works, unlike a 1024-slot array */
	__type(value, struct fp_iface);
} ifaces SEC(".maps");

/* The interfaces, direct-mapped by ifindex (place ifindex &
 * (FP_IFACE_SLOT_MAP - 1)): an inline array load instead of a ~20 ns hash
 * lookup, for the quick pass's counter slot and for the full decision's
 * ingress and egress interfaces. An ifindex whose place another one holds
 * is found in ifaces; so is an unknown one (not-configured). Two halves,
 * as the policy tuples have two generations: the control plane writes
 * the half config.iface_gen does not name, whole, then flips iface_gen,
 * so that a packet never reads an entry half written. Written with
 * ifaces, after it. */
#define FP_IFACE_SLOT_MAP 256
struct fp_iface_ref {
	__u32 ifindex; /* 0: empty */
	struct fp_iface i;
};
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * FP_IFACE_SLOT_MAP);
	__type(key, __u32);
	__type(value, struct fp_iface_ref);
} iface_slots SEC(".maps");

/* iface_get finds interface ifindex in the current half of iface_slots,
 * else in ifaces; 0: not one of the gateway's. */
static __always_inline struct fp_iface *iface_get(__u32 gen, __u32 ifindex)
{
	__u32 at = (gen & 1) * FP_IFACE_SLOT_MAP + (ifindex & (FP_IFACE_SLOT_MAP - 1));
	struct fp_iface_ref *ref = bpf_map_lookup_elem(&iface_slots, &at);
	if (ref && ref->ifindex == ifindex)
		return &ref->i;
	return bpf_map_lookup_elem(&ifaces, &ifindex);
}

/* The gateway's IPv4 addresses (all devices of its namespace): a source
 * among them is a martian to the kernel (fib_validate_source). Written by
 * the control plane with the interface table. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __be32);
	__type(value, __u8);
} own_addrs SEC(".maps");

/* own_nets: one bit per IPv4 /24 that holds one of own_addrs, so that a
 * source outside them (nearly every packet) costs an inline array load
 * instead of a hash lookup that misses (~20 ns of a first packet). A set
 * bit only says "look in own_addrs". The control plane sets a /24's bit
 * before it adds an address of it to own_addrs and clears it only after
 * the last one is gone, so the bits always cover the table. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FP_DST_WORDS);
	__type(key, __u32);
	__type(value, __u64);
} own_nets SEC(".maps");

/* own_source says whether an IPv4 source is one of the gateway's addresses. */
static __always_inline int own_source(__be32 src)
{
	__u32 top = bpf_ntohl(src) >> 8;
	__u32 i = top >> 6;
	__u64 *w = bpf_map_lookup_elem(&own_nets, &i);
	if (w && !((*w >> (top & 63)) & 1))
		return 0;
	return bpf_map_lookup_elem(&own_addrs, &src) != 0;
}

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct fp_vlan_key);
	__type(value, __u32); /* VLAN child ifindex */
} vlans SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u32);
} tx_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FP_MAX_IFACE_SLOTS * FP_R_MAX); /* [slot][reason] */
	__type(key, __u32);
	__type(value, __u64);
} reason_counts SEC(".maps");

/* Per-policy counters, by counter slot (struct fp_policy's cslot): a
 * per-CPU array, whose lookup the verifier inlines, where a per-CPU hash
 * keyed by the kernel's policy index cost ~30-40 ns a counted packet. The
 * control plane assigns the slots (counterslots.go), keeps a policy's slot
 * across generations, zeroes a slot before it gives it to another policy,
 * and records each slot's owner in policy_slots, which the readers and a
 * restarted daemon go by. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FP_MAX_COUNTER_SLOTS);
	__type(key, __u32); /* counter slot */
	__type(value, struct fp_counter);
} policy_counts SEC(".maps");

/* The kernel policy index that owns each counter slot (0: free). Written
 * by the control plane only; the program never reads it. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FP_MAX_COUNTER_SLOTS);
	__type(key, __u32); /* counter slot */
	__type(value, __u32);
} policy_slots SEC(".maps");

/* The SA-deletion window. The mirror learns that an SA is gone from
 * XFRM_MSG_DELSA, after the kernel deleted it, and the next generation
 * comes a debounce and a compile later; meanwhile a redirected frame
 * would reach a device that no longer holds the SA, and a driver without
 * a TX miss rule (mlx5 outside switchdev, ipsec_fs.c) sends it in
 * cleartext. So with config.sa_check on, every outbound forward (cached
 * or not) first checks the policy's SAs, here by the policy's counter
 * slot (fp_policy.cslot, which a cached forward also carries):
 * - FP_SA_CHECK_MIRROR: the entry still names one. The mirror clears a
 *   deleted SA's name as soon as the event arrives, before the debounce;
 *   what is left open is the event's way from the kernel to the mirror
 *   and one map write (docs/fastpath.md measures it).
 * - FP_SA_CHECK_KERNEL: the kernel's own SA table holds one, asked with
 *   bpf_xdp_get_xfrm_state (Linux 6.8+, a kfunc: xfrm_state_lookup by
 *   daddr, SPI, proto, mark in the ingress device's namespace). A deleted
 *   SA is unhashed under the state lock (__xfrm_state_delete) before the
 *   driver's xdo_dev_state_delete runs, so a lookup after the delete
 *   misses; left open is only a frame that passed the lookup just before
 *   the delete and reaches the device after it. It costs ~85 ns a
 *   forward (measured; docs/benchmarks.md), so it is not the default.
 * Written by the control plane before it flips the generation; an entry
 * without an SA (family 0) forwards nothing. Weak: without the kfunc the
 * program still loads, and the kernel mode forwards nothing (the daemon
 * turns it on only where the kernel has it). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FP_MAX_COUNTER_SLOTS);
	__type(key, __u32); /* counter slot */
	__type(value, struct fp_sa_ref);
} sa_refs SEC(".maps");

/* Opaque here; a definition, not a forward declaration, because
 * cilium/ebpf's kfunc check wants the same kind as the kernel's BTF. */
struct xfrm_state {
};
extern struct xfrm_state *bpf_xdp_get_xfrm_state(struct xdp_md *ctx, struct fp_sa_opts *opts,
						 __u32 opts__sz) __attribute__((weak)) __ksym;
extern void bpf_xdp_xfrm_state_release(struct xfrm_state *x) __attribute__((weak)) __ksym;

_Static_assert(sizeof(struct fp_sa_opts) == 36, "struct bpf_xfrm_state_opts is 36 bytes");

/* sa_held says whether one of the SAs of the policy with counter slot
 * cslot still exists, as far as mode (enum fp_sa_check) asks: named in
 * sa_refs (the mirror clears a deleted SA's name), and with
 * FP_SA_CHECK_KERNEL also held by the kernel now. The kernel lookup takes
 * a reference, dropped at once: only the answer matters. */
static __always_inline int sa_held(struct xdp_md *ctx, __u32 cslot, __u32 mode)
{
	struct fp_sa_ref *r = bpf_map_lookup_elem(&sa_refs, &cslot);
	if (!r)
		return 0;
	if (mode != FP_SA_CHECK_KERNEL)
		return r->sa[0].family | r->sa[1].family;
	if (!bpf_xdp_get_xfrm_state)
		return 0;
	struct xfrm_state *x = 0;
	if (r->sa[0].family)
		x = bpf_xdp_get_xfrm_state(ctx, &r->sa[0], sizeof(r->sa[0]));
	if (!x && r->sa[1].family)
		x = bpf_xdp_get_xfrm_state(ctx, &r->sa[1], sizeof(r->sa[1]));
	if (!x)
		return 0;
	bpf_xdp_xfrm_state_release(x);
	return 1;
}

/* The route epoch in which each policy last handed the kernel a packet
 * (see use_due). LRU: a policy gone idle ages out; a lost entry costs one
 * more packet through the kernel, never a wrong forward. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 262144);
	__type(key, __u32); /* kernel policy index */
	__type(value, __u32);
} use_stamp SEC(".maps");

/* use_due says whether this forward should go through the kernel instead,
 * once per policy per route epoch (the control plane bumps it every second,
 * which also sends every cached flow back here): the kernel stamps a
 * policy's use time (curlft.use_time, what charon's inactivity, DPD and
 * `swanctl --list-sas` read) only when a packet passes xfrm_lookup (OUT)
 * or its policy check (FWD), and a fast-path forward passes neither. The
 * handed packet is one the kernel forwards as well; two CPUs may both hand
 * one over. */
static __always_inline int use_due(__u32 index)
{
	__u32 zero = 0;
	struct fp_config *cfg = bpf_map_lookup_elem(&config, &zero);
	if (explain_mode || !cfg || !cfg->use_time)
		return 0;
	__u32 epoch = cfg->route_epoch;
	__u32 *seen = bpf_map_lookup_elem(&use_stamp, &index);
	if (seen && *seen == epoch)
		return 0;
	bpf_map_update_elem(&use_stamp, &index, &epoch, BPF_ANY);
	return 1;
}

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct fp_decision);
} explain_out SEC(".maps");

/* One table for all CPUs, so the value sits inline in the element (a
 * per-CPU hash keeps it in a separate per-CPU area: a second cache miss on
 * every hit); lookups take no lock and an update replaces the element
 * whole, so a reader never sees half an entry. LRU lists per CPU
 * (BPF_F_NO_COMMON_LRU): a flood of new flows evicts on its own CPU
 * without a global lock. A miss costs the full path, never a wrong answer. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(map_flags, BPF_F_NO_COMMON_LRU);
	__uint(max_entries, 131072);
	__type(key, struct fp_flow_key);
	__type(value, struct fp_flow);
} flow_cache SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(map_flags, BPF_F_NO_COMMON_LRU);
	__uint(max_entries, 131072);
	__type(key, struct fp_flow_key4);
	__type(value, struct fp_flow);
} flow_cache4 SEC(".maps");

/* The exact-match cache in front of flow_cache4, as Open vSwitch keeps one
 * in front of its classifier: direct-mapped, FP_EMC_SLOTS slots per CPU,
 * each slot one cache line holding key and forward. A hit costs a
 * multiply, one array load and a key compare, all inline; a flow_cache4
 * hit costs a helper call, jhash and two dependent cache misses (bucket,
 * then element), about a third of a cached forward, measured. A plain
 * array with a region per CPU rather than a per-CPU array: that would add
 * a miss on its pointer table. Mmapable, because only then does the
 * kernel start the values on a page boundary, so no slot straddles two
 * cache lines. The loader multiplies max_entries by the number of
 * possible CPUs; a CPU beyond that finds no slot and uses flow_cache4.
 * A collision only evicts: the next packet of the evicted flow finds it
 * in flow_cache4 and takes the slot back, and a slot is trusted only for
 * its exact key and while generation and epoch match, like any cache
 * entry. */
#define FP_EMC_BITS 13
#define FP_EMC_SLOTS (1 << FP_EMC_BITS)
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, FP_EMC_SLOTS);
	__type(key, __u32);
	__type(value, struct fp_emc);
} flow_emc SEC(".maps");

_Static_assert(sizeof(struct fp_emc) == 64, "an exact-match slot is one cache line");

/* key_hash hashes a flow-cache key: an IPv4 key's 5 words (see flow_key)
 * or an IPv6 key's 12. Multiplies carry every input bit into the high
 * bits, which pick the exact-match slot and make the entry's tag. */
static __always_inline __u64 key_hash(const struct fp_flow_key *k, int v4)
{
	const __u32 *w = (const void *)k;
	if (v4) {
		/* two multiplies side by side, then one: the hash is on the way
		 * to the slot's load, and a chain of five measured ~8 ns slower */
		__u64 a = ((__u64)w[3] << 32 | w[4]) * 0x9E3779B97F4A7C15ULL;
		__u64 b = ((__u64)w[0] << 32 | w[2]) * 0xC2B2AE3D27D4EB4FULL;
		return (a ^ b ^ w[1]) * 0x165667B19E3779F9ULL;
	}
	__u64 h = 0x9E3779B97F4A7C15ULL;
#pragma unroll
	for (int i = 0; i < (int)(sizeof(*k) / 4); i++)
		h = (h ^ w[i]) * 0xC2B2AE3D27D4EB4FULL;
	return h;
}

static __always_inline __u32 key_tag(__u64 h)
{
	return h >> 32;
}

/* emc_slot returns this CPU's slot for an IPv4 key of hash h. */
static __always_inline struct fp_emc *emc_slot(__u64 h)
{
	__u32 i = bpf_get_smp_processor_id() * FP_EMC_SLOTS + (__u32)(h >> (64 - FP_EMC_BITS));
	return bpf_map_lookup_elem(&flow_emc, &i);
}

static __always_inline int emc_match(const struct fp_emc *e, const struct fp_flow_key4 *k)
{
	const __u32 *a = (const void *)&e->key, *b = (const void *)k;
	return !((a[0] ^ b[0]) | (a[1] ^ b[1]) | (a[2] ^ b[2]) | (a[3] ^ b[3]) | (a[4] ^ b[4]));
}

/* A slot is written in three steps: emc_clear, its flow, emc_set_key. Only
 * the CPU that owns the slot writes it, but an interrupting program on
 * that CPU could read it: the ingress ifindex (0: empty) is cleared first
 * and set last, so a reader never matches a slot half written. */
static __always_inline void emc_clear(struct fp_emc *e)
{
	e->key.ifindex = 0;
	asm volatile("" ::: "memory");
}

static __always_inline void emc_set_key(struct fp_emc *e, const struct fp_flow_key4 *k)
{
	e->key.vid = k->vid;
	e->key.proto = k->proto;
	e->key.tos = k->tos;
	e->key.sport = k->sport;
	e->key.dport = k->dport;
	e->key.src = k->src;
	e->key.dst = k->dst;
	asm volatile("" ::: "memory");
	e->key.ifindex = k->ifindex;
}

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct fp_cache_gate);
} cache_gate SEC(".maps");

/* A window of this many cache decisions (hits + fills) judges the cache;
 * a cache that lost it stays off this long. */
#define FP_CACHE_WINDOW 16384
#define FP_CACHE_OFF_NS (100ULL * 1000 * 1000)

/* cache_on says whether this CPU uses the cache for this packet. */
static __always_inline struct fp_cache_gate *cache_on(void)
{
	__u32 zero = 0;
	struct fp_cache_gate *g = bpf_map_lookup_elem(&cache_gate, &zero);
	if (!g)
		return 0;
	if (g->off_until_ns) {
		if (bpf_ktime_get_coarse_ns() < g->off_until_ns) {
			g->total_bypassed++;
			return 0;
		}
		g->off_until_ns = 0;
		g->hits = 0;
		g->fills = 0;
	}
	return g;
}

static __always_inline void cache_judge(struct fp_cache_gate *g)
{
	if (g->hits + g->fills < FP_CACHE_WINDOW)
		return;
	if (g->fills > g->hits)
		g->off_until_ns = bpf_ktime_get_coarse_ns() + FP_CACHE_OFF_NS;
	g->hits = 0;
	g->fills = 0;
}

_Static_assert(sizeof(struct fp_flow_key4) <= sizeof(struct fp_flow_key),
	       "an IPv4 flow key is built inside a struct fp_flow_key");

/* flow_key builds the flow-cache key of p. An IPv4 key is written in
 * struct fp_flow_key4's layout at the start of k, for flow_cache4 and
 * flow_emc; the rest of k is left as it was. Both layouts start with the
 * ingress ifindex (0: do not fill the cache). */
static __always_inline void flow_key(struct fp_flow_key *k, struct pkt *p, __u32 ifindex, __u32 l4)
{
	if (p->family == FP_FAM_V4) {
		/* every byte of the 20 written: no memset of all 48 */
		struct fp_flow_key4 *k4 = (void *)k;
		k4->ifindex = ifindex;
		k4->vid = p->tagged ? p->vid : 0xffff;
		k4->proto = l4 ? p->proto : 0;
		k4->tos = p->tos;
		k4->sport = l4 ? p->sport : 0;
		k4->dport = l4 ? p->dport : 0;
		k4->src = p->src[0];
		k4->dst = p->dst[0];
		return;
	}
	__builtin_memset(k, 0, sizeof(*k));
	k->ifindex = ifindex;
	k->vid = p->tagged ? p->vid : 0xffff;
	k->family = p->family;
	if (l4) {
		k->proto = p->proto;
		k->sport = p->sport;
		k->dport = p->dport;
	}
	k->tos = p->flowinfo;
	__builtin_memcpy(k->src, p->src, sizeof(k->src));
	__builtin_memcpy(k->dst, p->dst, sizeof(k->dst));
}

/* Keeps clang from merging two map calls that differ only in the map into
 * one call on either map: the verifier inlines a lookup only where a call
 * site sees a single map, and the merged call cost ~15 ns a packet. */
#define keep_call_apart(v) asm volatile("" : "+r"(v))

/* Marks v as checked against NULL: keeps clang from computing an address
 * inside v before the check, which older verifiers (6.12) reject as
 * arithmetic on a pointer that may be NULL. */
#define after_null_check(v) asm volatile("" : "+r"(v))

/* flow_lookup finds the cached forward for key k in its family's table. */
static __always_inline struct fp_flow *flow_lookup(const struct fp_flow_key *k, struct pkt *p)
{
	if (p->family == FP_FAM_V4) {
		struct fp_flow *f = bpf_map_lookup_elem(&flow_cache4, k);
		keep_call_apart(f);
		return f;
	}
	return bpf_map_lookup_elem(&flow_cache, k);
}

/* The configuration a decision was derived from, read once before any
 * table: an entry cached from it is dropped by the first packet that sees
 * a newer generation or epoch, even when the control plane moved on while
 * this packet was being decided. */
struct snap {
	__u32 gen;
	__u32 epoch;
	__u32 fib_dst_only;       /* fib_cache may answer (see fib) */
	__u32 iface_gen;          /* current half of iface_slots */
	__u32 sa_check;           /* config.sa_check (sa_held) */
};

/* Scratch space of the full decision, shared by its forward paths. In a
 * per-CPU map rather than on the stack: the verifier allows 512 bytes for
 * the whole call chain, and the cached stage, inline in the program, takes
 * its share of them. Per CPU is enough: XDP runs in softirq, which does not
 * nest on a CPU, and the explain twin has a map of its own. */
struct scratch {
	struct snap sn;
	struct bpf_fib_lookup fp;
	struct fp_flow nf;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__uint(key_size, sizeof(__u32));
	/* a size, not a type: bpf2go has no Go type for bpf_fib_lookup's unions */
	__uint(value_size, sizeof(struct scratch));
} scratch_space SEC(".maps");

struct best {
	struct fp_policy pol;
	__u8 found;
	__u8 tie;
};

struct classify_ctx {
	struct pkt *p;
	void *table;              /* IPv6: struct fp_pkey keys */
	void *table4;             /* IPv4: struct fp_pkey4 keys */
	__u32 gen;
	__u32 n;
	int err;
	struct best b[FP_DIRS];
};

static __always_inline void consider(struct classify_ctx *c, struct fp_pentry *e,
				     struct fp_tuple *t, __u32 dir)
{
	struct best *b = &c->b[dir];
	if (!(e->present & (1 << dir)))
		return;
	struct fp_policy *pol = &e->dir[dir];
	if (!b->found || pol->priority < b->pol.priority) {
		b->pol = *pol;
		b->found = 1;
		b->tie = 0;
	} else if (pol->priority == b->pol.priority) {
		b->tie = 1;
	}
}

/* worth reports whether the tuple can still win or tie in some direction:
 * tuples are sorted by best priority, so once every direction it holds
 * already has a strictly better match, its lookup is skipped. */
static __always_inline int worth(struct classify_ctx *c, struct fp_tuple *t)
{
	for (int dir = 0; dir < FP_DIRS; dir++)
		if ((t->dirs & (1 << dir)) &&
		    (!c->b[dir].found || c->b[dir].pol.priority >= t->min_prio[dir]))
			return 1;
	return 0;
}

/* covers_top8 says whether a tuple's summary holds the first 8 bits of
 * the address starting with word a. */
static __always_inline int covers_top8(const __u64 *sum, __be32 a)
{
	__u32 v = bpf_ntohl(a) >> 24;
	return (sum[(v >> 6) & 3] >> (v & 63)) & 1;
}

static long classify_tuple(__u32 i, void *data)
{
	struct classify_ctx *c = data;
	struct pkt *p = c->p;
	if (i >= c->n)
		return 1;
	__u32 ti = (c->gen * 2 + (p->family & 1)) * FP_MAX_TUPLES + (i & (FP_MAX_TUPLES - 1));
	struct fp_tuple *t = bpf_map_lookup_elem(&tuples, &ti);
	if (!t) {
		c->err = 1;
		return 1;
	}
	if (!worth(c, t) || !covers_top8(t->src_top8, p->src[0]) || !covers_top8(t->dst_top8, p->dst[0]))
		return 0;
	struct fp_pentry *e;
	/* The kernel matches ports even when the selector names no protocol
	 * (a port of 0 then), so masks apply independently of proto_set. */
	if (p->family == FP_FAM_V4) {
		struct fp_pkey4 k4 = {
			.tuple = i,
			.proto = t->proto_set ? p->proto : 0,
			.sport = p->sport & t->sport_mask,
			.dport = p->dport & t->dport_mask,
			.src = p->src[0] & t->src_mask[0],
			.dst = p->dst[0] & t->dst_mask[0],
		};
		e = bpf_map_lookup_elem(c->table4, &k4);
		/* Merged with the IPv6 lookup below, the one call site saw two
		 * inner maps and the verifier could not inline it: a generic
		 * bpf_map_lookup_elem, ~30 ns of a first packet (measured). */
		keep_call_apart(e);
	} else {
		struct fp_pkey key;
		__builtin_memset(&key, 0, sizeof(key));
		key.family = p->family;
		key.tuple = i;
		if (t->proto_set)
			key.proto = p->proto;
		key.sport = p->sport & t->sport_mask;
		key.dport = p->dport & t->dport_mask;
		key.src[0] = p->src[0] & t->src_mask[0];
		key.dst[0] = p->dst[0] & t->dst_mask[0];
		key.src[1] = p->src[1] & t->src_mask[1];
		key.dst[1] = p->dst[1] & t->dst_mask[1];
		key.src[2] = p->src[2] & t->src_mask[2];
		key.dst[2] = p->dst[2] & t->dst_mask[2];
		key.src[3] = p->src[3] & t->src_mask[3];
		key.dst[3] = p->dst[3] & t->dst_mask[3];
		e = bpf_map_lookup_elem(c->table, &key);
	}
	if (!e)
		return 0;
	consider(c, e, t, 0);
	consider(c, e, t, 1);
	consider(c, e, t, 2);
	return 0;
}

/* classify_direct4 is the destination index's stage (see didx_blocks):
 * 1 when it decided c->b for IPv4 packet c->p, 0 when the tuples must.
 * The compiler gives a /24 a rule only when exactly one policy-table
 * entry's destination meets it, so any policy matching a packet to that
 * /24 is in that entry: the packet matches the rule's selector and the
 * entry's best policies are the answer (the same the tuple search finds,
 * with no other tuple to tie), or it does not and nothing matches. */
static __always_inline int classify_direct4(struct classify_ctx *c)
{
	struct pkt *p = c->p;
	__u32 d = bpf_ntohl(p->dst[0]);
	__u32 g = c->gen & 1;
	__u32 i = g * 256 + (d >> 24);
	struct fp_didx_block *l1 = bpf_map_lookup_elem(&didx_blocks, &i);
	if (!l1)
		return 0;
	__u32 blk = l1->w[(d >> 16) & 255];
	if (!blk)
		return 0;
	i = g * FP_DIDX_BLOCKS + ((blk - 1) & (FP_DIDX_BLOCKS - 1));
	struct fp_didx_block *l2 = bpf_map_lookup_elem(&didx_slots, &i);
	if (!l2)
		return 0;
	__u32 slot = l2->w[(d >> 8) & 255];
	if (!slot)
		return 0;
	i = g * FP_DIDX_RULES + ((slot - 1) & (FP_DIDX_RULES - 1));
	struct fp_didx4 *r = bpf_map_lookup_elem(&didx_rules4, &i);
	if (!r)
		return 0;
	/* the key the tuple search would build for the rule's tuple */
	if ((p->src[0] & r->src_mask) == r->src && (p->dst[0] & r->dst_mask) == r->dst &&
	    (r->proto_set ? p->proto : 0) == r->proto && (p->sport & r->sport_mask) == r->sport &&
	    (p->dport & r->dport_mask) == r->dport) {
		consider(c, &r->e, 0, 0);
		consider(c, &r->e, 0, 1);
		consider(c, &r->e, 0, 2);
	}
	return 1;
}

/* classify finds, per direction, the best (lowest priority value) policy
 * whose selector matches, and notes equal-priority matches (ties): the
 * kernel breaks those by insertion order and offload type, which the mirror
 * does not reproduce, so a tie sends the packet to the kernel. bpf_loop
 * keeps verification cost independent of FP_MAX_TUPLES. */
static __always_inline int classify(struct fp_config *cfg, struct snap *s, struct classify_ctx *c)
{
	c->gen = s->gen & 1;
	if (c->p->family == FP_FAM_V4 && classify_direct4(c))
		return 0;
	c->n = cfg->ntuples[c->gen][c->p->family & 1];
	/* both, whatever the family: the verifier checks the callback's
	 * lookups without knowing which family it runs for */
	c->table = bpf_map_lookup_elem(&policy_tables, &c->gen);
	c->table4 = bpf_map_lookup_elem(&policy_tables4, &c->gen);
	if (!c->table || !c->table4)
		return -1;
	bpf_loop(FP_MAX_TUPLES, classify_tuple, c, 0);
	return c->err ? -1 : 0;
}

static __always_inline void ip_decrease_ttl(struct iphdr *iph)
{
	__u32 check = (__u32)iph->check;
	check += (__u32)bpf_htons(0x0100);
	iph->check = (__sum16)(check + (check >= 0xFFFF));
	iph->ttl--;
}

/* rewrite applies the L2/L3 changes of a forward: VLAN tag to match the
 * egress, MACs (unless the NIC writes them), TTL/hop limit. */
static __always_inline int rewrite(struct xdp_md *ctx, struct pkt *p, __u16 egress_vid,
				   int write_macs, const __u8 *dmac, const __u8 *smac)
{
	void *data, *data_end;

	if (p->tagged && !egress_vid) {
		/* pop: move the MACs over the tag, then drop 4 bytes */
		data = (void *)(long)ctx->data;
		data_end = (void *)(long)ctx->data_end;
		if (data + 18 > data_end)
			return -1;
		__u8 macs[12];
		__builtin_memcpy(macs, data, 12);
		__builtin_memcpy(data + 4, macs, 12);
		if (bpf_xdp_adjust_head(ctx, 4))
			return -1;
		p->l3_off -= 4;
	} else if (!p->tagged && egress_vid) {
		if (bpf_xdp_adjust_head(ctx, -4))
			return -1;
		data = (void *)(long)ctx->data;
		data_end = (void *)(long)ctx->data_end;
		if (data + 18 > data_end)
			return -1;
		__u8 macs[12];
		__builtin_memcpy(macs, data + 4, 12);
		__builtin_memcpy(data, macs, 12);
		/* bytes 16-17 still hold the original EtherType */
		*(__be16 *)(data + 12) = bpf_htons(ETH_P_8021Q);
		*(__be16 *)(data + 14) = bpf_htons(egress_vid);
		p->l3_off += 4;
	} else if (p->tagged && egress_vid) {
		data = (void *)(long)ctx->data;
		data_end = (void *)(long)ctx->data_end;
		if (data + 18 > data_end)
			return -1;
		*(__be16 *)(data + 14) = bpf_htons(egress_vid);
	}

	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > data_end)
		return -1;
	if (write_macs) {
		__builtin_memcpy(eth->h_dest, dmac, ETH_ALEN);
		__builtin_memcpy(eth->h_source, smac, ETH_ALEN);
	}
	__u32 off = p->l3_off & 0xff;
	if (p->family == FP_FAM_V4) {
		struct iphdr *iph = data + off;
		if ((void *)(iph + 1) > data_end)
			return -1;
		ip_decrease_ttl(iph);
	} else {
		struct ipv6hdr *ip6 = data + off;
		if ((void *)(ip6 + 1) > data_end)
			return -1;
		ip6->hop_limit--;
	}
	return 0;
}

/* The FIB result cache: bpf_fib_lookup's answers for IPv4 destinations, so
 * that a first packet to a destination already seen skips the lookup
 * (~115 ns of a first packet's ~390, measured). Direct-mapped like flow_emc:
 * FP_FIBC_SLOTS slots per CPU (the loader multiplies max_entries by the
 * possible CPUs), each keyed by (logical ingress, destination, TOS), holding
 * the answer (SUCCESS or NO_NEIGH), egress, MACs and the route's MTU. An
 * entry is trusted only
 * - while config.fib_dst_only says the FIB's answer depends on nothing
 *   else (no policy rules but the default ones, no multipath route: the
 *   control plane checks on every route and rule event and every second),
 * - in the route epoch it was made in (the control plane bumps the epoch
 *   on every route, neighbour, link and rule event and every second, as
 *   for flow-cache entries), and
 * - for packets no longer than the route's MTU (longer: the real lookup,
 *   which answers FRAG_NEEDED).
 * Anything else, and every IPv6 packet (IPv6 routes can select on the
 * source), takes bpf_fib_lookup. Never used by the explain instance. */
#define FP_FIBC_BITS 12
#define FP_FIBC_SLOTS (1 << FP_FIBC_BITS)
struct fp_fibc {
	__u32 ifindex;            /* logical ingress of the lookup; 0: empty */
	__be32 dst;
	__u32 epoch;              /* route epoch the lookup was made in */
	__u32 oif;                /* the FIB's egress */
	__u8 dmac[6];
	__u8 smac[6];
	__u16 mtu;                /* the route's MTU (mtu_result), or the length that passed */
	__u8 tos;
	__u8 rc;                  /* BPF_FIB_LKUP_RET_SUCCESS or _NO_NEIGH */
};
_Static_assert(sizeof(struct fp_fibc) == 32, "two FIB cache slots per cache line");
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, FP_FIBC_SLOTS);
	__type(key, __u32);
	__type(value, struct fp_fibc);
} fib_cache SEC(".maps");

/* fibc_slot returns this CPU's FIB cache slot for the key. */
static __always_inline struct fp_fibc *fibc_slot(__u32 ifindex, __be32 dst, __u8 tos)
{
	__u64 h = ((__u64)ifindex << 40 ^ (__u64)tos << 32 ^ dst) * 0x9E3779B97F4A7C15ULL;
	__u32 i = bpf_get_smp_processor_id() * FP_FIBC_SLOTS + (__u32)(h >> (64 - FP_FIBC_BITS));
	return bpf_map_lookup_elem(&fib_cache, &i);
}

static __always_inline int fib(struct xdp_md *ctx, struct pkt *p, __u32 ifindex,
			       struct bpf_fib_lookup *fp, struct snap *sn)
{
	struct fp_fibc *e = 0;
	if (!explain_mode && sn->fib_dst_only && p->family == FP_FAM_V4) {
		e = fibc_slot(ifindex, p->dst[0], p->tos);
		if (e) {
			after_null_check(e);
			/* Copy, then check the key again: a program that
			 * interrupted this one on this CPU may have rewritten
			 * the slot meanwhile (fibc_fill clears ifindex first and
			 * sets it last). */
			struct fp_fibc c = *e;
			asm volatile("" ::: "memory");
			if (c.ifindex == ifindex && c.dst == p->dst[0] && c.tos == p->tos &&
			    c.epoch == sn->epoch && p->tot_len <= c.mtu &&
			    *(volatile __u32 *)&e->ifindex == ifindex && *(volatile __be32 *)&e->dst == c.dst &&
			    *(volatile __u32 *)&e->epoch == c.epoch) {
				fp->ifindex = c.oif;
				__builtin_memcpy(fp->dmac, c.dmac, ETH_ALEN);
				__builtin_memcpy(fp->smac, c.smac, ETH_ALEN);
				return c.rc;
			}
		}
	}
	__builtin_memset(fp, 0, sizeof(*fp));
	fp->ifindex = ifindex;
	fp->l4_protocol = p->proto;
	fp->tot_len = p->tot_len;
	if (p->family == FP_FAM_V4) {
		fp->family = AF_INET;
		fp->tos = p->tos;
		fp->ipv4_src = p->src[0];
		fp->ipv4_dst = p->dst[0];
	} else {
		fp->family = AF_INET6;
		fp->flowinfo = p->flowinfo;
		__builtin_memcpy(fp->ipv6_src, p->src, 16);
		__builtin_memcpy(fp->ipv6_dst, p->dst, 16);
	}
	if (p->proto == IPPROTO_TCP || p->proto == IPPROTO_UDP) {
		fp->sport = p->sport;
		fp->dport = p->dport;
	}
	int rc = bpf_fib_lookup(ctx, fp, sizeof(*fp), 0);
	if (e && (rc == BPF_FIB_LKUP_RET_SUCCESS || rc == BPF_FIB_LKUP_RET_NO_NEIGH)) {
		/* mtu_result shares its place with tot_len: the route's MTU
		 * after a success (bpf_fib_set_fwd_params), this packet's
		 * length otherwise; either bounds what a later hit may carry. */
		__u32 mtu = fp->mtu_result;
		e->ifindex = 0;
		asm volatile("" ::: "memory");
		e->dst = p->dst[0];
		e->tos = p->tos;
		e->epoch = sn->epoch;
		e->oif = fp->ifindex;
		__builtin_memcpy(e->dmac, fp->dmac, ETH_ALEN);
		__builtin_memcpy(e->smac, fp->smac, ETH_ALEN);
		e->mtu = mtu > 0xffff ? 0xffff : mtu;
		e->rc = rc;
		asm volatile("" ::: "memory");
		e->ifindex = ifindex;
	}
	return rc;
}

static __always_inline int fib_reason(int rc)
{
	switch (rc) {
	case BPF_FIB_LKUP_RET_NOT_FWDED:
		return FP_R_LOCAL;
	case BPF_FIB_LKUP_RET_NO_NEIGH:
		return FP_R_NO_NEXTHOP;
	case BPF_FIB_LKUP_RET_FRAG_NEEDED:
		return FP_R_MTU;
	default:
		return FP_R_NO_ROUTE;
	}
}

static __always_inline int send(struct xdp_md *ctx, __u32 egress, struct fp_decision *d)
{
	d->egress_ifindex = egress;
	if (egress == ctx->ingress_ifindex)
		return XDP_TX;
	return bpf_redirect_map(&tx_ports, egress, XDP_PASS);
}

/* cache_fill remembers a forward for the next packets of the flow. */
static __always_inline void cache_fill(struct snap *s, struct pkt *p, struct fp_flow_key *fk,
				       struct fp_flow *nf, __u32 egress, struct fp_decision *d)
{
	if (explain_mode || !fk->ifindex)
		return;
	__u32 zero = 0;
	struct fp_cache_gate *g = bpf_map_lookup_elem(&cache_gate, &zero);
	if (!g)
		return;
	nf->gen = s->gen;
	nf->epoch = s->epoch;
	nf->slot = d->slot;
	nf->egress = egress;
	nf->cslot = d->cslot;
	nf->dir_l2 |= d->dir & FP_FLOW_DIR_MASK;
	__builtin_memcpy(nf->in_dmac, p->dmac, ETH_ALEN);
	/* a pass does not depend on the packet's size */
	int pass = nf->dir_l2 & FP_FLOW_PASS;
	nf->max_len = pass ? 0xffff : p->tot_len;
	int v4 = p->family == FP_FAM_V4;
	__u64 h = key_hash(fk, v4);
	nf->key_tag = key_tag(h);
	if (v4) {
		long err = bpf_map_update_elem(&flow_cache4, fk, nf, BPF_ANY);
		keep_call_apart(err);
		/* the slot too: this fill may have raised max_len (a larger
		 * packet of the flow), and a fresh slot is not looked past */
		struct fp_emc *em = emc_slot(h);
		if (em) {
			after_null_check(em);
			emc_clear(em);
			em->flow = *nf;
			emc_set_key(em, (void *)fk);
		}
	} else {
		bpf_map_update_elem(&flow_cache, fk, nf, BPF_ANY);
	}
	if (pass)
		g->total_pass_fills++;
	else
		g->total_fills++;
	g->fills++;
	cache_judge(g);
}

/* cache_pass remembers an `inbound` pass (d: its decision) for the next
 * packets of the flow, so that with per-policy counters on they are
 * counted against the same policy without the full decision. Everything
 * that verdict was derived from is in the entry's key (ingress, VLAN,
 * addresses, TOS, and protocol and ports whenever a policy or the FIB
 * selects on them), its generation (the policies), its route epoch (the
 * interfaces: MAC, inbound opt-in, VLAN children) or its destination MAC
 * (l2-not-ours); TTL, parsing and ICMP errors are checked on every packet
 * before the cache, and the size plays no part. */
static __always_inline void cache_pass(struct scratch *w, struct pkt *p, struct fp_flow_key *fk,
				       struct fp_decision *d)
{
	if (explain_mode || !fk->ifindex)
		return;
	struct fp_flow *nf = &w->nf;
	__builtin_memset(nf, 0, sizeof(*nf));
	nf->dir_l2 = FP_FLOW_PASS;
	cache_fill(&w->sn, p, fk, nf, 0, d);
}

/* forward_out sends cleartext matching an allow OUT policy to the device
 * that packet-offloads the policy's SA. */
static __always_inline int forward_out(struct xdp_md *ctx, struct scratch *w, struct pkt *p,
				       struct fp_policy *out, __u32 logical_in, struct fp_flow_key *fk,
				       struct fp_decision *d)
{
	struct fp_flow *nf = &w->nf;
	struct bpf_fib_lookup *fp = &w->fp;
	__u32 dev = out->offload_ifindex;
	struct fp_iface *dev_if = iface_get(w->sn.iface_gen, dev);
	int rc;

	if (fk->ifindex) /* only cache_fill reads it, and only then */
		__builtin_memset(nf, 0, sizeof(*nf));

	if (!dev_if) {
		d->reason = FP_R_NOT_CONFIGURED;
		return XDP_PASS;
	}
	/* Past the SA: above its MTU the kernel answers frag-needed (DF) or
	 * packet-too-big, or fragments (IPv4 without DF); either way it is the
	 * kernel's packet. A cache entry's max_len never exceeds this, and a
	 * new MTU comes with a new generation. */
	if (p->tot_len > out->sa_mtu) {
		d->reason = FP_R_SA_MTU;
		return XDP_PASS;
	}
	if (use_due(out->index)) {
		d->reason = FP_R_USE_TIME;
		return XDP_PASS;
	}
	/* The SA-deletion window (sa_refs): last before the FIB, so that
	 * only a packet otherwise forwarded pays for the lookup. */
	if (w->sn.sa_check && !sa_held(ctx, out->cslot, w->sn.sa_check)) {
		d->reason = FP_R_SA_GONE;
		return XDP_PASS;
	}
	/* Every configured port that is not a VLAN child is in tx_ports (the
	 * control plane keeps it so), so the redirect below cannot miss and
	 * this path needs no devmap lookup of its own. */
	if (dev_if->parent_ifindex) {
		d->reason = FP_R_NO_TX_PORT;
		return XDP_PASS;
	}
	/* The FIB tells local from forwarded traffic and refuses what the
	 * kernel would not forward (unreachable, forwarding off, MTU). */
	rc = fib(ctx, p, logical_in, fp, &w->sn);
	if (dev_if->l2_mode == FP_L2_FIB) {
		if (rc != BPF_FIB_LKUP_RET_SUCCESS) {
			d->reason = fib_reason(rc);
			return XDP_PASS;
		}
		if (fp->ifindex != dev) {
			d->reason = FP_R_ROUTE_MISMATCH;
			return XDP_PASS;
		}
		if (rewrite(ctx, p, 0, 1, fp->dmac, fp->smac)) {
			d->reason = FP_R_MALFORMED;
			return XDP_PASS;
		}
		nf->dir_l2 = FP_FLOW_L2_FIB;
		__builtin_memcpy(nf->dmac, fp->dmac, ETH_ALEN);
		__builtin_memcpy(nf->smac, fp->smac, ETH_ALEN);
	} else {
		if (rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH) {
			d->reason = fib_reason(rc);
			return XDP_PASS;
		}
		if (rewrite(ctx, p, 0, 0, fp->dmac, fp->smac)) {
			d->reason = FP_R_MALFORMED;
			return XDP_PASS;
		}
	}
	cache_fill(&w->sn, p, fk, nf, dev, d);
	d->reason = FP_R_FWD_OUT;
	return send(ctx, dev, d);
}

/* lru_copy copies k's flow_cache4 / flow_cache entry into dst and returns
 * dst, or 0 when there is none or the element was recycled for another
 * flow before or while it was copied (its tag is not k's). */
static __always_inline struct fp_flow *lru_copy(struct fp_flow_key *k, struct pkt *p, __u32 tag,
						struct fp_flow *dst)
{
	struct fp_flow *e = flow_lookup(k, p);
	if (!e || *(volatile __u32 *)&e->key_tag != tag)
		return 0;
	*dst = *e;
	asm volatile("" ::: "memory");
	if (*(volatile __u32 *)&e->key_tag != tag)
		return 0;
	return dst;
}

/* flow_fresh says whether nothing entry f was derived from has changed. */
static __always_inline int flow_fresh(struct fp_config *cfg, const struct fp_flow *f)
{
	return f->gen == cfg->gen && f->epoch == cfg->route_epoch;
}

/* could_forward says whether a forwardable policy's destination may cover
 * p's (see fwd_dsts): one inline array load. */
#define FP_CACHE_NOT_FWD (-2) /* forward_cached: a miss that cannot be forwarded at all */
static __always_inline int could_forward(struct pkt *p)
{
	__u32 top = bpf_ntohl(p->dst[0]) >> (32 - FP_DST_BITS);
	__u32 i = (p->family & 1) * FP_DST_WORDS + (top >> 6);
	__u64 *w = bpf_map_lookup_elem(&fwd_dsts, &i);
	return !w || (*w >> (top & 63)) & 1; /* no map word: fail toward the full path */
}

/* forward_cached replays a cached forward (outbound, or inbound where the
 * interface opted in). The entry is only trusted while nothing it was
 * derived from changed: the policy tables (generation), routes,
 * neighbours and interfaces — including the inbound opt-in and hairpin
 * next hops (epoch) — and only for packets no larger than one the FIB
 * already accepted (MTU). */
static __always_inline int forward_cached(struct xdp_md *ctx, struct fp_config *cfg, struct pkt *p,
					  struct fp_flow_key *fk, struct fp_decision *d)
{
	struct fp_cache_gate *g = cache_on();
	if (!g) {
		fk->ifindex = 0; /* tells cache_fill not to fill either */
		return -1;
	}
	int v4 = p->family == FP_FAM_V4;
	__u64 h = key_hash(fk, v4);
	struct fp_flow *fl = 0;
	struct fp_emc *em = v4 ? emc_slot(h) : 0;
	if (em) {
		after_null_check(em);
		if (emc_match(em, (void *)fk) && flow_fresh(cfg, &em->flow))
			fl = &em->flow;
	}
	if (!fl) {
		/* Not in the slot: first, could it be forwarded at all? Here,
		 * after the slot and before flow_cache4, so that a cached
		 * forward pays nothing for the question (asked before the slot,
		 * it cost a hit ~10 ns) and a pass no hash lookup. */
		if (!could_forward(p))
			return FP_CACHE_NOT_FWD;
		/* From flow_cache4 / flow_cache, through a verified copy: into
		 * the slot (which this flow then owns on this CPU), or into
		 * this CPU's scratch. */
		struct fp_flow *dst;
		if (em) {
			emc_clear(em);
			dst = &em->flow;
		} else {
			__u32 zero = 0;
			struct scratch *w = bpf_map_lookup_elem(&scratch_space, &zero);
			if (!w)
				return -1;
			after_null_check(w);
			dst = &w->nf;
		}
		fl = lru_copy(fk, p, key_tag(h), dst);
		if (!fl || !flow_fresh(cfg, fl))
			return -1;
		if (em)
			emc_set_key(em, (void *)fk);
	}
	if (p->tot_len > fl->max_len)
		return -1;
	/* the destination MAC this flow's first packet was accepted with */
	const __u16 *pm = (const __u16 *)p->dmac, *fm = (const __u16 *)fl->in_dmac;
	if ((pm[0] ^ fm[0]) | (pm[1] ^ fm[1]) | (pm[2] ^ fm[2]))
		return -1;
	if (fl->dir_l2 & FP_FLOW_PASS) {
		d->dir = fl->dir_l2 & FP_FLOW_DIR_MASK;
		d->cslot = fl->cslot;
		d->slot = fl->slot;
		g->total_pass_hits++;
		g->hits++;
		cache_judge(g);
		d->reason = FP_R_INBOUND;
		return XDP_PASS;
	}
	__u8 dmac[ETH_ALEN], smac[ETH_ALEN];
	__builtin_memcpy(dmac, fl->dmac, ETH_ALEN);
	__builtin_memcpy(smac, fl->smac, ETH_ALEN);
	__u32 egress = fl->egress;
	int l2_fib = fl->dir_l2 & FP_FLOW_L2_FIB;
	__u16 vid = fl->vid;
	d->dir = fl->dir_l2 & FP_FLOW_DIR_MASK;
	d->cslot = fl->cslot;
	d->slot = fl->slot;
	/* The cached forward asks too: an SA deleted since the entry was
	 * made is gone from the device before the mirror drops the entry. */
	if (d->dir == 1 && cfg->sa_check && !sa_held(ctx, d->cslot, cfg->sa_check)) {
		d->reason = FP_R_SA_GONE;
		return XDP_PASS;
	}
	if (rewrite(ctx, p, vid, l2_fib, dmac, smac)) {
		d->reason = FP_R_MALFORMED;
		return XDP_PASS;
	}
	g->total_hits++;
	g->hits++;
	cache_judge(g);
	d->reason = d->dir == 1 ? FP_R_FWD_OUT : FP_R_FWD_IN;
	return send(ctx, egress, d);
}

/* forward_in: opt-in inbound forwarding of traffic the NIC decrypted. */
static __always_inline int forward_in(struct xdp_md *ctx, struct scratch *w, struct pkt *p,
				      struct fp_iface *in_if, __u32 logical_in, struct fp_flow_key *fk,
				      struct fp_decision *d)
{
	struct bpf_fib_lookup *fp = &w->fp;
	struct fp_flow *nf = &w->nf;
	__u32 egress;
	const __u8 *dmac, *smac;

	if (use_due(d->policy_index)) { /* the FWD policy's use time */
		d->reason = FP_R_USE_TIME;
		return XDP_PASS;
	}

	if (in_if->hairpin_ifindex) {
		egress = in_if->hairpin_ifindex;
		dmac = in_if->hairpin_dmac;
		smac = in_if->hairpin_smac;
		/* still refuse what the kernel would keep (local, no route) */
		int rc = fib(ctx, p, logical_in, fp, &w->sn);
		if (rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH) {
			d->reason = fib_reason(rc);
			return XDP_PASS;
		}
	} else {
		int rc = fib(ctx, p, logical_in, fp, &w->sn);
		if (rc != BPF_FIB_LKUP_RET_SUCCESS) {
			d->reason = fib_reason(rc);
			return XDP_PASS;
		}
		egress = fp->ifindex;
		dmac = fp->dmac;
		smac = fp->smac;
	}
	__u16 vid = 0;
	struct fp_iface *eg = iface_get(w->sn.iface_gen, egress);
	if (eg && eg->parent_ifindex) {
		vid = eg->vlan_id;
		egress = eg->parent_ifindex;
	}
	if (!bpf_map_lookup_elem(&tx_ports, &egress) && egress != ctx->ingress_ifindex) {
		d->reason = FP_R_NO_TX_PORT;
		return XDP_PASS;
	}
	__builtin_memset(nf, 0, sizeof(*nf));
	nf->dir_l2 = FP_FLOW_L2_FIB;
	nf->vid = vid;
	__builtin_memcpy(nf->dmac, dmac, ETH_ALEN);
	__builtin_memcpy(nf->smac, smac, ETH_ALEN);
	if (rewrite(ctx, p, vid, 1, dmac, smac)) {
		d->reason = FP_R_MALFORMED;
		return XDP_PASS;
	}
	cache_fill(&w->sn, p, fk, nf, egress, d);
	d->reason = FP_R_FWD_IN;
	return send(ctx, egress, d);
}

/* mac_eq compares two 2-byte-aligned MACs. */
static __always_inline int mac_eq(const __u8 *a, const __u8 *b)
{
	const __u16 *x = (const __u16 *)a, *y = (const __u16 *)b;
	return !((x[0] ^ y[0]) | (x[1] ^ y[1]) | (x[2] ^ y[2]));
}

/* l2_ours says whether the kernel would take the frame as PACKET_HOST:
 * sent to the ingress device's MAC (eth_type_trans) or, tagged, to its
 * VLAN child's (vlan_do_receive). A device without a MAC (loopback) is
 * not checked. Group addresses were refused by parse_packet. */
static __always_inline int l2_ours(struct fp_iface *phys, struct fp_iface *child, struct pkt *p)
{
	const __u16 *m = (const __u16 *)phys->mac;
	if (!(m[0] | m[1] | m[2]) || mac_eq(p->dmac, phys->mac))
		return 1;
	return child && mac_eq(p->dmac, child->mac);
}

/* v6_martian: unspecified, loopback, multicast, link-local, IPv4-mapped. */
static __always_inline int v6_martian(const __be32 *a)
{
	__u32 w0 = bpf_ntohl(a[0]);
	if ((w0 >> 24) == 0xff || (w0 & 0xffc00000) == 0xfe800000)
		return 1;
	if (w0 || a[1])
		return 0;
	if (a[2] == bpf_htonl(0xffff))
		return 1; /* ::ffff:0:0/96 */
	return !a[2] && (!a[3] || a[3] == bpf_htonl(1));
}

/* martian says whether the kernel refuses to forward the packet for its
 * addresses alone. IPv4 (ip_route_input_slow): source multicast, limited
 * broadcast, 0/8 or loopback; destination 0/8, loopback, multicast or
 * limited broadcast (not forwarded as unicast). IPv6 (ip6_rcv_core,
 * ip6_forward): source unspecified, loopback, multicast, link-local or
 * IPv4-mapped; destination unspecified, loopback, multicast, link-local or
 * IPv4-mapped. The flow-cache key holds both addresses, so only a packet
 * the cache does not answer needs this. */
static __always_inline int martian(struct pkt *p)
{
	if (p->family == FP_FAM_V4) {
		__u32 s = bpf_ntohl(p->src[0]), d = bpf_ntohl(p->dst[0]);
		__u8 sa = s >> 24, da = d >> 24;
		return sa == 0 || sa == 127 || (sa & 0xf0) == 0xe0 || s == 0xffffffff ||
		       da == 0 || da == 127 || (da & 0xf0) == 0xe0 || d == 0xffffffff;
	}
	return v6_martian(p->src) || v6_martian(p->dst);
}

/* source_ok: the IPv4 source checks of fib_validate_source. One of this
 * host's addresses as source is a martian (inet_lookup_ifaddr_rcu). Loose
 * reverse-path filtering (rp_filter 2) wants a unicast route back to the
 * source, through any device: a FIB lookup towards the source that
 * succeeds; anything else (no route, local, blackhole...) the kernel
 * decides. Strict mode (1) also wants that route's device to be the
 * ingress one, with multipath and the device's addresses in play: not
 * mirrored, the kernel decides. Run only before a forward, and cached with
 * the flow (whose key holds the source; the control plane rewrites
 * own_addrs and bumps the route epoch when addresses or routes change). */
static __always_inline int source_ok(struct xdp_md *ctx, struct scratch *w, struct pkt *p,
				     struct fp_iface *in_if, __u32 logical_in, struct fp_decision *d)
{
	if (p->family != FP_FAM_V4)
		return 1;
	if (own_source(p->src[0])) {
		d->reason = FP_R_MARTIAN;
		return 0;
	}
	if (!in_if->rp_filter)
		return 1;
	if (in_if->rp_filter == 2) {
		struct bpf_fib_lookup *fp = &w->fp;
		__builtin_memset(fp, 0, sizeof(*fp));
		fp->family = AF_INET;
		fp->ifindex = logical_in;
		fp->tos = p->tos;
		fp->ipv4_src = p->dst[0];
		fp->ipv4_dst = p->src[0];
		int rc = bpf_fib_lookup(ctx, fp, sizeof(*fp), BPF_FIB_LOOKUP_SKIP_NEIGH);
		if (rc == BPF_FIB_LKUP_RET_SUCCESS || rc == BPF_FIB_LKUP_RET_NO_NEIGH)
			return 1;
	}
	d->reason = FP_R_RP_FILTER;
	return 0;
}

/* usable says whether the packet may be forwarded at all: the control
 * plane is in sync and alive. */
static __always_inline int usable(struct fp_config *cfg, struct fp_decision *d)
{
	if (!cfg || !cfg->ready) {
		d->reason = FP_R_NOT_READY;
		return 0;
	}
	/* A daemon that stopped renewing its lease may have missed an SA
	 * going away: stop forwarding rather than trust stale maps. */
	__u32 zero = 0;
	struct fp_lease *l = bpf_map_lookup_elem(&lease, &zero);
	if (!l || l->expired) {
		d->reason = FP_R_NOT_READY;
		return 0;
	}
	return 1;
}

/* decide_full is the whole decision for a packet the flow cache did not
 * answer: ingress interface, VLAN child, classification, FIB. parsed is
 * parse_packet's result for p. A global function, so the verifier checks
 * it once on its own instead of once per path through the cached stage
 * (inline, the two exceed its 1M-instruction budget). */
__attribute__((noinline)) int decide_full(struct xdp_md *ctx, struct pkt *p, struct fp_flow_key *fk,
					  struct fp_decision *d, int parsed)
{
	__u32 zero = 0;
	if (!ctx || !p || !fk || !d)
		return XDP_PASS;
	struct fp_config *cfg = bpf_map_lookup_elem(&config, &zero);
	if (!usable(cfg, d)) /* checked by the cached stage too; two loads */
		return XDP_PASS;
	struct scratch *w = bpf_map_lookup_elem(&scratch_space, &zero);
	if (!w) {
		d->reason = FP_R_NOT_READY;
		return XDP_PASS;
	}
	after_null_check(w);
	w->sn.gen = *(volatile __u32 *)&cfg->gen;
	w->sn.epoch = *(volatile __u32 *)&cfg->route_epoch;
	w->sn.fib_dst_only = cfg->fib_dst_only;
	w->sn.iface_gen = *(volatile __u32 *)&cfg->iface_gen;
	w->sn.sa_check = cfg->sa_check;
	__u32 phys = ctx->ingress_ifindex;
	struct fp_iface *in_if = iface_get(w->sn.iface_gen, phys);
	if (!in_if) {
		d->reason = FP_R_NOT_CONFIGURED;
		return XDP_PASS;
	}
	d->slot = in_if->slot;
	if (parsed != FP_R_MAX) {
		d->reason = (__u32)parsed;
		return XDP_PASS;
	}
	__u32 logical_in = phys;
	if (p->tagged) {
		struct fp_vlan_key vk = {.ifindex = phys, .vid = p->vid};
		__u32 *child = bpf_map_lookup_elem(&vlans, &vk);
		if (!child) {
			d->reason = FP_R_VLAN_UNKNOWN;
			return XDP_PASS;
		}
		logical_in = *child;
		struct fp_iface *child_if = iface_get(w->sn.iface_gen, logical_in);
		if (!l2_ours(in_if, child_if, p)) {
			d->reason = FP_R_L2_NOT_OURS;
			return XDP_PASS;
		}
		if (child_if)
			in_if = child_if;
	} else if (!l2_ours(in_if, 0, p)) {
		d->reason = FP_R_L2_NOT_OURS;
		return XDP_PASS;
	}
	if (martian(p)) {
		d->reason = FP_R_MARTIAN;
		return XDP_PASS;
	}
	if (p->ttl <= 1) {
		d->reason = FP_R_TTL;
		return XDP_PASS;
	}

	struct classify_ctx c = {.p = p};
	if (classify(cfg, &w->sn, &c)) {
		d->reason = FP_R_NOT_READY;
		return XDP_PASS;
	}
	struct best *in = &c.b[0], *out = &c.b[1], *fwd = &c.b[2];
	d->matched = in->found | out->found << 1 | fwd->found << 2;

	/* An ICMP error no FWD policy matches: the kernel's FWD check then
	 * looks up the quoted packet, reversed (xfrm_in_fwd_icmp). Not
	 * mirrored: the kernel decides. */
	if (p->icmp_err && !fwd->found) {
		d->reason = FP_R_ICMP_ERROR;
		return XDP_PASS;
	}

	/* Inbound: an IN match, or a FWD match the kernel would only accept
	 * decrypted. XDP cannot tell decrypted from spoofed cleartext, so by
	 * default the kernel's FWD check decides. */
	int fwd_needs_sa = fwd->found &&
			   (fwd->pol.action == FP_BLOCK || (fwd->pol.flags & FP_F_TMPL_REQUIRED) ||
			    /* which FWD policy wins is not certain: it may be one that does */
			    fwd->tie || (fwd->pol.flags & FP_F_UNCERTAIN));
	if (in->found || fwd_needs_sa) {
		struct best *dec = fwd->found ? fwd : in;
		d->dir = fwd->found ? 2 : 0;
		d->policy_index = dec->pol.index;
		d->cslot = dec->pol.cslot;
		d->policy_priority = dec->pol.priority;
		if (dec->tie || (dec->pol.flags & FP_F_UNCERTAIN) ||
		    (in->found && (in->tie || (in->pol.flags & FP_F_UNCERTAIN)))) {
			d->reason = FP_R_UNCERTAIN;
			return XDP_PASS;
		}
		if (dec->pol.action == FP_BLOCK || (in->found && in->pol.action == FP_BLOCK)) {
			d->reason = FP_R_BLOCK;
			return XDP_PASS;
		}
		struct best *sa = in->found ? in : fwd;
		if (!in_if->inbound_forward || sa->pol.offload_ifindex != phys) {
			d->reason = FP_R_INBOUND;
			cache_pass(w, p, fk, d);
			return XDP_PASS;
		}
		if (!source_ok(ctx, w, p, in_if, logical_in, d))
			return XDP_PASS;
		return forward_in(ctx, w, p, in_if, logical_in, fk, d);
	}

	if (!out->found) {
		d->reason = FP_R_NO_POLICY;
		return XDP_PASS;
	}
	d->dir = 1;
	d->policy_index = out->pol.index;
	d->cslot = out->pol.cslot;
	d->policy_priority = out->pol.priority;
	if (out->tie || (out->pol.flags & FP_F_UNCERTAIN)) {
		d->reason = FP_R_UNCERTAIN;
		return XDP_PASS;
	}
	if (out->pol.action == FP_BLOCK) {
		d->reason = FP_R_BLOCK;
		return XDP_PASS;
	}
	if (!out->pol.offload_ifindex) {
		d->reason = FP_R_NOT_OFFLOADED;
		return XDP_PASS;
	}
	/* Offloaded, but the device would miss some of the policy's packets
	 * and send them in cleartext (FP_F_DEVICE_MISS): the kernel's. */
	if (out->pol.flags & FP_F_DEVICE_MISS) {
		d->reason = FP_R_DEVICE_MISS;
		return XDP_PASS;
	}
	/* The kernel checks forwarded cleartext against FWD policies too:
	 * only a FWD allow with optional templates (strongSwan's
	 * policies_fwd_out), or no FWD match under a default of accept,
	 * lets it through. */
	if (fwd->found) {
		if (fwd->tie || (fwd->pol.flags & FP_F_UNCERTAIN)) {
			d->reason = FP_R_UNCERTAIN;
			return XDP_PASS;
		}
	} else if (cfg->fwd_default_block) {
		d->reason = FP_R_FWD_CHECK;
		return XDP_PASS;
	}
	if (!source_ok(ctx, w, p, in_if, logical_in, d))
		return XDP_PASS;
	return forward_out(ctx, w, p, &out->pol, logical_in, fk, d);
}

/* pass_early passes a packet the cached stage already knows cannot be
 * forwarded, with the decision the full one would report for it: reason,
 * or not-configured when the ingress interface is unknown (whose counter
 * slot it needs either way). */
static __always_inline int pass_early(struct xdp_md *ctx, struct fp_config *cfg, struct fp_decision *d,
				      __u32 reason)
{
	struct fp_iface *in_if = iface_get(cfg->iface_gen, ctx->ingress_ifindex);
	if (!in_if) {
		d->reason = FP_R_NOT_CONFIGURED;
		return XDP_PASS;
	}
	d->slot = in_if->slot;
	d->reason = reason;
	return XDP_PASS;
}

/* decide_cached passes what cannot be forwarded, and answers from the
 * flow cache: a hit needs neither the interface tables nor classification (an entry exists only for a
 * configured interface and VLAN, and any change to those bumps the epoch
 * that invalidates it). It returns the XDP action, or FP_ASK_FULL - the
 * parse result when the full decision must run. Inline in the program: as
 * a function of its own, its call, prologue and return cost ~19 ns a
 * packet (measured); decide_full keeps its scratch in a map to leave the
 * stack room for it. */
#define FP_ASK_FULL (-1)
static __always_inline int decide_cached(struct xdp_md *ctx, struct fp_config *cfg, struct pkt *p,
					 struct fp_flow_key *fk, struct fp_decision *d)
{
	if (!usable(cfg, d))
		return XDP_PASS;
	int parsed = parse_packet(ctx, p);
	/* The explain instance always takes the full decision, so that it
	 * names the exact reason. The live program passes what parsing
	 * refused, and what no forwardable policy covers (could_forward:
	 * with per-policy counters on, fwd_dsts holds every policy's
	 * destinations, so that every packet a policy may match is counted),
	 * from here: the same verdict at a fraction of the cost. */
	if (!explain_mode && parsed != FP_R_MAX)
		return pass_early(ctx, cfg, d, parsed);
	/* ICMP errors never use the cache: whether the kernel looks into the
	 * quoted packet depends on the type, which a key without ports (flow_l4
	 * 0) does not hold; they are rare. */
	if (!explain_mode && parsed == FP_R_MAX && p->ttl > 1 && !p->icmp_err) {
		flow_key(fk, p, ctx->ingress_ifindex, cfg->flow_l4);
		int act = forward_cached(ctx, cfg, p, fk, d);
		if (act >= 0)
			return act;
		if (act == FP_CACHE_NOT_FWD)
			return pass_early(ctx, cfg, d, FP_R_NOT_FORWARDABLE);
	} else {
		fk->ifindex = 0; /* no cache fill: the only field read then */
	}
	/* the cache off, TTL <= 1, ICMP errors: not asked yet */
	if (!explain_mode && !could_forward(p))
		return pass_early(ctx, cfg, d, FP_R_NOT_FORWARDABLE);
	return FP_ASK_FULL - parsed;
}

SEC("xdp")
int xdp_fastpath(struct xdp_md *ctx)
{
	struct fp_decision d = {};
	struct pkt p = {};
	struct fp_flow_key fk;
	__u64 len = ctx->data_end - ctx->data;
	__u32 zero = 0;
	struct fp_config *cfg = bpf_map_lookup_elem(&config, &zero);
	int act = decide_cached(ctx, cfg, &p, &fk, &d);
	if (act <= FP_ASK_FULL)
		act = decide_full(ctx, &p, &fk, &d, FP_ASK_FULL - act);

	d.action = act;
	if (explain_mode) {
		bpf_map_update_elem(&explain_out, &zero, &d, BPF_ANY);
		return act;
	}
	/* a mask and a compare, not '%': the BPF backend emits a division */
	__u32 reason = (d.slot & (FP_MAX_IFACE_SLOTS - 1)) * FP_R_MAX +
		       (d.reason < FP_R_MAX ? d.reason : FP_R_NOT_READY);
	__u64 *rc = bpf_map_lookup_elem(&reason_counts, &reason);
	if (rc)
		(*rc)++;
	if (d.cslot && cfg && cfg->counters) {
		struct fp_counter *c = bpf_map_lookup_elem(&policy_counts, &d.cslot);
		if (c) {
			c->packets++;
			c->bytes += len;
		}
	}
	return act;
}

static int lease_expired(void *map, __u32 *key, struct fp_lease *l)
{
	l->expired = 1;
	return 0;
}

/* xdp_lease_renew keeps the fast path open for config.lease_ns more, or
 * closes it now when that is <= 0. The daemon runs it with BPF_PROG_RUN;
 * it is never attached. */
SEC("xdp")
int xdp_lease_renew(struct xdp_md *ctx)
{
	__u32 zero = 0;
	struct fp_config *cfg = bpf_map_lookup_elem(&config, &zero);
	struct fp_lease *l = bpf_map_lookup_elem(&lease, &zero);
	if (!cfg || !l)
		return XDP_ABORTED;
	__s64 ns = cfg->lease_ns;
	if (ns <= 0) {
		l->expired = 1;
		bpf_timer_cancel(&l->timer);
		return XDP_PASS;
	}
	bpf_timer_init(&l->timer, &lease, 1 /* CLOCK_MONOTONIC */); /* -EBUSY once armed before */
	if (bpf_timer_set_callback(&l->timer, lease_expired) || bpf_timer_start(&l->timer, ns, 0))
		return XDP_ABORTED;
	l->expired = 0;
	return XDP_PASS;
}

/* Anchors so clang emits full BTF for the types bpf2go turns into Go. */
const struct fp_pkey *_fp_pkey __attribute__((unused));
const struct fp_pkey4 *_fp_pkey4 __attribute__((unused));
const struct fp_policy *_fp_policy __attribute__((unused));
const struct fp_pentry *_fp_pentry __attribute__((unused));
const struct fp_didx4 *_fp_didx4 __attribute__((unused));
const struct fp_tuple *_fp_tuple __attribute__((unused));
const struct fp_iface *_fp_iface __attribute__((unused));
const struct fp_vlan_key *_fp_vlan_key __attribute__((unused));
const struct fp_decision *_fp_decision __attribute__((unused));
const struct fp_counter *_fp_counter __attribute__((unused));
const struct fp_flow_key *_fp_flow_key __attribute__((unused));
const struct fp_flow_key4 *_fp_flow_key4 __attribute__((unused));
const struct fp_flow *_fp_flow __attribute__((unused));
const struct fp_sa_ref *_fp_sa_ref __attribute__((unused));
const enum fp_sa_check *_fp_sa_check __attribute__((unused));
const enum fp_reason *_fp_reason __attribute__((unused));

/* Dual BSD/GPL: GPL-compatible for the kernel's GPL-only helpers (bpf_fib_lookup), BSD so
 * the object can be embedded in the Apache-2.0 binary (README, License). */
char LICENSE[] SEC("license") = "Dual BSD/GPL";
