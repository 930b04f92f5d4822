// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* sluice traffic sink: counts the generator's frames (bpf/gen.c) in XDP and
 * drops them. Everything else (ARP, the kernel's own traffic) passes.
 *
 * Per stream it counts packets, bytes, late (reordered) packets, stamps that
 * went back in time, and a latency histogram. The highest sequence number
 * seen is kept in a shared array so that the loss of a run is exact:
 * lost = sent - received, and gaps below the highest sequence are the lost
 * packets the sink has already noticed. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define SINK_MAX_STREAMS 256 /* GEN_MAX_CPUS * GEN_MAX_ENTRIES */
#define GEN_MAGIC 0x51ce

/* Latency histogram: 0-15 ns one bucket each, then 16 buckets per octave
 * (about 4.4% wide) up to 2^40 ns. */
#define SINK_HIST_SUB 16
#define SINK_HIST_BUCKETS 592

/* A copy of bpf/gen.c's stamp: keep the two in step. */
struct gen_stamp {
	__be16 magic;
	__u16 stream;
	__u32 seq;
	__u64 ts_ns;
} __attribute__((packed));

struct sink_stats {
	__u64 packets;
	__u64 bytes; /* frame bytes without FCS */
	__u64 late;  /* arrived after a higher sequence number */
	__u64 ts_backwards; /* in sequence, but stamped earlier than the previous */
	__u64 lat_sum_ns;
	__u64 lat_max_ns;
	__u64 lat_min_ns; /* 0 = none yet */
	__u64 hist[SINK_HIST_BUCKETS];
};

struct sink_seq {
	__u64 next;    /* highest sequence seen + 1 */
	__u64 last_ts; /* stamp of that packet */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SINK_MAX_STREAMS);
	__type(key, __u32);
	__type(value, struct sink_stats);
} sink_stat SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SINK_MAX_STREAMS);
	__type(key, __u32);
	__type(value, struct sink_seq);
} sink_seqs SEC(".maps");

/* [0] frames that were not the generator's, [1] stamps with a bad stream id. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} sink_other SEC(".maps");

static __always_inline __u32 hist_bucket(__u64 v)
{
	if (v < SINK_HIST_SUB)
		return v;
	/* k = floor(log2(v)), by binary search */
	__u32 k = 0;
	__u64 x = v;
	if (x >> 32) { x >>= 32; k += 32; }
	if (x >> 16) { x >>= 16; k += 16; }
	if (x >> 8) { x >>= 8; k += 8; }
	if (x >> 4) { x >>= 4; k += 4; }
	if (x >> 2) { x >>= 2; k += 2; }
	if (x >> 1) { k += 1; }
	if (k >= 40)
		return SINK_HIST_BUCKETS - 1;
	__u32 sub = (v >> (k - 4)) & (SINK_HIST_SUB - 1);
	return (k - 3) * SINK_HIST_SUB + sub;
}

static __always_inline int other(__u32 k)
{
	__u64 *c = bpf_map_lookup_elem(&sink_other, &k);
	if (c)
		(*c)++;
	return XDP_PASS;
}

SEC("xdp")
int xdp_sink(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *iph = (void *)(eth + 1);
	struct udphdr *udp = (void *)(iph + 1);
	struct gen_stamp *s = (void *)(udp + 1);
	if ((void *)(s + 1) > data_end)
		return other(0);
	if (eth->h_proto != bpf_htons(ETH_P_IP) || iph->ihl != 5 || iph->protocol != IPPROTO_UDP ||
	    s->magic != bpf_htons(GEN_MAGIC))
		return other(0);
	__u64 now = bpf_ktime_get_ns();
	__u32 stream = s->stream;
	if (stream >= SINK_MAX_STREAMS) {
		other(1);
		return XDP_DROP;
	}
	struct sink_stats *st = bpf_map_lookup_elem(&sink_stat, &stream);
	struct sink_seq *sq = bpf_map_lookup_elem(&sink_seqs, &stream);
	if (!st || !sq) {
		other(1);
		return XDP_DROP;
	}
	__u64 seq = s->seq, ts = s->ts_ns;
	st->packets++;
	st->bytes += data_end - data;
	if (seq + 1 > sq->next) {
		if (ts < sq->last_ts)
			st->ts_backwards++;
		/* One NAPI context per receive queue: with the lab's
		 * single-queue veths a stream is never updated from two CPUs
		 * at once. */
		sq->next = seq + 1;
		sq->last_ts = ts;
	} else {
		st->late++;
	}
	__u64 lat = now > ts ? now - ts : 0;
	st->lat_sum_ns += lat;
	if (lat > st->lat_max_ns)
		st->lat_max_ns = lat;
	if (st->lat_min_ns == 0 || lat < st->lat_min_ns)
		st->lat_min_ns = lat ? lat : 1;
	__u32 b = hist_bucket(lat);
	if (b < SINK_HIST_BUCKETS)
		st->hist[b]++;
	return XDP_DROP;
}

/* Dual BSD/GPL: GPL-compatible for the kernel's GPL-only helpers (bpf_fib_lookup), BSD so
 * the object can be embedded in the Apache-2.0 binary (README, License). */
char LICENSE[] SEC("license") = "Dual BSD/GPL";
