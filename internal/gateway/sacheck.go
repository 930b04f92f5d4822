// SPDX-License-Identifier: Apache-2.0

package gateway

import (
	"log/slog"

	"sluice/internal/fastpath"
)

// setSACheck sets the fast path's SA check (docs/fastpath.md, "The
// SA-deletion window"). With kernel policies the mirror withdraws a
// deleted SA from the program as soon as the kernel announces it
// (fastpath.SACheckMirror); strict also has every forward ask the kernel
// (fastpath.SACheckKernel, ~85 ns a forward), where the kernel has the
// kfunc for it. A static policy source has no kernel SAs to follow.
func setSACheck(dp *fastpath.Datapath, kernelSource, strict bool, log *slog.Logger) error {
	mode := fastpath.SACheckOff
	if kernelSource {
		mode = fastpath.SACheckMirror
	}
	if kernelSource && strict {
		ok, err := fastpath.SACheckSupported()
		switch {
		case err != nil:
			log.Warn("strict SA check off: cannot tell whether the kernel has bpf_xdp_get_xfrm_state; the mirror's check stays on", "err", err)
		case !ok:
			log.Warn("strict SA check off: this kernel has no bpf_xdp_get_xfrm_state (Linux 6.8+ with BTF); the mirror's check stays on: use a newer kernel for the strict one")
		default:
			mode = fastpath.SACheckKernel
		}
	}
	return dp.SetSACheck(mode)
}
