// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* A bare XDP forwarder for the lab: every IPv4 frame with TTL > 1 gets its
 * TTL decremented (incremental checksum, RFC 1624), the MAC addresses of the
 * configured next hop, and is redirected through a devmap to the one egress
 * port. No FIB lookup, no policy: the ceiling an XDP forwarder can reach on
 * the machine. Anything else (ARP, TTL 1) goes to the kernel.
 *
 * Two knobs make it a known bottleneck for the benchmark's own tests:
 * drop_every = N drops every Nth frame, and rate_pps > 0 forwards at most
 * that many frames per second (a token bucket) and drops the rest. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

struct redir_config {
	__u8 dst_mac[6];
	__u8 src_mac[6];
	__u32 drop_every; /* 0: never */
	__u64 rate_pps;   /* 0: unlimited */
	__u64 burst;      /* token bucket depth, frames */
};

struct redir_bucket {
	struct bpf_spin_lock lock;
	__u64 tokens;
	__u64 last_ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct redir_config);
} redir_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct redir_bucket);
} redir_tb SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} redir_port SEC(".maps");

/* [0] forwarded, [1] passed to the kernel, [2] dropped by drop_every,
 * [3] dropped by the rate limit, [4] redirect failed */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 5);
	__type(key, __u32);
	__type(value, __u64);
} redir_counts SEC(".maps");

/* Per-CPU frame counter for drop_every. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} redir_nth SEC(".maps");

static __always_inline void count(__u32 k)
{
	__u64 *c = bpf_map_lookup_elem(&redir_counts, &k);
	if (c)
		(*c)++;
}

static __always_inline int rate_ok(struct redir_config *cfg)
{
	__u32 zero = 0;
	struct redir_bucket *b = bpf_map_lookup_elem(&redir_tb, &zero);
	if (!b)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	int ok = 0;
	bpf_spin_lock(&b->lock);
	__u64 add = (now - b->last_ns) * cfg->rate_pps / 1000000000ULL;
	if (add > 0) {
		/* advance last_ns only by the time the added tokens account for */
		b->last_ns += add * 1000000000ULL / cfg->rate_pps;
		b->tokens += add;
		if (b->tokens > cfg->burst)
			b->tokens = cfg->burst;
	}
	if (b->tokens > 0) {
		b->tokens--;
		ok = 1;
	}
	bpf_spin_unlock(&b->lock);
	return ok;
}

SEC("xdp")
int xdp_redirect_fwd(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *iph = (void *)(eth + 1);
	__u32 zero = 0;

	if ((void *)(iph + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP) || iph->ttl <= 1) {
		count(1);
		return XDP_PASS;
	}
	struct redir_config *cfg = bpf_map_lookup_elem(&redir_cfg, &zero);
	if (!cfg) {
		count(1);
		return XDP_PASS;
	}
	if (cfg->drop_every) {
		__u64 *n = bpf_map_lookup_elem(&redir_nth, &zero);
		if (n && ++(*n) % cfg->drop_every == 0) {
			count(2);
			return XDP_DROP;
		}
	}
	if (cfg->rate_pps && !rate_ok(cfg)) {
		count(3);
		return XDP_DROP;
	}

	/* TTL - 1: the checksum's high byte of the TTL/protocol word
	 * changes by +0x0100 (RFC 1624). */
	__u32 check = iph->check;
	check += bpf_htons(0x0100);
	iph->check = (__u16)(check + (check >= 0xFFFF));
	iph->ttl--;

	__builtin_memcpy(eth->h_dest, cfg->dst_mac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, cfg->src_mac, ETH_ALEN);
	int rc = bpf_redirect_map(&redir_port, 0, 0);
	count(rc == XDP_REDIRECT ? 0 : 4);
	return rc;
}

/* Dual BSD/GPL: GPL-compatible for the kernel's GPL-only helpers (bpf_fib_lookup), BSD so
 * the object can be embedded in the Apache-2.0 binary (README, License). */
char LICENSE[] SEC("license") = "Dual BSD/GPL";
