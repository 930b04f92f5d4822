// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* sluice XDP fast path, rewrite and redirect: VLAN tag, MACs and TTL of a forwarded frame, and the redirect.
 *
 * A stage of bpf/fastpath.c, which includes the stages once each, in the order its outline
 * gives: each reads what the ones before it define. Not a header to include elsewhere. */

static __always_inline void ip_decrease_ttl(struct iphdr *iph)
{
	__u32 check = (__u32)iph->check;
	check += (__u32)bpf_htons(0x0100);
	iph->check = (__sum16)(check + (check >= 0xFFFF));
	iph->ttl--;
}

/* rewrite applies the L2/L3 changes of a forward: VLAN tag to match the
 * egress, MACs (unless the NIC writes them), TTL/hop limit. */
static __always_inline int rewrite(struct xdp_md *ctx, struct pkt *p, __u16 egress_vid,
				   int write_macs, const __u8 *dmac, const __u8 *smac)
{
	void *data, *data_end;

	if (p->tagged && !egress_vid) {
		/* pop: move the MACs over the tag, then drop 4 bytes */
		data = (void *)(long)ctx->data;
		data_end = (void *)(long)ctx->data_end;
		if (data + 18 > data_end)
			return -1;
		__u8 macs[12];
		__builtin_memcpy(macs, data, 12);
		__builtin_memcpy(data + 4, macs, 12);
		if (bpf_xdp_adjust_head(ctx, 4))
			return -1;
		p->l3_off -= 4;
	} else if (!p->tagged && egress_vid) {
		if (bpf_xdp_adjust_head(ctx, -4))
			return -1;
		data = (void *)(long)ctx->data;
		data_end = (void *)(long)ctx->data_end;
		if (data + 18 > data_end)
			return -1;
		__u8 macs[12];
		__builtin_memcpy(macs, data + 4, 12);
		__builtin_memcpy(data, macs, 12);
		/* bytes 16-17 still hold the original EtherType */
		*(__be16 *)(data + 12) = bpf_htons(ETH_P_8021Q);
		*(__be16 *)(data + 14) = bpf_htons(egress_vid);
		p->l3_off += 4;
	} else if (p->tagged && egress_vid) {
		data = (void *)(long)ctx->data;
		data_end = (void *)(long)ctx->data_end;
		if (data + 18 > data_end)
			return -1;
		*(__be16 *)(data + 14) = bpf_htons(egress_vid);
	}

	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > data_end)
		return -1;
	if (write_macs) {
		__builtin_memcpy(eth->h_dest, dmac, ETH_ALEN);
		__builtin_memcpy(eth->h_source, smac, ETH_ALEN);
	}
	__u32 off = p->l3_off & 0xff;
	if (p->family == FP_FAM_V4) {
		struct iphdr *iph = data + off;
		if ((void *)(iph + 1) > data_end)
			return -1;
		ip_decrease_ttl(iph);
	} else {
		struct ipv6hdr *ip6 = data + off;
		if ((void *)(ip6 + 1) > data_end)
			return -1;
		ip6->hop_limit--;
	}
	return 0;
}

/* The redirect ports, by the number the control plane gave each device
 * (FP_MAX_PORTS; fp_iface.port, fp_flow.port): an array, so a redirect is
 * an index, where a DEVMAP_HASH by ifindex walked a bucket (redirect and
 * rewrite 3-8 ns more a cached forward, measured: docs/benchmarks.md). An
 * emptied number misses: the kernel drops a device's entry when the device
 * goes away, the control plane when it leaves the configuration, and it
 * never hands the number to another device before all the others were used
 * (port_next). */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP);
	__uint(max_entries, FP_MAX_PORTS);
	__type(key, __u32);
	__type(value, __u32);
} tx_ports SEC(".maps");

/* Each redirect port's number, by ifindex, for forward_in, whose egress
 * comes from the FIB or a hairpin next hop (which need not be configured
 * interfaces). Written by the control plane with tx_ports. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, FP_MAX_PORTS);
	__type(key, __u32);   /* ifindex */
	__type(value, __u32); /* port */
} port_of SEC(".maps");

/* aim points the redirect at port, or at the ingress device (tx: XDP_TX),
 * and returns the action to return: XDP_REDIRECT or XDP_TX, or XDP_PASS
 * when the port is empty. Before the frame is rewritten, so that a miss
 * hands the kernel the frame as it came. */
static __always_inline int aim(__u32 port, int tx)
{
	if (tx)
		return XDP_TX;
	return bpf_redirect_map(&tx_ports, port, XDP_PASS);
}
