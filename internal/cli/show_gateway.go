// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"sluice/internal/api"
	"sluice/internal/config"
)

func newShowGatewayCmd() *cobra.Command {
	var f showGatewayFlags
	cmd := &cobra.Command{
		Use:   "gateway",
		Short: "The running fast path: interfaces, mirror, verdict and policy counters",
		Long: `Ask the running 'sluice gateway run' (over its API socket) for the state
of the fast path: attached interfaces and modes, mirrored vs kernel policy
counts, hairpin next hops, packets per verdict reason per interface, and the
busiest policies.`,
		Example: "  sluice show gateway\n  sluice show gateway --top 50 --json",
		Args:    cobra.NoArgs,
		RunE:    func(cmd *cobra.Command, _ []string) error { return runShowGateway(cmd, f) },
	}
	cmd.Flags().StringVar(&f.socket, "socket", config.DefaultAPISocket, "the daemon's API socket")
	cmd.Flags().IntVar(&f.top, "top", 10, "how many of the busiest policies to list")
	cmd.Flags().BoolVar(&f.asJSON, "json", false, "print JSON")
	return cmd
}

type showGatewayFlags struct {
	socket string
	top    int
	asJSON bool
}

// showGatewayResult is show gateway --json: the daemon's status and its
// busiest policies, each with the tier that serves it and why, as the
// text's TIER column says.
type showGatewayResult struct {
	*api.GatewayStatus
	TopPolicies []tieredPolicy `json:"top_policies"`
}

type tieredPolicy struct {
	api.PolicyStat
	Tier string `json:"tier"`
}

func runShowGateway(cmd *cobra.Command, f showGatewayFlags) error {
	c := api.NewClient(f.socket)
	s, err := c.Gateway()
	if err != nil {
		return err
	}
	ps, err := c.Policies()
	if err != nil {
		return err
	}
	if len(ps) > f.top {
		ps = ps[:f.top]
	}
	if f.asJSON {
		res := showGatewayResult{GatewayStatus: s, TopPolicies: make([]tieredPolicy, len(ps))}
		for i, p := range ps {
			res.TopPolicies[i] = tieredPolicy{p, policyTier(s.Flower, p.Index)}
		}
		return writeJSON(cmd.OutOrStdout(), res)
	}
	w := cmd.OutOrStdout()
	m := s.Mirror
	fmt.Fprintf(w, "gateway: sluice %s, policy source %s, up %s, pins in %s\n", s.Version, s.PolicySource,
		time.Since(s.Started).Round(time.Second), s.PinDir)
	state := either(m.InSync, "IN SYNC", "CLOSED, "+m.State+" (everything goes to the kernel)")
	fmt.Fprintf(w, "mirror:  %s; %d of %d kernel policies mirrored, %d SAs; shapes v4 %d v6 %d; %d syncs (last %s), %d resyncs\n",
		state, m.MirroredPolicies, m.KernelPolicies, m.KernelStates, m.TuplesIPv4, m.TuplesIPv6, m.Syncs, m.LastSyncDuration, m.Resyncs)
	if m.LastError != "" {
		fmt.Fprintf(w, "error:   %s\n", m.LastError)
	}
	if s.ClosedReason != "" {
		fmt.Fprintf(w, "closed:  %s\n", s.ClosedReason)
	}
	if m.Verified+m.Divergences+m.LeaseLapses > 0 {
		fmt.Fprintf(w, "checks:  %d verifying dumps agreed, %d disagreed; %d lease lapses\n", m.Verified, m.Divergences, m.LeaseLapses)
	}
	if p := s.Pins; !p.OK || p.Repairs > 0 {
		fmt.Fprintf(w, "pins:    ok=%v, pinned again %d times after removal", p.OK, p.Repairs)
		if p.LastError != "" {
			fmt.Fprintf(w, "; %s", p.LastError)
		}
		fmt.Fprintln(w)
	}
	fc := s.FlowCache
	keys := either(fc.KeysL4, "per connection (a policy or the FIB looks at ports)", "per host pair")
	fmt.Fprintf(w, "cache:   %s; %d hits, %d fills, %d bypassed; inbound passes: %d hits, %d fills\n", keys, fc.Hits, fc.Fills, fc.Bypassed, fc.PassHits, fc.PassFills)
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INTERFACE\tIFINDEX\tXDP\tL2\tINBOUND\tNEXT HOP\tFORWARDED\tTO KERNEL\tTOP REASONS")
	for _, i := range s.Interfaces {
		nh := "-"
		if i.NextHop != nil {
			nh = i.NextHop.Addr
			if !i.NextHop.Resolved {
				nh += " (unresolved)"
			}
		}
		inbound := either(i.InboundForward, "forward", "pass")
		fwd := i.Reasons["forward-out"] + i.Reasons["forward-in"]
		var passed uint64
		for r, n := range i.Reasons {
			if r != "forward-out" && r != "forward-in" {
				passed += n
			}
		}
		xdp := i.XDPMode + either(i.Problem != "", " (NOT ATTACHED)", "") // Problem: the kernel has no program of ours there
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", i.Name, i.Ifindex, xdp, i.L2, inbound, nh, fwd, passed, topReasons(i.Reasons, 3))
	}
	tw.Flush()
	if len(ps) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "POLICY\tDIR\tPRIO\tSELECTOR\tPACKETS\tBYTES\tTIER")
		for _, p := range ps {
			fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%d\t%d\t%s\n", p.Index, p.Dir, p.Priority, p.Selector, p.Packets, p.Bytes, policyTier(s.Flower, p.Index))
		}
		tw.Flush()
	}
	printFlower(w, s.Flower)
	return nil
}

