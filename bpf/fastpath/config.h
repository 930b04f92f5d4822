// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* sluice XDP fast path, the state every stage reads: the control plane's configuration and lease, the
 * interfaces and VLAN children, the explain twin's output, the per-CPU scratch of a decision,
 * and two compiler fences the verifier needs.
 *
 * A stage of bpf/fastpath.c, which includes the stages once each, in the order its outline
 * gives: each reads what the ones before it define. Not a header to include elsewhere. */

#define AF_INET 2
#define AF_INET6 10

/* Set at load time. The explain instance reports its decision in
 * explain_out and leaves the counters alone. */
volatile const __u32 explain_mode = 0;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct fp_config);
} config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct fp_lease);
} lease SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct fp_decision);
} explain_out SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32); /* ifindex: any value works, unlike a 1024-slot array */
	__type(value, struct fp_iface);
} ifaces SEC(".maps");

/* The interfaces, direct-mapped by ifindex (place ifindex &
 * (FP_IFACE_SLOT_MAP - 1)): an inline array load instead of a ~20 ns hash
 * lookup, for the quick pass's counter slot and for the full decision's
 * ingress and egress interfaces. An ifindex whose place another one holds
 * is found in ifaces; so is an unknown one (not-configured). Two halves,
 * as the policy tuples have two generations: the control plane writes
 * the half config.iface_gen does not name, whole, then flips iface_gen,
 * so that a packet never reads an entry half written. Written with
 * ifaces, after it. */
#define FP_IFACE_SLOT_MAP 256
struct fp_iface_ref {
	__u32 ifindex; /* 0: empty */
	struct fp_iface i;
};
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * FP_IFACE_SLOT_MAP);
	__type(key, __u32);
	__type(value, struct fp_iface_ref);
} iface_slots SEC(".maps");

/* iface_get finds interface ifindex in the current half of iface_slots,
 * else in ifaces; 0: not one of the gateway's. */
static __always_inline struct fp_iface *iface_get(__u32 gen, __u32 ifindex)
{
	__u32 at = (gen & 1) * FP_IFACE_SLOT_MAP + (ifindex & (FP_IFACE_SLOT_MAP - 1));
	struct fp_iface_ref *ref = bpf_map_lookup_elem(&iface_slots, &at);
	if (ref && ref->ifindex == ifindex)
		return &ref->i;
	return bpf_map_lookup_elem(&ifaces, &ifindex);
}

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct fp_vlan_key);
	__type(value, __u32); /* VLAN child ifindex */
} vlans SEC(".maps");

/* Keeps clang from merging two map calls that differ only in the map into
 * one call on either map: the verifier inlines a lookup only where a call
 * site sees a single map, and the merged call cost ~15 ns a packet. */
#define keep_call_apart(v) asm volatile("" : "+r"(v))

/* Marks v as checked against NULL: keeps clang from computing an address
 * inside v before the check, which older verifiers (6.12) reject as
 * arithmetic on a pointer that may be NULL. */
#define after_null_check(v) asm volatile("" : "+r"(v))

/* The configuration a decision was derived from, read once before any
 * table: an entry cached from it is dropped by the first packet that sees
 * a newer generation or epoch, even when the control plane moved on while
 * this packet was being decided. */
struct snap {
	__u32 gen;
	__u32 epoch;
	__u32 fib_dst_only;       /* fib_cache may answer (see fib) */
	__u32 iface_gen;          /* current half of iface_slots */
	__u32 sa_check;           /* config.sa_check (sa_held) */
};

/* Scratch space of the full decision, shared by its forward paths. In a
 * per-CPU map rather than on the stack: the verifier allows 512 bytes for
 * the whole call chain, and the cached stage, inline in the program, takes
 * its share of them. Per CPU is enough: XDP runs in softirq, which does not
 * nest on a CPU, and the explain twin has a map of its own. */
struct scratch {
	struct snap sn;
	struct bpf_fib_lookup fp;
	struct fp_flow nf;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__uint(key_size, sizeof(__u32));
	/* a size, not a type: bpf2go has no Go type for bpf_fib_lookup's unions */
	__uint(value_size, sizeof(struct scratch));
} scratch_space SEC(".maps");

/* usable says whether the packet may be forwarded at all: the control
 * plane is in sync and alive. */
static __always_inline int usable(struct fp_config *cfg, struct fp_decision *d)
{
	if (!cfg || !cfg->ready) {
		d->reason = FP_R_NOT_READY;
		return 0;
	}
	/* A daemon that stopped renewing its lease may have missed an SA
	 * going away: stop forwarding rather than trust stale maps. */
	__u32 zero = 0;
	struct fp_lease *l = bpf_map_lookup_elem(&lease, &zero);
	if (!l || l->expired) {
		d->reason = FP_R_NOT_READY;
		return 0;
	}
	return 1;
}
