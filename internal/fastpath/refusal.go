// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"fmt"

	"sluice/internal/kernel/xfrm"
)

// ForwardRefusal says why the fast path leaves p's traffic to the kernel
// because of the SAs its template resolves to (xfrm.State.FastPathRefusal:
// IP-TFS, per-CPU SAs, an SA direction against the policy's), or "" when
// no SA forbids it. packetOffloadDevice applies the same rule; explain
// prints this reason.
func ForwardRefusal(p *xfrm.Policy, states []xfrm.State) string {
	for _, tm := range p.Tmpls {
		if tm.Mode == xfrm.ModeIPTFS {
			return fmt.Sprintf("template to %s is IP-TFS (mode iptfs): not plain ESP tunnel mode", tm.Dst)
		}
		for i := range states {
			if tmplMatches(tm, &states[i]) {
				if why := states[i].FastPathRefusal(p.Dir); why != "" {
					return why
				}
			}
		}
	}
	return ""
}
