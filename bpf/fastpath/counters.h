// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* sluice XDP fast path, the counters: per interface counter slot and reason, per policy counter slot.
 *
 * A stage of bpf/fastpath.c, which includes the stages once each, in the order its outline
 * gives: each reads what the ones before it define. Not a header to include elsewhere. */

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FP_MAX_IFACE_SLOTS * FP_R_MAX); /* [slot][reason] */
	__type(key, __u32);
	__type(value, __u64);
} reason_counts SEC(".maps");

/* Per-policy counters, by counter slot (struct fp_policy's cslot): a
 * per-CPU array, whose lookup the verifier inlines, where a per-CPU hash
 * keyed by the kernel's policy index cost ~30-40 ns a counted packet. The
 * control plane assigns the slots (counterslots.go), keeps a policy's slot
 * across generations, zeroes a slot before it gives it to another policy,
 * and records each slot's owner in policy_slots, which the readers and a
 * restarted daemon go by. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FP_MAX_COUNTER_SLOTS);
	__type(key, __u32); /* counter slot */
	__type(value, struct fp_counter);
} policy_counts SEC(".maps");

/* The kernel policy index that owns each counter slot (0: free). Written
 * by the control plane only; the program never reads it. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FP_MAX_COUNTER_SLOTS);
	__type(key, __u32); /* counter slot */
	__type(value, __u32);
} policy_slots SEC(".maps");

/* count counts decision d of a packet of len bytes: against its interface's
 * slot and reason, and against its policy's slot when per-policy counters
 * are on. */
static __always_inline void count(struct fp_config *cfg, struct fp_decision *d, __u64 len)
{
	/* a mask and a compare, not '%': the BPF backend emits a division */
	__u32 reason = (d->slot & (FP_MAX_IFACE_SLOTS - 1)) * FP_R_MAX +
		       (d->reason < FP_R_MAX ? d->reason : FP_R_NOT_READY);
	__u64 *rc = bpf_map_lookup_elem(&reason_counts, &reason);
	if (rc)
		(*rc)++;
	if (d->cslot && cfg && cfg->counters) {
		struct fp_counter *c = bpf_map_lookup_elem(&policy_counts, &d->cslot);
		if (c) {
			c->packets++;
			c->bytes += len;
		}
	}
}
