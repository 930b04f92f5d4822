// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The cached forward of bpf/fastpath.c, in prefixes: `sluice bench fastpath --stages` loads this
 * object over a fast path's own maps (cilium/ebpf MapReplacements) and runs each program on a
 * frame whose flow is cached, so that the difference between one program and the one before it is
 * what that step of the cached forward costs. Each program runs the same stage functions the fast
 * path does, up to its step, and then passes; XDP_DROP says the frame did not take the cache-hit
 * path up to there (the bench then reports an error, not a number). Never attached.
 *
 * The steps, in the order of forward_cached (fastpath/forward.h):
 *   stage_entry    nothing: the cost of a BPF_PROG_RUN run itself
 *   stage_config   the configuration and the lease (usable)
 *   stage_parse    parse_packet
 *   stage_lookup   the flow key, the cache gate, the exact-match slot (cache_find)
 *   stage_checks   size and MAC (cache_fits), the SA check as config.sa_check says
 *   stage_redirect the redirect (aim: bpf_redirect_map on tx_ports, a DEVMAP array), aimed
 *                  before the frame is touched
 *   stage_rewrite  the MAC and TTL rewrite: the whole cached forward
 *   stage_cached   the whole cached stage, decide_cached, as the program inlines it: with the
 *                  gate's counters
 * xdp_fastpath, the program itself, adds the counters (counters.h). */
#include "parse.h"
/* the stages the cached forward runs (the classifier and the receive checks are the full
 * decision's) */
#include "fastpath/config.h"
#include "fastpath/counters.h"
#include "fastpath/quickpass.h"
#include "fastpath/postsa.h"
#include "fastpath/route.h"
#include "fastpath/rewrite.h"
#include "fastpath/flowcache.h"
#include "fastpath/forward.h"
#include "fastpath/cached.h"

/* upto runs the cached forward up to step (1: config ... 5: redirect, 6: rewrite) on ctx: XDP_PASS
 * (6: the redirect's action) when it got there on the cache-hit path, XDP_DROP when not. */
static __always_inline int upto(struct xdp_md *ctx, int step)
{
	__u32 zero = 0;
	struct fp_decision d = {};
	struct pkt p = {};
	struct fp_flow_key fk;
	struct fp_config *cfg = bpf_map_lookup_elem(&config, &zero);
	if (!usable(cfg, &d))
		return XDP_DROP;
	if (step == 1)
		return XDP_PASS;
	if (parse_packet(ctx, &p) != FP_R_MAX)
		return XDP_DROP;
	if (step == 2)
		return XDP_PASS;
	flow_key(&fk, &p, ctx->ingress_ifindex, cfg->flow_l4);
	if (!cache_on())
		return XDP_DROP;
	int miss;
	struct fp_flow *fl = cache_find(cfg, &p, &fk, &miss);
	if (!fl)
		return XDP_DROP;
	if (step == 3)
		return XDP_PASS;
	if (!cache_fits(fl, &p) || (fl->dir_l2 & FP_FLOW_PASS))
		return XDP_DROP;
	__u8 dmac[ETH_ALEN], smac[ETH_ALEN];
	__builtin_memcpy(dmac, fl->dmac, ETH_ALEN);
	__builtin_memcpy(smac, fl->smac, ETH_ALEN);
	int l2_fib = fl->dir_l2 & FP_FLOW_L2_FIB;
	__u16 vid = fl->vid;
	if ((fl->dir_l2 & FP_FLOW_DIR_MASK) == 1 && cfg->sa_check && !sa_held(ctx, fl->cslot, cfg->sa_check))
		return XDP_DROP;
	if (step == 4)
		return XDP_PASS;
	int act = aim(fl->port, fl->dir_l2 & FP_FLOW_TX);
	if (act != XDP_REDIRECT)
		return XDP_DROP;
	if (step == 5)
		return XDP_PASS;
	if (rewrite(ctx, &p, vid, l2_fib, dmac, smac))
		return XDP_DROP;
	return act;
}

SEC("xdp")
int stage_entry(struct xdp_md *ctx)
{
	return XDP_PASS;
}

SEC("xdp")
int stage_config(struct xdp_md *ctx)
{
	return upto(ctx, 1);
}

SEC("xdp")
int stage_parse(struct xdp_md *ctx)
{
	return upto(ctx, 2);
}

SEC("xdp")
int stage_lookup(struct xdp_md *ctx)
{
	return upto(ctx, 3);
}

SEC("xdp")
int stage_checks(struct xdp_md *ctx)
{
	return upto(ctx, 4);
}

SEC("xdp")
int stage_redirect(struct xdp_md *ctx)
{
	return upto(ctx, 5);
}

SEC("xdp")
int stage_rewrite(struct xdp_md *ctx)
{
	return upto(ctx, 6);
}

SEC("xdp")
int stage_cached(struct xdp_md *ctx)
{
	__u32 zero = 0;
	struct fp_decision d = {};
	struct pkt p = {};
	struct fp_flow_key fk;
	struct fp_config *cfg = bpf_map_lookup_elem(&config, &zero);
	return decide_cached(ctx, cfg, &p, &fk, &d);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
