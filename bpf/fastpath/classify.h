// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* sluice XDP fast path, the tuple-space search, the second classification stage, and classify, which runs both.
 *
 * A stage of bpf/fastpath.c, which includes the stages once each, in the order its outline
 * gives: each reads what the ones before it define. Not a header to include elsewhere. */

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
