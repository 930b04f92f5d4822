// SPDX-License-Identifier: GPL-2.0
// Placeholder XDP program: proves the clang -> bpf2go -> cilium/ebpf chain.
// It counts frames per EtherType class and passes them all to the kernel.
// Issue 3's fast path (fastpath.c) replaces it.
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

enum placeholder_class {
	CLASS_SHORT = 0, /* shorter than an Ethernet header */
	CLASS_IPV4 = 1,
	CLASS_IPV6 = 2,
	CLASS_OTHER = 3,
	CLASS_MAX,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, CLASS_MAX);
	__type(key, __u32);
	__type(value, __u64);
} class_counts SEC(".maps");

SEC("xdp")
int xdp_placeholder(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	__u32 class = CLASS_OTHER;

	if ((void *)(eth + 1) > data_end)
		class = CLASS_SHORT;
	else if (eth->h_proto == bpf_htons(ETH_P_IP))
		class = CLASS_IPV4;
	else if (eth->h_proto == bpf_htons(ETH_P_IPV6))
		class = CLASS_IPV6;

	__u64 *n = bpf_map_lookup_elem(&class_counts, &class);
	if (n)
		(*n)++;
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
