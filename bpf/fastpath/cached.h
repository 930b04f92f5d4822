// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* sluice XDP fast path, the cached stage: what every packet meets first, and all a flow-cache
 * hit meets. Also run in parts by bpf/stage_probe.c, which measures what each step costs.
 *
 * A stage of bpf/fastpath.c, which includes the stages once each, in the order its outline
 * gives: each reads what the ones before it define. Not a header to include elsewhere. */

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
