// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* sluice XDP fast path, the kernel's receive checks a forward must pass as well: the frame is for this host
 * (L2), no martian address, the source checks of fib_validate_source.
 *
 * A stage of bpf/fastpath.c, which includes the stages once each, in the order its outline
 * gives: each reads what the ones before it define. Not a header to include elsewhere. */

/* The gateway's IPv4 addresses (all devices of its namespace): a source
 * among them is a martian to the kernel (fib_validate_source). Written by
 * the control plane with the interface table. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __be32);
	__type(value, __u8);
} own_addrs SEC(".maps");

/* own_nets: one bit per IPv4 /24 that holds one of own_addrs, so that a
 * source outside them (nearly every packet) costs an inline array load
 * instead of a hash lookup that misses (~20 ns of a first packet). A set
 * bit only says "look in own_addrs". The control plane sets a /24's bit
 * before it adds an address of it to own_addrs and clears it only after
 * the last one is gone, so the bits always cover the table. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FP_DST_WORDS);
	__type(key, __u32);
	__type(value, __u64);
} own_nets SEC(".maps");

/* own_source says whether an IPv4 source is one of the gateway's addresses. */
static __always_inline int own_source(__be32 src)
{
	__u32 top = bpf_ntohl(src) >> 8;
	__u32 i = top >> 6;
	__u64 *w = bpf_map_lookup_elem(&own_nets, &i);
	if (w && !((*w >> (top & 63)) & 1))
		return 0;
	return bpf_map_lookup_elem(&own_addrs, &src) != 0;
}

/* mac_eq compares two 2-byte-aligned MACs. */
static __always_inline int mac_eq(const __u8 *a, const __u8 *b)
{
	const __u16 *x = (const __u16 *)a, *y = (const __u16 *)b;
	return !((x[0] ^ y[0]) | (x[1] ^ y[1]) | (x[2] ^ y[2]));
}

/* l2_ours says whether the kernel would take the frame as PACKET_HOST:
 * sent to the ingress device's MAC (eth_type_trans) or, tagged, to its
 * VLAN child's (vlan_do_receive). A device without a MAC (loopback) is
 * not checked. Group addresses were refused by parse_packet. */
static __always_inline int l2_ours(struct fp_iface *phys, struct fp_iface *child, struct pkt *p)
{
	const __u16 *m = (const __u16 *)phys->mac;
	if (!(m[0] | m[1] | m[2]) || mac_eq(p->dmac, phys->mac))
		return 1;
	return child && mac_eq(p->dmac, child->mac);
}

/* v6_martian: unspecified, loopback, multicast, link-local, IPv4-mapped. */
static __always_inline int v6_martian(const __be32 *a)
{
	__u32 w0 = bpf_ntohl(a[0]);
	if ((w0 >> 24) == 0xff || (w0 & 0xffc00000) == 0xfe800000)
		return 1;
	if (w0 || a[1])
		return 0;
	if (a[2] == bpf_htonl(0xffff))
		return 1; /* ::ffff:0:0/96 */
	return !a[2] && (!a[3] || a[3] == bpf_htonl(1));
}

/* martian says whether the kernel refuses to forward the packet for its
 * addresses alone. IPv4 (ip_route_input_slow): source multicast, limited
 * broadcast, 0/8 or loopback; destination 0/8, loopback, multicast or
 * limited broadcast (not forwarded as unicast). IPv6 (ip6_rcv_core,
 * ip6_forward): source unspecified, loopback, multicast, link-local or
 * IPv4-mapped; destination unspecified, loopback, multicast, link-local or
 * IPv4-mapped. The flow-cache key holds both addresses, so only a packet
 * the cache does not answer needs this. */
static __always_inline int martian(struct pkt *p)
{
	if (p->family == FP_FAM_V4) {
		__u32 s = bpf_ntohl(p->src[0]), d = bpf_ntohl(p->dst[0]);
		__u8 sa = s >> 24, da = d >> 24;
		return sa == 0 || sa == 127 || (sa & 0xf0) == 0xe0 || s == 0xffffffff ||
		       da == 0 || da == 127 || (da & 0xf0) == 0xe0 || d == 0xffffffff;
	}
	return v6_martian(p->src) || v6_martian(p->dst);
}

/* source_ok: the IPv4 source checks of fib_validate_source. One of this
 * host's addresses as source is a martian (inet_lookup_ifaddr_rcu). Loose
 * reverse-path filtering (rp_filter 2) wants a unicast route back to the
 * source, through any device: a FIB lookup towards the source that
 * succeeds; anything else (no route, local, blackhole...) the kernel
 * decides. Strict mode (1) also wants that route's device to be the
 * ingress one, with multipath and the device's addresses in play: not
 * mirrored, the kernel decides. Run only before a forward, and cached with
 * the flow (whose key holds the source; the control plane rewrites
 * own_addrs and bumps the route epoch when addresses or routes change). */
static __always_inline int source_ok(struct xdp_md *ctx, struct scratch *w, struct pkt *p,
				     struct fp_iface *in_if, __u32 logical_in, struct fp_decision *d)
{
	if (p->family != FP_FAM_V4)
		return 1;
	if (own_source(p->src[0])) {
		d->reason = FP_R_MARTIAN;
		return 0;
	}
	if (!in_if->rp_filter)
		return 1;
	if (in_if->rp_filter == 2) {
		struct bpf_fib_lookup *fp = &w->fp;
		__builtin_memset(fp, 0, sizeof(*fp));
		fp->family = AF_INET;
		fp->ifindex = logical_in;
		fp->tos = p->tos;
		fp->ipv4_src = p->dst[0];
		fp->ipv4_dst = p->src[0];
		int rc = bpf_fib_lookup(ctx, fp, sizeof(*fp), BPF_FIB_LOOKUP_SKIP_NEIGH);
		if (rc == BPF_FIB_LKUP_RET_SUCCESS || rc == BPF_FIB_LKUP_RET_NO_NEIGH)
			return 1;
	}
	d->reason = FP_R_RP_FILTER;
	return 0;
}
