// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* sluice XDP fast path, the forwards: an outbound one into the device that offloads the policy's SA, an opt-in
 * inbound one of what the NIC decrypted, and the cached one that replays either.
 *
 * A stage of bpf/fastpath.c, which includes the stages once each, in the order its outline
 * gives: each reads what the ones before it define. Not a header to include elsewhere. */

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
	/* A VLAN child has no redirect port of its own (fp_iface.port is its
	 * parent's), and an outbound forward does not push tags. */
	if (dev_if->parent_ifindex) {
		d->reason = FP_R_NO_TX_PORT;
		return XDP_PASS;
	}
	/* The FIB tells local from forwarded traffic and refuses what the
	 * kernel would not forward (unreachable, forwarding off, MTU). */
	rc = fib(ctx, p, logical_in, fp, &w->sn);
	int l2_fib = dev_if->l2_mode == FP_L2_FIB;
	/* Where the NIC writes the Ethernet header, an unresolved neighbour
	 * is the NIC's to resolve. */
	if (rc != BPF_FIB_LKUP_RET_SUCCESS && (l2_fib || rc != BPF_FIB_LKUP_RET_NO_NEIGH)) {
		d->reason = fib_reason(rc);
		return XDP_PASS;
	}
	if (l2_fib && fp->ifindex != dev) {
		d->reason = FP_R_ROUTE_MISMATCH;
		return XDP_PASS;
	}
	int tx = dev == ctx->ingress_ifindex;
	int act = aim(dev_if->port, tx);
	if (act == XDP_PASS) {
		d->reason = FP_R_NO_TX_PORT;
		return XDP_PASS;
	}
	if (rewrite(ctx, p, 0, l2_fib, fp->dmac, fp->smac)) {
		d->reason = FP_R_MALFORMED;
		return XDP_PASS;
	}
	if (l2_fib) {
		nf->dir_l2 = FP_FLOW_L2_FIB;
		__builtin_memcpy(nf->dmac, fp->dmac, ETH_ALEN);
		__builtin_memcpy(nf->smac, fp->smac, ETH_ALEN);
	}
	nf->dir_l2 |= tx ? FP_FLOW_TX : 0;
	nf->port = dev_if->port;
	cache_fill(&w->sn, p, fk, nf, d);
	d->egress_ifindex = dev;
	d->reason = FP_R_FWD_OUT;
	return act;
}

/* cache_find finds the flow's cached entry (fk: its key, made by flow_key;
 * g: this CPU's gate, cache_on's): from this CPU's exact-match slot, else
 * from flow_cache4 / flow_cache through a verified copy (into the slot,
 * which the flow then owns on this CPU, or into this CPU's scratch). 0
 * when there is none or it is stale; *miss then says whether the packet
 * could be forwarded at all (-1) or not (FP_CACHE_NOT_FWD). */
static __always_inline struct fp_flow *cache_find(struct fp_config *cfg, struct pkt *p,
						  struct fp_flow_key *fk, int *miss)
{
	int v4 = p->family == FP_FAM_V4;
	__u64 h = key_hash(fk, v4);
	struct fp_flow *fl = 0;
	struct fp_emc *em = v4 ? emc_slot(h) : 0;
	*miss = -1;
	if (em) {
		after_null_check(em);
		if (emc_match(em, (void *)fk) && flow_fresh(cfg, &em->flow))
			fl = &em->flow;
	}
	if (fl)
		return fl;
	/* Not in the slot: first, could it be forwarded at all? Here, after
	 * the slot and before flow_cache4, so that a cached forward pays
	 * nothing for the question (asked before the slot, it cost a hit
	 * ~10 ns) and a pass no hash lookup. */
	if (!could_forward(p)) {
		*miss = FP_CACHE_NOT_FWD;
		return 0;
	}
	struct fp_flow *dst;
	if (em) {
		emc_clear(em);
		dst = &em->flow;
	} else {
		__u32 zero = 0;
		struct scratch *w = bpf_map_lookup_elem(&scratch_space, &zero);
		if (!w)
			return 0;
		after_null_check(w);
		dst = &w->nf;
	}
	fl = lru_copy(fk, p, key_tag(h), dst);
	if (!fl || !flow_fresh(cfg, fl))
		return 0;
	if (em)
		emc_set_key(em, (void *)fk);
	return fl;
}

/* cache_fits says whether entry fl may answer for p: no larger than a
 * packet the FIB already accepted, and sent to the destination MAC the
 * flow's first packet was accepted with. */
static __always_inline int cache_fits(const struct fp_flow *fl, const struct pkt *p)
{
	if (p->tot_len > fl->max_len)
		return 0;
	const __u16 *pm = (const __u16 *)p->dmac, *fm = (const __u16 *)fl->in_dmac;
	return !((pm[0] ^ fm[0]) | (pm[1] ^ fm[1]) | (pm[2] ^ fm[2]));
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
	int miss;
	struct fp_flow *fl = cache_find(cfg, p, fk, &miss);
	if (!fl)
		return miss;
	if (!cache_fits(fl, p))
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
	int l2_fib = fl->dir_l2 & FP_FLOW_L2_FIB;
	__u16 vid = fl->vid;
	/* The port first, while the frame is as it came: a port number the
	 * control plane took away since the entry was made (its device left
	 * the configuration, or went away) misses, and the packet is decided
	 * again in full. A number is never given to another device before
	 * all the others were used, so a stale entry cannot reach one. */
	int act = aim(fl->port, fl->dir_l2 & FP_FLOW_TX);
	if (act == XDP_PASS)
		return -1;
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
	return act;
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
	int tx = egress == ctx->ingress_ifindex;
	__u32 port = 0;
	if (!tx) {
		__u32 *pp = bpf_map_lookup_elem(&port_of, &egress);
		if (!pp) {
			d->reason = FP_R_NO_TX_PORT;
			return XDP_PASS;
		}
		port = *pp;
	}
	int act = aim(port, tx);
	if (act == XDP_PASS) {
		d->reason = FP_R_NO_TX_PORT;
		return XDP_PASS;
	}
	__builtin_memset(nf, 0, sizeof(*nf));
	nf->dir_l2 = FP_FLOW_L2_FIB | (tx ? FP_FLOW_TX : 0);
	nf->port = port;
	nf->vid = vid;
	__builtin_memcpy(nf->dmac, dmac, ETH_ALEN);
	__builtin_memcpy(nf->smac, smac, ETH_ALEN);
	if (rewrite(ctx, p, vid, 1, dmac, smac)) {
		d->reason = FP_R_MALFORMED;
		return XDP_PASS;
	}
	cache_fill(&w->sn, p, fk, nf, d);
	d->egress_ifindex = egress;
	d->reason = FP_R_FWD_IN;
	return act;
}
