// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* sluice XDP fast path, the flow cache: the exact-match slot per CPU in front of the LRU tables, the gate that
 * turns the cache off when it loses, the key, and filling it.
 *
 * A stage of bpf/fastpath.c, which includes the stages once each, in the order its outline
 * gives: each reads what the ones before it define. Not a header to include elsewhere. */

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

/* cache_fill remembers a forward (nf: its port, MACs, VLAN tag and
 * FP_FLOW_* bits, set by the caller) for the next packets of the flow. */
static __always_inline void cache_fill(struct snap *s, struct pkt *p, struct fp_flow_key *fk,
				       struct fp_flow *nf, struct fp_decision *d)
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
	cache_fill(&w->sn, p, fk, nf, d);
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
