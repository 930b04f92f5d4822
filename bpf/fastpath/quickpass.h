// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* sluice XDP fast path, the quick pass: what is passed before the flow cache and the classifier, with the
 * reason the full decision would give (parse refusals, destinations no forwardable policy covers).
 *
 * A stage of bpf/fastpath.c, which includes the stages once each, in the order its outline
 * gives: each reads what the ones before it define. Not a header to include elsewhere. */

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
