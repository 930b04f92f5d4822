// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* parse_packet alone, for tests: the fuzz test (FuzzParsePacket) runs it
 * with BPF_PROG_RUN on random frames and compares what it parsed with a Go
 * model of the kernel's parsing. Never attached. */
#include "parse.h"

struct parse_result {
	struct pkt p;
	__s32 reason;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct parse_result);
} parse_out SEC(".maps");

SEC("xdp")
int xdp_parse_probe(struct xdp_md *ctx)
{
	__u32 zero = 0;
	struct parse_result r = {};
	r.reason = parse_packet(ctx, &r.p);
	bpf_map_update_elem(&parse_out, &zero, &r, BPF_ANY);
	return XDP_PASS;
}

const struct parse_result *_parse_result __attribute__((unused));

/* Dual BSD/GPL: GPL-compatible for the kernel's GPL-only helpers (bpf_fib_lookup), BSD so
 * the object can be embedded in the Apache-2.0 binary (README, License). */
char LICENSE[] SEC("license") = "Dual BSD/GPL";
