// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* sluice XDP fast path, the destination index, the first classification stage for IPv4.
 *
 * A stage of bpf/fastpath.c, which includes the stages once each, in the order its outline
 * gives: each reads what the ones before it define. Not a header to include elsewhere. */

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
