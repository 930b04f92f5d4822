// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* sluice XDP fast path.
 *
 * Forwards in XDP only what the kernel would have sent through a
 * packet-offloaded SA anyway, and passes everything else to the kernel.
 * The classifier reproduces the kernel's XFRM policy choice (lowest
 * priority value among matching selectors) with tuple-space search: one
 * hash lookup per distinct selector shape, independent of the policy count.
 * See docs/fastpath.md for the design and the security invariants.
 *
 * A packet's way through xdp_fastpath, one stage per file of fastpath/:
 *
 *   decide_cached     cached.h     the cached stage, inline in the program:
 *     usable            config.h     the control plane is in sync and its lease alive
 *     parse_packet      parse.h      Ethernet, up to two VLAN tags, IPv4/IPv6, ports
 *     pass_early        quickpass.h  parsing refused it: pass, with the reason
 *     forward_cached    forward.h    exact-match slot, then the LRU tables (flowcache.h):
 *                                    a hit re-checks size, MAC and SA (postsa.h),
 *                                    aims the redirect at its port, then rewrites
 *                                    (rewrite.h)
 *     could_forward     quickpass.h  no forwardable policy covers the destination: pass
 *   decide_full (below; a global function, which the verifier checks once)
 *     iface_get, vlans  config.h     the ingress interface and VLAN child
 *     l2_ours, martian  checks.h     what the kernel's receive path would refuse, TTL
 *     classify          didx.h       the destination index (IPv4), else
 *                       classify.h   the tuple search over the tables of policy.h:
 *                                    the best policy per direction, ties noted
 *     IN or FWD match   forward.h    forward_in where the interface opted in, else
 *                                    pass (flowcache.h's cache_pass remembers it)
 *     OUT match         checks.h     source_ok, then forward_out (forward.h): the SA's
 *                       postsa.h     MTU, the use-time hand-over, the SA still held,
 *                       route.h      the FIB (cached per destination),
 *                       rewrite.h    the redirect to the offload device's port, then the rewrite,
 *                       flowcache.h  and a flow-cache entry for the next packets
 *   count             counters.h   per interface and reason, per policy
 *
 * Every stage passes with a reason (enum fp_reason, fastpath.h) when unsure. */
#include "parse.h"
#include "fastpath/config.h"
#include "fastpath/counters.h"
#include "fastpath/quickpass.h"
#include "fastpath/policy.h"
#include "fastpath/didx.h"
#include "fastpath/classify.h"
#include "fastpath/checks.h"
#include "fastpath/postsa.h"
#include "fastpath/route.h"
#include "fastpath/rewrite.h"
#include "fastpath/flowcache.h"
#include "fastpath/forward.h"
#include "fastpath/cached.h"

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
	count(cfg, &d, len);
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
