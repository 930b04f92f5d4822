// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* sluice XDP fast path, the route: bpf_fib_lookup, with a per-CPU cache of its answers for IPv4 destinations.
 *
 * A stage of bpf/fastpath.c, which includes the stages once each, in the order its outline
 * gives: each reads what the ones before it define. Not a header to include elsewhere. */

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
