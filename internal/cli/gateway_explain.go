// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"sluice/internal/api"
	"sluice/internal/config"
	"sluice/internal/fastpath"
	"sluice/internal/gateway"
	"sluice/internal/kernel"
	"sluice/internal/kernel/xfrm"
)

type explainFlags struct {
	cfgPath, iface, hexFrame, pinDir, socket string
	asJSON                                   bool
}

type explainResult struct {
	*fastpath.Decision
	Ingress string                 `json:"ingress,omitempty"`
	Egress  string                 `json:"egress,omitempty"`
	Policy  *explainPolicy         `json:"policy,omitempty"`
	Out     *fastpath.FrameSummary `json:"output_frame,omitempty"`
	// Tier is which tier serves the deciding policy's traffic, from the
	// running daemon (docs/flower.md): "flower (...)" or "xdp — why".
	Tier string `json:"tier,omitempty"`
	// KernelKeeps says why the deciding policy's traffic stays with the
	// kernel whatever its offload: an SA the fast path cannot honour
	// (fastpath.ForwardRefusal: IP-TFS, per-CPU SAs, SA direction).
	KernelKeeps string `json:"kernel_keeps,omitempty"`
}

type explainPolicy struct {
	Index    uint32 `json:"index"`
	Dir      string `json:"dir"`
	Priority uint32 `json:"priority"`
	Selector string `json:"selector"`
	Action   string `json:"action"`
}

func runExplain(cmd *cobra.Command, a explainFlags, args []string) error {
	ingress := 0
	var ingressMAC net.HardwareAddr
	if a.iface != "" {
		li, err := linkFlag("--iface", a.iface)
		if err != nil {
			return err
		}
		ingress, ingressMAC = li.Ifindex, li.MAC
	}
	frame, err := fastpath.ExplainFrame(a.hexFrame, args, ingressMAC)
	if err != nil {
		return err
	}
	dp, policies, states, err := explainDatapath(a)
	if err != nil {
		return err
	}
	defer dp.Close()
	dec, err := dp.Explain(frame, ingress)
	if err != nil {
		return err
	}
	res := explainResult{Decision: dec, Ingress: a.iface}
	if dec.Action == fastpath.XDPRedirect || dec.Action == fastpath.XDPTx {
		if li, err := kernel.LinkByIndex(int(dec.EgressIfindex)); err == nil {
			res.Egress = li.Name
		}
		if s, err := fastpath.Summarize(dec.Output); err == nil {
			res.Out = &s
		}
	}
	for _, p := range policies {
		if dec.PolicyIndex != 0 && p.Index == dec.PolicyIndex {
			res.Policy = &explainPolicy{Index: p.Index, Dir: p.Dir.String(), Priority: p.Priority,
				Selector: p.Sel.String(), Action: p.Action.String()}
			if p.Action == xfrm.ActionAllow {
				res.KernelKeeps = fastpath.ForwardRefusal(&p, states)
			}
		}
	}
	if a.cfgPath == "" && dec.PolicyIndex != 0 {
		// Best effort: a daemon with the flower tier says which tier
		// serves this policy; without one, XDP (or the kernel) does.
		if st, err := api.NewClient(a.socket).Gateway(); err == nil && st.Flower != nil {
			res.Tier = policyTier(st.Flower, dec.PolicyIndex)
		}
	}
	dec.Output = nil
	if a.asJSON {
		return writeJSON(cmd.OutOrStdout(), res)
	}
	w := cmd.OutOrStdout()
	fmt.Fprintf(w, "verdict: %s (%s)\n", dec.ActionName, dec.ReasonName)
	if res.Tier != "" {
		fmt.Fprintf(w, "tier:    %s\n", res.Tier)
	}
	if res.Egress != "" {
		fmt.Fprintf(w, "egress:  %s\n", res.Egress)
	}
	if res.Policy != nil {
		fmt.Fprintf(w, "policy:  index %d dir %s priority %d action %s: %s\n", res.Policy.Index, res.Policy.Dir,
			res.Policy.Priority, res.Policy.Action, res.Policy.Selector)
	} else if dec.PolicyIndex != 0 {
		fmt.Fprintf(w, "policy:  index %d dir %s priority %d\n", dec.PolicyIndex, dec.Dir, dec.PolicyPriority)
	}
	if res.KernelKeeps != "" {
		fmt.Fprintf(w, "kernel:  keeps this policy's traffic: %s\n", res.KernelKeeps)
	}
	if len(dec.MatchedDirs) > 0 {
		fmt.Fprintf(w, "matched: %s\n", strings.Join(dec.MatchedDirs, ", "))
	}
	if o := res.Out; o != nil {
		fmt.Fprintf(w, "output:  dst %s src %s", o.DstMAC, o.SrcMAC)
		if o.VLAN != 0 {
			fmt.Fprintf(w, " vlan %d", o.VLAN)
		}
		fmt.Fprintf(w, " %s -> %s ttl %d", o.Src, o.Dst, o.TTL)
		if o.ChecksumOK != nil {
			fmt.Fprintf(w, " checksum %s", either(*o.ChecksumOK, "ok", "BAD"))
		}
		fmt.Fprintln(w)
	}
	return nil
}

// explainDatapath loads the program over the running gateway's pinned maps,
// or over tables built from a static config, with the policies and SAs
// (kernel only) behind them.
func explainDatapath(a explainFlags) (*fastpath.Datapath, []xfrm.Policy, []xfrm.State, error) {
	if a.cfgPath != "" {
		g, err := config.LoadGateway(a.cfgPath)
		if err != nil {
			return nil, nil, nil, err
		}
		if g.PolicySource != config.PolicySourceStatic {
			return nil, nil, nil, fmt.Errorf("%s: explain -f needs policy-source: static; for kernel policies run 'sluice gateway run' and omit -f", a.cfgPath)
		}
		dp, policies, err := gateway.StaticDatapath(g, buildInfo())
		return dp, policies, nil, err
	}
	if _, err := os.Stat(filepath.Join(a.pinDir, "config")); errors.Is(err, os.ErrPermission) {
		// The pin dir is the daemon's own (0700): say what is missing.
		if perr := fastpath.CheckPrivileges(); perr != nil {
			return nil, nil, nil, fmt.Errorf("reading the running gateway's maps in %s: %w", a.pinDir, perr)
		}
		return nil, nil, nil, err
	} else if err != nil {
		return nil, nil, nil, fmt.Errorf("no gateway is running here (no pinned maps in %s): start 'sluice gateway run', or pass -f with a gateway.yaml of static policies", a.pinDir)
	}
	dp, err := fastpath.Load(fastpath.LoadOptions{PinPath: a.pinDir, AdoptOnly: true})
	if err != nil {
		return nil, nil, nil, err
	}
	snap, err := fastpath.KernelSource{X: &xfrm.Handle{}}.Dump()
	if err != nil {
		snap = fastpath.Snapshot{} // explain still works; only the selector text is missing
	}
	return dp, snap.Policies, snap.States, nil
}
