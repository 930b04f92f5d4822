// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"sluice/internal/mtu"
)

func newMTUCmd() *cobra.Command {
	var f mtuFlags
	cmd := &cobra.Command{
		Use:   "mtu",
		Short: "Compute overlay MTUs byte by byte: encapsulation + ESP overhead, 4 KiB page fit, guest MTU",
		Long: `Compute, layer by layer, what an encrypted overlay adds to each packet and the
largest overlay MTU that fits: nothing is guessed.

The stack is, from the wire inwards: outer Ethernet (in the frame, not the
MTU), outer IPv4/IPv6, ESP header (SPI + sequence, 8) and IV, in tunnel mode
the tunnelled VTEP IP header, UDP (8), VXLAN (8) or Geneve (8 + options),
the inner Ethernet header (14, +4 with --inner-vlan), the overlay packet,
then ESP padding (payload + padding + 2-byte trailer to a multiple of 4, or
of the cipher's block), the 2-byte trailer and the ICV.

It prints:
  - the overhead table and its range (the padding varies with the size);
  - the largest overlay MTU for --underlay, with the arithmetic;
  - each --check MTU against the underlay;
  - the "whole frame in one 4 KiB page" variant found by hand in the ConnectX-6 SR-IOV guide
    (representor MTU 4096 - 110 = 3986, route MTU 3992, VXLAN over ESP
    transport): the arithmetic for both, counted two ways: the frame as
    it sits in memory (14-byte Ethernet header + IP packet; NICs strip the
    FCS), and the receive buffer mlx5 sizes for it (IP packet + 22: Ethernet
    14 + VLAN 4 + FCS 4, MLX5E_SW2HW_MTU), and which one fits and why;
  - the guest rule of the VM single-flow guide: a VM's MTU must leave the host room for
    its encapsulation, or every GSO segment the guest sends is too big
    after Geneve + ESP and the host segments in software (up to 5x
    slower); the VM single-flow guide's rule of thumb is "host MTU - 100".

Ciphers: aes-gcm-128 and aes-gcm-256 (rfc4106: IV 8, ICV 16),
chacha20-poly1305 (IV 8, ICV 16), aes-cbc-hmac-sha256 (IV 16, ICV 16,
16-byte blocks: Cilium's 77-byte budget), aes-cbc-hmac-sha1 (ICV 12).`,
		Example: `  # the ConnectX-6 SR-IOV guide: VXLAN over ESP transport, AES-GCM, underlay MTU 9216
  sluice mtu --underlay 9216 --check 9000

  # the VM single-flow guide: Geneve over ESP transport on a 1500-byte host: the guest MTU
  sluice mtu --encap geneve --underlay 1500

  # plain IPsec tunnel mode overhead (54-57 bytes for AES-GCM over IPv4)
  sluice mtu --encap none --esp tunnel
  sluice mtu --encap none --esp tunnel --cipher aes-cbc-hmac-sha256 --ipv6

  sluice mtu --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runMTU(cmd, f) },
	}
	fl := cmd.Flags()
	fl.IntVar(&f.underlay, "underlay", 1500, "underlay MTU (the bond's or port's)")
	fl.StringVar(&f.encap, "encap", "vxlan", "encapsulation: vxlan, geneve or none")
	fl.IntVar(&f.geneveOpts, "geneve-options", 0, "Geneve option bytes per packet (multiple of 4)")
	fl.BoolVar(&f.innerVLAN, "inner-vlan", false, "the encapsulated frame carries an 802.1Q tag")
	fl.StringVar(&f.esp, "esp", "transport", "ESP mode: transport, tunnel or none")
	fl.StringVar(&f.cipher, "cipher", "aes-gcm-128", "ESP cipher: "+strings.Join(mtu.CipherNames(), ", "))
	fl.BoolVar(&f.ipv6, "ipv6", false, "the underlay is IPv6")
	fl.BoolVar(&f.innerIPv6, "inner-ipv6", false, "the overlay packets are IPv6 (matters for --encap none --esp transport)")
	fl.IntVar(&f.vlans, "underlay-vlans", 0, "802.1Q tags on the underlay frame (frame size only)")
	fl.IntSliceVar(&f.checks, "check", nil, "overlay MTU(s) to check against the underlay and the page (repeatable or comma-separated)")
	fl.IntVar(&f.page, "page", mtu.PageSize, "page size for the one-page variant")
	fl.BoolVar(&f.asJSON, "json", false, "print a JSON object")
	return cmd
}

type mtuFlags struct {
	underlay, page, geneveOpts, vlans int
	encap, esp, cipher                string
	ipv6, innerIPv6, innerVLAN        bool
	checks                            []int
	asJSON                            bool
}

func runMTU(cmd *cobra.Command, f mtuFlags) error {
	s := mtu.Stack{Encap: mtu.Encap(f.encap), GeneveOptions: f.geneveOpts, InnerVLAN: f.innerVLAN,
		ESP: mtu.ESPMode(f.esp), OuterIPv6: f.ipv6, InnerIPv6: f.innerIPv6, UnderlayVLANs: f.vlans}
	if s.ESP != mtu.ESPNone {
		c, err := mtu.ParseCipher(f.cipher)
		if err != nil {
			return usageErrorf("--cipher: %w", err)
		}
		s.Cipher = c
	}
	if f.underlay < mtu.MinIPv4MTU || f.underlay > 65535 {
		return usageErrorf("--underlay %d: use an MTU from %d to 65535", f.underlay, mtu.MinIPv4MTU)
	}
	for _, c := range f.checks {
		if c < mtu.MinIPv4MTU || c > 65535 {
			return usageErrorf("--check %d: an MTU is %d to 65535", c, mtu.MinIPv4MTU)
		}
	}
	if f.page < 512 || f.page > 1<<20 {
		return usageErrorf("--page %d: use a size from 512 to 1048576 bytes", f.page)
	}
	r, err := mtu.NewReport(s, f.underlay, f.checks, f.page)
	if err != nil {
		return err
	}
	w := cmd.OutOrStdout()
	return emit(w, f.asJSON, r, func() { printMTUReport(w, r) })
}

func printMTUReport(w io.Writer, r *mtu.Report) {
	fmt.Fprintf(w, "%s\n\n", r.Description)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LAYER\tBYTES\tNOTE")
	fmt.Fprintf(tw, "(outer Ethernet header)\t%d\tin the frame, not in the MTU\n", mtu.EthernetHeader+mtu.VLANTag*r.Stack.UnderlayVLANs)
	for _, l := range r.Layers {
		b := fmt.Sprint(l.Bytes)
		switch {
		case l.Overlay && l.Name == "overlay packet":
			b = "M"
		case l.Overlay && strings.Contains(l.Name, "payload"):
			// transport mode without encapsulation: the overlay packet's
			// own header stays in front of ESP; both are part of M.
			b = "M - hdr"
		case l.Overlay:
			b = "(in M)"
		case l.MaxBytes > 0:
			b = fmt.Sprintf("%d-%d", l.Bytes, l.MaxBytes)
		}
		note := l.Note
		if l.Encrypted {
			note = strings.TrimSpace(note + " (encrypted)")
		}
		if l.Overlay && l.Name == "overlay packet" {
			note = "the overlay MTU"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", l.Name, b, note)
	}
	over := either(r.OverheadMax != r.OverheadMin, fmt.Sprintf("%d-%d", r.OverheadMin, r.OverheadMax), fmt.Sprint(r.OverheadMin))
	fmt.Fprintf(tw, "overhead\t%s\tunderlay IP packet minus overlay packet\n", over)
	tw.Flush()

	fmt.Fprintf(w, "\nUnderlay MTU %d: ", r.UnderlayMTU)
	if r.MaxOverlayMTU == 0 {
		fmt.Fprintf(w, "no overlay MTU fits (the overhead alone is %d bytes)\n", r.OverheadMin)
	} else {
		fmt.Fprintf(w, "largest overlay MTU %d\n  %s\n", r.MaxOverlayMTU, r.MaxArithmetic)
	}
	for _, c := range r.Checks {
		verdict := either(c.Fits, fmt.Sprintf("fits (%d bytes to spare)", r.UnderlayMTU-c.UnderlayLen),
			fmt.Sprintf("does NOT fit (%d bytes over; use %d or less)", c.UnderlayLen-r.UnderlayMTU, r.MaxOverlayMTU))
		fmt.Fprintf(w, "Overlay MTU %d: underlay packet %d bytes: %s\n  %s\n", c.Overlay, c.UnderlayLen, verdict, c.Arithmetic)
	}

	p := r.Page
	fmt.Fprintf(w, "\nOne %d-byte page (the ConnectX-6 SR-IOV guide): frame = %d Ethernet", p.Size, mtu.EthernetHeader)
	if r.Stack.UnderlayVLANs > 0 {
		fmt.Fprintf(w, " + %d VLAN", mtu.VLANTag*r.Stack.UnderlayVLANs)
	}
	fmt.Fprintf(w, " + IP packet (no FCS); mlx5 receive buffer = IP packet + %d (Ethernet 14 + VLAN 4 + FCS 4)\n", mtu.MLX5HardMTU)
	for _, f := range p.Fits {
		fmt.Fprintf(w, "  overlay %d: packet %d, frame %d %s, mlx5 buffer %d %s\n    %s\n", f.Overlay, f.UnderlayLen,
			f.Frame, fitWord(f.Frame, p.Size), f.MLX5Buffer, fitWord(f.MLX5Buffer, p.Size), f.Arithmetic)
	}
	fmt.Fprintf(w, "  largest overlay MTU: %d for the frame, %d for an mlx5 receive buffer\n", p.MaxFrame, p.MaxMLX5)
	fmt.Fprintf(w, "  %s\n", pageVerdict(p))

	g := r.Guest
	fmt.Fprintf(w, "\nGuests (the VM single-flow guide): a VM's MTU must leave the host room for this encapsulation, or\n")
	fmt.Fprintf(w, "its GSO segments exceed the host MTU after encapsulation and the host segments in software.\n")
	if g.MaxGuestMTU == 0 {
		fmt.Fprintf(w, "  host MTU %d leaves no room for a guest\n", g.HostMTU)
		return
	}
	fmt.Fprintf(w, "  host MTU %d: guest MTU <= %d (IPv4 TCP MSS %d). ", g.HostMTU, g.MaxGuestMTU, g.TCPMSS)
	if g.RuleSafe {
		fmt.Fprintf(w, "Seed 001's \"host - %d\" = %d is safe (%d bytes to spare).\n", mtu.GuestHeadroom, g.RuleOfThumb, g.MaxGuestMTU-g.RuleOfThumb)
	} else {
		fmt.Fprintf(w, "Seed 001's \"host - %d\" = %d is NOT enough here (%d bytes too big): use %d.\n", mtu.GuestHeadroom, g.RuleOfThumb, g.RuleOfThumb-g.MaxGuestMTU, g.MaxGuestMTU)
	}
}

func fitWord(n, size int) string {
	return either(n <= size, fmt.Sprintf("fits (%d spare)", size-n), fmt.Sprintf("does NOT fit (%d over)", n-size))
}

// pageVerdict says which of the candidates fits and why, in one sentence.
func pageVerdict(p mtu.Page) string {
	var both, frameOnly, none []string
	for _, f := range p.Fits {
		switch {
		case f.FitsFrame && f.FitsMLX5:
			both = append(both, fmt.Sprint(f.Overlay))
		case f.FitsFrame:
			frameOnly = append(frameOnly, fmt.Sprint(f.Overlay))
		default:
			none = append(none, fmt.Sprint(f.Overlay))
		}
	}
	var parts []string
	if len(both) > 0 {
		parts = append(parts, strings.Join(both, ", ")+" fits the page either way")
	}
	if len(frameOnly) > 0 {
		parts = append(parts, strings.Join(frameOnly, ", ")+" fits the bare frame but not an mlx5 receive buffer, which reserves 22 bytes beyond the IP packet")
	}
	if len(none) > 0 {
		parts = append(parts, strings.Join(none, ", ")+" does not fit at all")
	}
	return "Verdict: " + strings.Join(parts, "; ") + "."
}
