package cli

import (
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"sluice/internal/api"
	"sluice/internal/config"
	"sluice/internal/fastpath"
	"sluice/internal/gateway"
	"sluice/internal/kernel"
)

// explainFlags are the flags of sluice gateway explain.
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
		li, err := kernel.Link(a.iface)
		if err != nil {
			return fmt.Errorf("--iface: %w", err)
		}
		ingress, ingressMAC = li.Ifindex, li.MAC
	}
	frame, err := explainFrame(a.hexFrame, args, ingressMAC)
	if err != nil {
		return err
	}
	dp, policies, err := explainDatapath(a)
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
				Selector: p.Sel.String(), Action: [...]string{"allow", "block"}[p.Action&1]}
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
			fmt.Fprintf(w, " checksum %s", map[bool]string{true: "ok", false: "BAD"}[*o.ChecksumOK])
		}
		fmt.Fprintln(w)
	}
	return nil
}

// explainDatapath loads the program over the running gateway's pinned maps,
// or over tables built from a static config.
func explainDatapath(a explainFlags) (*fastpath.Datapath, []kernel.Policy, error) {
	if a.cfgPath != "" {
		g, err := config.LoadGateway(a.cfgPath)
		if err != nil {
			return nil, nil, err
		}
		if g.PolicySource != config.PolicySourceStatic {
			return nil, nil, fmt.Errorf("%s: explain -f needs policy-source: static; for kernel policies run 'sluice gateway run' and omit -f", a.cfgPath)
		}
		opts, err := gateway.FromConfig(g, buildInfo())
		if err != nil {
			return nil, nil, err
		}
		snap, _ := opts.Source.Dump()
		ifs, err := gateway.ResolveIfaces(opts.Ifaces)
		if err != nil {
			return nil, nil, err
		}
		dp, err := fastpath.Load(fastpath.LoadOptions{})
		if err != nil {
			return nil, nil, err
		}
		fastpath.FillRouteMTU(&snap, nil) // the SAs' MTUs, from this host's routes
		tables, err := fastpath.Compile(snap)
		if err == nil {
			err = dp.SetIfaces(ifs)
		}
		if err == nil {
			err = dp.Apply(tables)
		}
		if err != nil {
			dp.Close()
			return nil, nil, err
		}
		return dp, snap.Policies, nil
	}
	if _, err := os.Stat(filepath.Join(a.pinDir, "config")); errors.Is(err, os.ErrPermission) {
		// The pin dir is the daemon's own (0700): say what is missing.
		if perr := fastpath.CheckPrivileges(); perr != nil {
			return nil, nil, fmt.Errorf("reading the running gateway's maps in %s: %w", a.pinDir, perr)
		}
		return nil, nil, err
	} else if err != nil {
		return nil, nil, fmt.Errorf("%w (no pinned maps in %s): start 'sluice gateway run', or pass -f with a gateway.yaml of static policies", errNoGateway, a.pinDir)
	}
	dp, err := fastpath.Load(fastpath.LoadOptions{PinPath: a.pinDir, AdoptOnly: true})
	if err != nil {
		return nil, nil, err
	}
	snap, err := fastpath.KernelSource{X: &kernel.XFRM{}}.Dump()
	if err != nil {
		snap.Policies = nil // explain still works; only the selector text is missing
	}
	return dp, snap.Policies, nil
}

// explainFrame builds the frame from --hex or from field/value pairs. A
// frame built from fields is sent to ingressMAC (the --iface device's MAC)
// unless dmac says otherwise: the program, like the kernel, forwards only
// frames sent to the interface.
func explainFrame(hexFrame string, args []string, ingressMAC net.HardwareAddr) ([]byte, error) {
	if hexFrame != "" {
		if len(args) > 0 {
			return nil, errors.New("give the packet either as fields or with --hex, not both")
		}
		b, err := hex.DecodeString(strings.NewReplacer(" ", "", ":", "").Replace(hexFrame))
		if err != nil {
			return nil, fmt.Errorf("--hex: %w", err)
		}
		if len(b) < 14 {
			return nil, fmt.Errorf("--hex: a frame of %d bytes is shorter than an Ethernet header (14 bytes); give the whole frame, from the destination MAC on", len(b))
		}
		return b, nil
	}
	p, err := parsePacketFields(args)
	if err != nil {
		return nil, err
	}
	if p.DstMAC == nil && len(ingressMAC) == 6 {
		p.DstMAC = ingressMAC
	}
	return p.Marshal()
}

var protoByName = map[string]uint8{"tcp": 6, "udp": 17, "icmp": 1, "icmpv6": 58, "sctp": 132, "udplite": 136, "esp": 50, "ah": 51, "gre": 47}

func parsePacketFields(args []string) (fastpath.Packet, error) {
	p := fastpath.Packet{TTL: 64, Proto: 17, Payload: 18}
	if len(args)%2 != 0 {
		return p, fmt.Errorf("packet fields come in pairs (field value); %q has no value", args[len(args)-1])
	}
	num := func(field, v string, bits int) (uint64, error) {
		n, err := strconv.ParseUint(v, 0, bits)
		if err != nil {
			return 0, fmt.Errorf("%s: %q is not a number of %d bits", field, v, bits)
		}
		return n, nil
	}
	seen := map[string]bool{}
	for i := 0; i < len(args); i += 2 {
		f, v := args[i], args[i+1]
		key := f
		if f == "hoplimit" {
			key = "ttl" // one field, two names
		}
		if seen[key] {
			return p, fmt.Errorf("packet field %q given twice; give each field once", f)
		}
		seen[key] = true
		var err error
		var n uint64
		switch f {
		case "src", "dst":
			a, perr := netip.ParseAddr(v)
			if perr != nil {
				return p, fmt.Errorf("%s: %q is not an IP address", f, v)
			}
			if f == "src" {
				p.Src = a
			} else {
				p.Dst = a
			}
		case "proto":
			if pn, ok := protoByName[v]; ok {
				p.Proto = pn
			} else if n, err = num(f, v, 8); err == nil {
				p.Proto = uint8(n)
			}
		case "sport":
			n, err = num(f, v, 16)
			p.SPort = uint16(n)
		case "dport":
			n, err = num(f, v, 16)
			p.DPort = uint16(n)
		case "type":
			n, err = num(f, v, 8)
			p.ICMPType = uint8(n)
		case "code":
			n, err = num(f, v, 8)
			p.ICMPCode = uint8(n)
		case "ttl", "hoplimit":
			n, err = num(f, v, 8)
			p.TTL = uint8(n)
		case "vlan":
			n, err = num(f, v, 12)
			p.VLAN = uint16(n)
		case "len":
			n, err = num(f, v, 14)
			p.Payload = int(n)
		case "dmac", "smac":
			mac, merr := net.ParseMAC(v)
			if merr != nil {
				return p, fmt.Errorf("%s: %w", f, merr)
			}
			if f == "dmac" {
				p.DstMAC = mac
			} else {
				p.SrcMAC = mac
			}
		default:
			return p, fmt.Errorf("unknown packet field %q (fields: src dst proto sport dport type code ttl vlan len dmac smac)", f)
		}
		if err != nil {
			return p, err
		}
	}
	if !p.Src.IsValid() || !p.Dst.IsValid() {
		return p, errors.New("a packet needs at least src and dst")
	}
	return p, nil
}
