// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"sluice/internal/kernel"
	"sluice/internal/kernel/xfrm"
)

// ipsecFilter holds the flags of show ipsec sa and policy and, after
// parse, their values.
type ipsecFilter struct {
	addr, spi, dev, dir string
	keys, json          bool
	addrP               netip.Prefix
	spiN                uint32
	devIx               int
}

func (f *ipsecFilter) parse() error {
	if f.addr != "" {
		p, err := netip.ParsePrefix(f.addr)
		if err != nil {
			a, aerr := netip.ParseAddr(f.addr)
			if aerr != nil {
				return usageErrorf("--addr: %q is neither an address nor a prefix", f.addr)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		f.addrP = p
	}
	if f.spi != "" {
		n, err := strconv.ParseUint(f.spi, 0, 32)
		if err != nil {
			return usageErrorf("--spi: %q is not a 32-bit number (0x... or decimal)", f.spi)
		}
		f.spiN = uint32(n)
	}
	if f.dev != "" {
		li, err := linkFlag("--dev", f.dev)
		if err != nil {
			return err
		}
		f.devIx = li.Ifindex
	}
	if f.dir != "" && f.dir != "in" && f.dir != "out" && f.dir != "fwd" {
		return usageErrorf("--dir: %q must be in, out or fwd", f.dir)
	}
	return nil
}

// overlaps reports whether a prefix filter touches an address or prefix.
func (f *ipsecFilter) overlaps(p netip.Prefix) bool {
	return !f.addrP.IsValid() || (p.IsValid() && p.Overlaps(f.addrP))
}

// onDev reports whether a --dev filter admits an entry with offload o.
func (f *ipsecFilter) onDev(o *xfrm.Offload) bool {
	return f.devIx == 0 || (o != nil && o.Ifindex == f.devIx)
}

func (f *ipsecFilter) addFlags(cmd *cobra.Command, sa bool) {
	cmd.Flags().StringVar(&f.addr, "addr", "", "only entries whose selector or endpoints overlap this address or prefix")
	cmd.Flags().StringVar(&f.dev, "dev", "", "only entries offloaded to this interface")
	cmd.Flags().BoolVar(&f.json, "json", false, "print JSON")
	if sa {
		cmd.Flags().StringVar(&f.spi, "spi", "", "only the SA with this SPI")
		cmd.Flags().BoolVar(&f.keys, "keys", false, "also print key material (never shown otherwise)")
	} else {
		cmd.Flags().StringVar(&f.dir, "dir", "", "only policies of this direction (in, out, fwd)")
	}
}

func newShowIPsecCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "ipsec",
		Short: "The kernel's IPsec SAs, policies and error counters",
		Long: `Show the kernel's XFRM state as sluice sees it: selectors, SPIs, mode,
offload (none/crypto/packet, device, direction), lifetimes and counters.
Read from the kernel directly: no daemon needed. Keys are printed only with
'sa --keys'.`,
	}
}

func offloadString(o *xfrm.Offload) string {
	if o == nil {
		return "none"
	}
	kind, dir := either(o.Packet(), "packet", "crypto"), either(o.Inbound(), "in", "out")
	name := strconv.Itoa(o.Ifindex)
	if li, err := kernel.LinkByIndex(o.Ifindex); err == nil {
		name = li.Name
	}
	return fmt.Sprintf("%s dev %s dir %s", kind, name, dir)
}

func newShowIPsecSACmd() *cobra.Command {
	var f ipsecFilter
	cmd := &cobra.Command{
		Use:     "sa",
		Short:   "IPsec SAs with offload mode, counters and lifetimes",
		Example: "  sluice show ipsec sa --dev p0\n  sluice show ipsec sa --spi 0x1001 --json",
		Args:    cobra.NoArgs,
		RunE:    func(cmd *cobra.Command, _ []string) error { return runShowIPsecSA(cmd, f) },
	}
	f.addFlags(cmd, true)
	return cmd
}

func runShowIPsecSA(cmd *cobra.Command, f ipsecFilter) error {
	if err := f.parse(); err != nil {
		return err
	}
	all, err := xfrm.StateDetails(f.keys)
	if err != nil {
		return fmt.Errorf("dumping SAs: %w", err)
	}
	var sas []xfrm.StateDetail // null in --json when nothing matches
	for _, s := range all {
		if (f.spiN == 0 || s.SPI == f.spiN) && f.onDev(s.Offload) && (!f.addrP.IsValid() ||
			f.overlaps(netip.PrefixFrom(s.Src, s.Src.BitLen())) || f.overlaps(netip.PrefixFrom(s.Dst, s.Dst.BitLen())) ||
			f.overlaps(s.Sel.Src) || f.overlaps(s.Sel.Dst)) {
			sas = append(sas, s)
		}
	}
	if f.json {
		return writeJSON(cmd.OutOrStdout(), sas)
	}
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SRC\tDST\tSPI\tREQID\tMODE\tALGORITHM\tOFFLOAD\tPACKETS\tBYTES\tFAILED")
	for _, s := range sas {
		fmt.Fprintf(tw, "%s\t%s\t0x%08x\t%d\t%s\t%s\t%s\t%d\t%d\t%d\n", s.Src, s.Dst, s.SPI, s.Reqid,
			s.Mode, s.Algorithm, offloadString(s.Offload), s.Packets, s.Bytes, s.Failed)
		if s.Key != nil {
			fmt.Fprintf(tw, "\tkey %s\n", *s.Key)
		}
	}
	return tw.Flush()
}

