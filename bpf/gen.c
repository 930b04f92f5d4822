// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* sluice traffic generator: an XDP program run with BPF_PROG_RUN and
 * BPF_F_TEST_XDP_LIVE_FRAMES. Each run turns one frame of the page pool into
 * the next packet of the profile and sends it (XDP_TX) out of the generator's
 * port.
 *
 * Live frames recycle their pages without re-initialising the data, and a
 * receiver that forwards a frame through the kernel rewrites its Ethernet
 * header in place. So every header byte is written on every frame, from the
 * stream's template, never only the fields that vary.
 *
 * Every frame carries a stamp right after the UDP header (struct gen_stamp,
 * shared with bpf/sink.c): magic, stream id, per-stream sequence number and
 * the send time (bpf_ktime_get_ns, CLOCK_MONOTONIC, which the sink reads on
 * the same host). A stream is one entry of the profile (one frame size) on
 * one generator CPU, so its sequence numbers are written by one CPU only and
 * in order: stream = cpu * GEN_MAX_ENTRIES + entry. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define GEN_MAX_ENTRIES 32
#define GEN_MAX_CPUS 8
#define GEN_SCHED_LEN 4096
#define GEN_MAX_DSTS 65536
#define GEN_MAGIC 0x51ce
#define GEN_HDR_LEN (sizeof(struct ethhdr) + sizeof(struct iphdr) + sizeof(struct udphdr))
#define GEN_MIN_FRAME 60 /* 64 bytes on the wire minus the FCS */

/* Copied by the sink: keep the two in step. */
struct gen_stamp {
	__be16 magic;
	__u16 stream;
	__u32 seq;
	__u64 ts_ns;
} __attribute__((packed));

struct gen_config {
	__u32 nentries;  /* profile entries in use */
	__u32 sched_len; /* slots of sched in use */
	__u32 src_ip;    /* first source address, host order */
	__u32 src_count; /* consecutive source addresses, >= 1 */
	__u32 ndsts;     /* destinations in gen_dsts, >= 1 */
	__u16 sport;     /* first source port */
	__u16 sport_count; /* >= 1 */
	__u16 dport;
	__u16 dport_count; /* >= 1 */
	__u32 per_client; /* 1: source i keeps destination i mod ndsts (see below) */
	__u32 max_len;   /* the input frame's length: every frame is cut from it */
};

struct gen_entry {
	__u32 frame_len; /* bytes on the wire without FCS, >= 60 */
	__u32 pad;
	__u8 hdr[48];    /* Ethernet + IPv4 + UDP template (42 bytes used) */
};

/* The flow fields advance like an odometer: the source address every
 * frame, the destination when the sources wrap, the source port when the
 * destinations wrap, then the destination port; every combination appears,
 * and no frame needs a division. */
struct gen_cpu_state {
	__u32 slot; /* next schedule slot */
	__u32 src;  /* index of the source address */
	__u32 dst;  /* index into gen_dsts */
	__u16 sport;
	__u16 dport;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct gen_config);
} gen_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, GEN_MAX_ENTRIES);
	__type(key, __u32);
	__type(value, struct gen_entry);
} gen_entries SEC(".maps");

