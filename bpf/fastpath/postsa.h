// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* sluice XDP fast path, after the SA lookup: is the policy's SA still there (the SA-deletion window), and is the
 * kernel due a packet to stamp the policy's use time.
 *
 * A stage of bpf/fastpath.c, which includes the stages once each, in the order its outline
 * gives: each reads what the ones before it define. Not a header to include elsewhere. */

/* The SA-deletion window. The mirror learns that an SA is gone from
 * XFRM_MSG_DELSA, after the kernel deleted it, and the next generation
 * comes a debounce and a compile later; meanwhile a redirected frame
 * would reach a device that no longer holds the SA, and a driver without
 * a TX miss rule (mlx5 outside switchdev, ipsec_fs.c) sends it in
 * cleartext. So with config.sa_check on, every outbound forward (cached
 * or not) first checks the policy's SAs, here by the policy's counter
 * slot (fp_policy.cslot, which a cached forward also carries):
 * - FP_SA_CHECK_MIRROR: the entry still names one. The mirror clears a
 *   deleted SA's name as soon as the event arrives, before the debounce;
 *   what is left open is the event's way from the kernel to the mirror
 *   and one map write (docs/fastpath.md measures it).
 * - FP_SA_CHECK_KERNEL: the kernel's own SA table holds one, asked with
 *   bpf_xdp_get_xfrm_state (Linux 6.8+, a kfunc: xfrm_state_lookup by
 *   daddr, SPI, proto, mark in the ingress device's namespace). A deleted
 *   SA is unhashed under the state lock (__xfrm_state_delete) before the
 *   driver's xdo_dev_state_delete runs, so a lookup after the delete
 *   misses; left open is only a frame that passed the lookup just before
 *   the delete and reaches the device after it. It costs ~85 ns a
 *   forward (measured; docs/benchmarks.md), so it is not the default.
 * Written by the control plane before it flips the generation; an entry
 * without an SA (family 0) forwards nothing. Weak: without the kfunc the
 * program still loads, and the kernel mode forwards nothing (the daemon
 * turns it on only where the kernel has it). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FP_MAX_COUNTER_SLOTS);
	__type(key, __u32); /* counter slot */
	__type(value, struct fp_sa_ref);
} sa_refs SEC(".maps");

/* Opaque here; a definition, not a forward declaration, because
 * cilium/ebpf's kfunc check wants the same kind as the kernel's BTF. */
struct xfrm_state {
};
extern struct xfrm_state *bpf_xdp_get_xfrm_state(struct xdp_md *ctx, struct fp_sa_opts *opts,
						 __u32 opts__sz) __attribute__((weak)) __ksym;
extern void bpf_xdp_xfrm_state_release(struct xfrm_state *x) __attribute__((weak)) __ksym;

_Static_assert(sizeof(struct fp_sa_opts) == 36, "struct bpf_xfrm_state_opts is 36 bytes");

/* sa_held says whether one of the SAs of the policy with counter slot
 * cslot still exists, as far as mode (enum fp_sa_check) asks: named in
 * sa_refs (the mirror clears a deleted SA's name), and with
 * FP_SA_CHECK_KERNEL also held by the kernel now. The kernel lookup takes
 * a reference, dropped at once: only the answer matters. */
static __always_inline int sa_held(struct xdp_md *ctx, __u32 cslot, __u32 mode)
{
	struct fp_sa_ref *r = bpf_map_lookup_elem(&sa_refs, &cslot);
	if (!r)
		return 0;
	if (mode != FP_SA_CHECK_KERNEL)
		return r->sa[0].family | r->sa[1].family;
	if (!bpf_xdp_get_xfrm_state)
		return 0;
	struct xfrm_state *x = 0;
	if (r->sa[0].family)
		x = bpf_xdp_get_xfrm_state(ctx, &r->sa[0], sizeof(r->sa[0]));
	if (!x && r->sa[1].family)
		x = bpf_xdp_get_xfrm_state(ctx, &r->sa[1], sizeof(r->sa[1]));
	if (!x)
		return 0;
	bpf_xdp_xfrm_state_release(x);
	return 1;
}

/* The route epoch in which each policy last handed the kernel a packet
 * (see use_due). LRU: a policy gone idle ages out; a lost entry costs one
 * more packet through the kernel, never a wrong forward. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 262144);
	__type(key, __u32); /* kernel policy index */
	__type(value, __u32);
} use_stamp SEC(".maps");

/* use_due says whether this forward should go through the kernel instead,
 * once per policy per route epoch (the control plane bumps it every second,
 * which also sends every cached flow back here): the kernel stamps a
 * policy's use time (curlft.use_time, what charon's inactivity, DPD and
 * `swanctl --list-sas` read) only when a packet passes xfrm_lookup (OUT)
 * or its policy check (FWD), and a fast-path forward passes neither. The
 * handed packet is one the kernel forwards as well; two CPUs may both hand
 * one over. */
static __always_inline int use_due(__u32 index)
{
	__u32 zero = 0;
	struct fp_config *cfg = bpf_map_lookup_elem(&config, &zero);
	if (explain_mode || !cfg || !cfg->use_time)
		return 0;
	__u32 epoch = cfg->route_epoch;
	__u32 *seen = bpf_map_lookup_elem(&use_stamp, &index);
	if (seen && *seen == epoch)
		return 0;
	bpf_map_update_elem(&use_stamp, &index, &epoch, BPF_ANY);
	return 1;
}