// topReasons is the n reasons with the most packets, busiest first.
func topReasons(rs map[string]uint64, n int) string {
	var parts []string
	for _, r := range slices.SortedFunc(maps.Keys(rs), func(a, b string) int { return cmp.Compare(rs[b], rs[a]) }) {
		if rs[r] > 0 && len(parts) < n {
			parts = append(parts, fmt.Sprintf("%s %d", r, rs[r]))
		}
	}
	return strings.Join(parts, ", ")
}

// policyTier says which tier serves a policy's forwarded traffic: the NIC
// (flower), or XDP and the kernel, with the flower tier's reason.
func policyTier(f *api.FlowerStatus, index uint32) string {
	if f == nil {
		return "xdp"
	}
	for _, r := range f.Rules {
		if r.PolicyIndex == index {
			if r.Reason != "" {
				return "flower (" + r.Port + ") — " + r.Reason
			}
			return "flower (" + r.Port + ")"
		}
	}
	for _, sk := range f.Skips {
		if sk.PolicyIndex == index {
			return "xdp — " + sk.Reason
		}
	}
	return "xdp"
}

func printFlower(w io.Writer, f *api.FlowerStatus) {
	if f == nil {
		return
	}
	fmt.Fprintln(w)
	mode := either(f.SkipHW, "LAB: software (skip_hw)", "hardware (skip_sw)")
	fmt.Fprintf(w, "flower:  %s; %d rules installed; %d added, %d removed, %d refused, %d withdrawn on XFRM events; %d promotions, %d demotions\n",
		mode, f.RulesInstalled, f.RulesAdded, f.RulesRemoved, f.RulesRefused, f.RulesWithdrawn, f.Promotions, f.Demotions)
	for _, d := range f.Devices {
		state := "accepts hardware rules"
		if !d.HardwareOK {
			state = "refused: " + d.Message + " (XDP serves its traffic)"
			if d.Busy {
				state += " — mlx5 will not run IPsec packet offload and tc offload on one netdev; see `sluice doctor`"
			}
		}
		fmt.Fprintf(w, "  %s chain %d: %s\n", d.Name, d.Chain, state)
	}
}
