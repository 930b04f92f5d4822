// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* sluice XDP fast path, the policy tables a classification reads (one per generation and family) and what it yields:
 * the best policy per direction, with ties noted.
 *
 * A stage of bpf/fastpath.c, which includes the stages once each, in the order its outline
 * gives: each reads what the ones before it define. Not a header to include elsewhere. */

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