/* The profile's weights spread over GEN_SCHED_LEN slots, interleaved. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, GEN_SCHED_LEN);
	__type(key, __u32);
	__type(value, __u32);
} gen_sched SEC(".maps");

/* Destination addresses, host order (e.g. hosts of each tunnel's subnet). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, GEN_MAX_DSTS);
	__type(key, __u32);
	__type(value, __u32);
} gen_dsts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct gen_cpu_state);
} gen_state SEC(".maps");

/* Next sequence number per entry, per CPU: the frames sent so far. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, GEN_MAX_ENTRIES);
	__type(key, __u32);
	__type(value, __u64);
} gen_sent SEC(".maps");

/* Frames the program could not build (bad configuration): must stay 0. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} gen_errors SEC(".maps");

static __always_inline __u16 ip_csum(const struct iphdr *iph)
{
	const __u16 *w = (const __u16 *)iph;
	__u32 sum = 0;
#pragma unroll
	for (int i = 0; i < 10; i++)
		sum += w[i];
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return ~sum & 0xffff;
}

static __always_inline int fail(void)
{
	__u32 k = 0;
	__u64 *e = bpf_map_lookup_elem(&gen_errors, &k);
	if (e)
		(*e)++;
	return XDP_ABORTED;
}

SEC("xdp")
int xdp_gen(struct xdp_md *ctx)
{
	__u32 zero = 0;
	struct gen_config *cfg = bpf_map_lookup_elem(&gen_cfg, &zero);
	struct gen_cpu_state *st = bpf_map_lookup_elem(&gen_state, &zero);
	if (!cfg || !st || cfg->sched_len == 0 || cfg->sched_len > GEN_SCHED_LEN)
		return fail();

	__u32 slot = st->slot;
	if (slot >= cfg->sched_len)
		slot = 0;
	st->slot = slot + 1;
	__u32 *ep = bpf_map_lookup_elem(&gen_sched, &slot);
	if (!ep)
		return fail();
	__u32 entry = *ep;
	struct gen_entry *e = bpf_map_lookup_elem(&gen_entries, &entry);
	__u64 *seqp = bpf_map_lookup_elem(&gen_sent, &entry);
	if (!e || !seqp)
		return fail();

	/* Cut the frame to this entry's size. The context is reset to the
	 * full input length before every run. */
	int delta = (int)e->frame_len - (int)cfg->max_len;
	if (delta < 0 && bpf_xdp_adjust_tail(ctx, delta))
		return fail();

	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	if (data + GEN_HDR_LEN + sizeof(struct gen_stamp) > data_end)
		return fail();

	/* Every header byte, every frame. */
	__builtin_memcpy(data, e->hdr, GEN_HDR_LEN);

	struct iphdr *iph = data + sizeof(struct ethhdr);
	struct udphdr *udp = (void *)(iph + 1);
	__u32 si = st->src, di = st->dst;
	__u16 spi = st->sport, dpi = st->dport;
	if (si >= cfg->src_count)
		si = 0;
	if (di >= cfg->ndsts)
		di = 0;
	if (spi >= cfg->sport_count)
		spi = 0;
	if (dpi >= cfg->dport_count)
		dpi = 0;
	iph->saddr = bpf_htonl(cfg->src_ip + si);
	__u32 *dst = bpf_map_lookup_elem(&gen_dsts, &di);
	if (!dst)
		return fail();
	iph->daddr = bpf_htonl(*dst);
	udp->source = bpf_htons(cfg->sport + spi);
	udp->dest = bpf_htons(cfg->dport + dpi);
	/* Advance the odometer. Per client (seed 002's N clients over T
	 * tunnels), source and destination advance together and restart
	 * together, so source i always talks to destination i mod ndsts:
	 * src_count host pairs in all, not src_count x ndsts. */
	if (cfg->per_client && ++di >= cfg->ndsts)
		di = 0;
	if (++si >= cfg->src_count) {
		si = 0;
		if (cfg->per_client)
			di = 0;
		if (cfg->per_client || ++di >= cfg->ndsts) {
			di = 0;
			if (++spi >= cfg->sport_count) {
				spi = 0;
				dpi++;
			}
		}
	}
	st->src = si;
	st->dst = di;
	st->sport = spi;
	st->dport = dpi;
	iph->check = 0;
	iph->check = ip_csum(iph);

	__u32 cpu = bpf_get_smp_processor_id();
	struct gen_stamp *s = (void *)(udp + 1);
	s->magic = bpf_htons(GEN_MAGIC);
	s->stream = (__u16)(cpu * GEN_MAX_ENTRIES + entry);
	s->seq = (__u32)*seqp;
	s->ts_ns = bpf_ktime_get_ns();
	(*seqp)++;
	return XDP_TX;
}

/* Attached to the generator's port: live frames sent with XDP_TX need a
 * program on the device named by ingress_ifindex. */
SEC("xdp")
int xdp_gen_port(struct xdp_md *ctx)
{
	return XDP_PASS;
}

/* Dual BSD/GPL: GPL-compatible for the kernel's GPL-only helpers (bpf_fib_lookup), BSD so
 * the object can be embedded in the Apache-2.0 binary (README, License). */
char LICENSE[] SEC("license") = "Dual BSD/GPL";
