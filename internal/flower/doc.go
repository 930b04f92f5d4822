// SPDX-License-Identifier: Apache-2.0

// Package flower is the gateway's hardware tier: tc flower rules with
// skip_sw that a packet-offload NIC runs on its own, beside the XDP fast
// path. Rules are derived from the same compiled view of the mirrored
// policies and SAs that the XDP program decides on (fastpath.PolicyViews),
// only where that decision is the same for every packet a rule can match;
// everything else stays with XDP or the kernel. See docs/flower.md.
package flower