func newShowIPsecPolicyCmd() *cobra.Command {
	var f ipsecFilter
	cmd := &cobra.Command{
		Use:     "policy",
		Short:   "IPsec policies with their templates and offload",
		Example: "  sluice show ipsec policy --dir out --addr 48.0.1.0/24",
		Args:    cobra.NoArgs,
		RunE:    func(cmd *cobra.Command, _ []string) error { return runShowIPsecPolicy(cmd, f) },
	}
	f.addFlags(cmd, false)
	return cmd
}

func runShowIPsecPolicy(cmd *cobra.Command, f ipsecFilter) error {
	if err := f.parse(); err != nil {
		return err
	}
	all, err := xfrm.DumpPolicies()
	if err != nil {
		return fmt.Errorf("dumping policies: %w", err)
	}
	var ps []xfrm.Policy
	for _, p := range all {
		if (f.dir == "" || p.Dir.String() == f.dir) && f.onDev(p.Offload) && (f.overlaps(p.Sel.Src) || f.overlaps(p.Sel.Dst)) {
			ps = append(ps, p)
		}
	}
	sort.SliceStable(ps, func(a, b int) bool { return ps[a].Priority < ps[b].Priority })
	if f.json {
		return writeJSON(cmd.OutOrStdout(), ps)
	}
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INDEX\tDIR\tPRIO\tACTION\tSELECTOR\tTEMPLATE\tOFFLOAD")
	for _, p := range ps {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\t%s\n", p.Index, p.Dir, p.Priority,
			p.Action, p.Sel, tmplString(p.Tmpls), offloadString(p.Offload))
	}
	return tw.Flush()
}

func tmplString(ts []xfrm.Tmpl) string {
	var parts []string
	for _, t := range ts {
		s := t.Mode.String()
		if t.Dst.IsValid() {
			s += fmt.Sprintf(" %s->%s", t.Src, t.Dst)
		}
		s += fmt.Sprintf(" reqid %d", t.Reqid)
		if t.Optional {
			s += " (optional)"
		}
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, "; ")
}

func newShowIPsecStatsCmd() *cobra.Command {
	var f showIPsecStatsFlags
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "The kernel's XFRM error counters and the NICs' IPsec counters",
		Long: `Print the kernel's XFRM counters (/proc/net/xfrm_stat) and every interface's
driver counters whose name mentions ipsec (ethtool -S: mlx5's ipsec_rx_pkts,
ipsec_tx_drop..., ixgbe's rx_ipsec/tx_ipsec). Non-zero XFRM errors come first:
they say why IPsec traffic is dropped (no state, template mismatch, policy
block, integrity failures...); rising NIC counters show the crypto really runs
on the NIC.`,
		Example: "  sluice show ipsec stats\n  sluice show ipsec stats --dev p0 --json",
		Args:    cobra.NoArgs,
		RunE:    func(cmd *cobra.Command, _ []string) error { return runShowIPsecStats(cmd, f) },
	}
	cmd.Flags().BoolVar(&f.asJSON, "json", false, "print JSON")
	cmd.Flags().StringVar(&f.dev, "dev", "", "only this interface's NIC counters")
	return cmd
}

type showIPsecStatsFlags struct {
	asJSON bool
	dev    string
}

// ipsecStatsResult is show ipsec stats --json: the kernel's XFRM counters
// and each device's IPsec counters.
type ipsecStatsResult struct {
	XFRM    map[string]uint64            `json:"xfrm"`
	Devices map[string]map[string]uint64 `json:"devices"`
}

func runShowIPsecStats(cmd *cobra.Command, f showIPsecStatsFlags) error {
	st, err := xfrm.Stats()
	if err != nil {
		return fmt.Errorf("reading /proc/net/xfrm_stat (is XFRM built into this kernel?): %w", err)
	}
	nics, err := kernel.IPsecCounters(f.dev)
	if err != nil && f.dev != "" {
		return fmt.Errorf("--dev %w", err)
	}
	if err != nil {
		return err
	}
	if f.asJSON {
		return writeJSON(cmd.OutOrStdout(), ipsecStatsResult{st, nics})
	}
	// Non-zero counters first, each group by name.
	names := slices.SortedFunc(maps.Keys(st), func(a, b string) int {
		return cmp.Or(cmp.Compare(min(st[b], 1), min(st[a], 1)), strings.Compare(a, b))
	})
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	for _, n := range names {
		fmt.Fprintf(tw, "%s\t%d\n", n, st[n])
	}
	for _, d := range slices.Sorted(maps.Keys(nics)) {
		for _, c := range slices.Sorted(maps.Keys(nics[d])) {
			fmt.Fprintf(tw, "%s %s\t%d\n", d, c, nics[d][c])
		}
	}
	if len(nics) == 0 {
		fmt.Fprintln(tw, "(no interface reports IPsec counters)")
	}
	return tw.Flush()
}
