// SPDX-License-Identifier: Apache-2.0

package overlay

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"sluice/internal/config"
	"sluice/internal/fileread"
	"sluice/internal/swan"
)

// Peers keyed by IKE (host.yaml keying: ike): instead of SAs and policies,
// the plan loads one strongSwan connection per peer into charon over VICI
// and initiates it; charon chooses the SPIs, installs the SAs and
// policies, and rekeys them. The same offload rules as manual keying
// apply (bond gate, offload device), and verify reads the SAs charon
// installed from the kernel, like manual ones.

// IKELive is charon's side of the live host.
type IKELive struct {
	// Err is why charon could not be asked (not running, wrong socket).
	Err error
	// Conns are the loaded connections' names.
	Conns []string
	// Children holds the CHILD_SAs per connection name.
	Children map[string][]swan.OverlayChild
}

// ikeTimeout bounds one VICI initiate or terminate (IKE takes ~2.5 s
// under qemu TCG, more on a loaded host; well under a second on hardware).
const ikeTimeout = 20 * time.Second

// readIKE asks charon for what the file's IKE peers need.
func readIKE(h *config.Host) *IKELive {
	il := &IKELive{Children: map[string][]swan.OverlayChild{}}
	c, err := swan.Connect(context.Background(), h.IPsec.IKE.VICI)
	if err != nil {
		il.Err = err
		return il
	}
	defer c.Close()
	if il.Conns, err = c.ConnNames(); err != nil {
		il.Err = err
		return il
	}
	for _, name := range il.Conns {
		if !strings.HasPrefix(name, connPrefix(h, "")) {
			continue
		}
		if il.Children[name], err = c.OverlayChildren(name); err != nil {
			il.Err = err
			return il
		}
	}
	return il
}

// connPrefix starts the names of the connections of overlay h and peer.
func connPrefix(h *config.Host, peer string) string {
	if peer == "" {
		return "sluice-" + h.Name + "-"
	}
	return "sluice-" + h.Name + "-" + peer + "-"
}

// ikeConn builds the strongSwan connection of one peer. Its name ends with
// a digest of its settings, so a changed file is a different connection
// (list-conns does not show every setting, e.g. hw_offload).
func ikeConn(h *config.Host, pr *config.Peer, offload string) (*swan.OverlayConn, error) {
	k := h.IPsec.IKE
	o := &swan.OverlayConn{
		LocalAddr: pr.Local.String(), RemoteAddr: pr.Remote.String(),
		LocalID: pr.LocalID, RemoteID: pr.RemoteID, Auth: k.Auth(), Mode: pr.Mode,
		ESP: swan.ESPProposal(pr.KeyBits, pr.ESN), HWOffload: swan.HWOffloadFor(offload), ReplayWindow: pr.ReplayWindow,
		RekeyTime: k.RekeyTime, LifeTime: k.LifeTime, RandTime: k.RandTime, RekeyBytes: k.RekeyBytes, RekeyPackets: k.RekeyPackets,
		Priority: pr.Priority,
	}
	if o.LocalID == "" {
		o.LocalID = pr.Local.String()
	}
	if o.RemoteID == "" {
		o.RemoteID = pr.Remote.String()
	}
	if pr.Mode == config.ModeTunnel && len(pr.Selectors) > 0 {
		for _, s := range pr.Selectors {
			o.LocalTS = append(o.LocalTS, s.Local.String())
			o.RemoteTS = append(o.RemoteTS, s.Remote.String())
		}
	} else {
		o.LocalTS = []string{hostPrefix(pr.Local).String()}
		o.RemoteTS = []string{hostPrefix(pr.Remote).String()}
	}
	if o.Auth == "pubkey" {
		var err error
		o.CACertFile, o.CertFile = h.IKEPath(k.CA), h.IKEPath(k.Cert)
		if o.CACert, err = fileread.Read(o.CACertFile, fileread.KeyLimit); err != nil {
			return nil, fmt.Errorf("ipsec.ike.ca: %w", err)
		}
		if o.Cert, err = fileread.Read(o.CertFile, fileread.KeyLimit); err != nil {
			return nil, fmt.Errorf("ipsec.ike.cert: %w", err)
		}
	}
	var text bytes.Buffer
	o.WriteSwanctl(&text, "")
	text.Write(o.CACert)
	text.Write(o.Cert)
	sum := sha256.Sum256(text.Bytes())
	o.Name = connPrefix(h, pr.Name) + hex.EncodeToString(sum[:4])
	return o, nil
}

// ikeSecretFile is the file holding this host's secret: the PSK file or
// the private key.
func ikeSecretFile(h *config.Host) string {
	k := h.IPsec.IKE
	if k.Auth() == "psk" {
		return h.IKEPath(k.PSK)
	}
	return h.IKEPath(k.PrivateKey)
}

// loadIKESecret reads the secret, refusing a file others can read.
func loadIKESecret(h *config.Host) (swan.OverlaySecret, error) {
	path := ikeSecretFile(h)
	field := "ipsec.ike.psk"
	if h.IPsec.IKE.Auth() != "psk" {
		field = "ipsec.ike.private-key"
	}
	if problem := config.IKESecretProblem(path); problem != "" {
		return swan.OverlaySecret{}, fmt.Errorf("%s (line %d): refused: %s", field, h.IPsec.IKE.Line, problem)
	}
	if h.IPsec.IKE.Auth() == "psk" {
		k, err := swan.ReadPSK(path)
		if err != nil {
			return swan.OverlaySecret{}, fmt.Errorf("%s: %w", field, err)
		}
		return swan.OverlaySecret{PSK: k}, nil
	}
	b, err := fileread.Read(path, fileread.KeyLimit)
	if err != nil {
		return swan.OverlaySecret{}, fmt.Errorf("%s: %w", field, err)
	}
	k, err := swan.ParsePSK(string(b))
	if err != nil {
		return swan.OverlaySecret{}, fmt.Errorf("%s %s: %w", field, path, err)
	}
	return swan.OverlaySecret{Key: k}, nil
}

// ikeOffload applies the same rules as manual keying: the offload device
// exists, the bond gate of broken kernels, auto's fallback. It also checks
// the device binding strongSwan 5.9 uses: it offloads an SA to the
// interface holding the SA's local address (kernel-netlink's
// get_interface), not to a named device, so the peer's local address must
// be on offload-dev.
func (p *planner) ikeOffload(path string, pr *config.Peer) (string, bool) {
	mode := pr.OffloadOut // the same both ways: validated
	if mode == config.OffloadModeNone {
		return mode, true
	}
	dev := pr.OffloadDev
	if p.live.link(dev) == nil && dev != p.bondName {
		p.fail("%s: offload-dev %s: no such interface (and the file does not create it)", path, dev)
		return "", false
	}
	if p.isBond(dev) && bondOffloadBroken(p.live.Release) && !p.h.IPsec.UnsafeBondOffload {
		why := fmt.Sprintf("ESP offload through bond %s is broken on Linux %s (see docs/overlay.md)", dev, p.live.Release)
		if mode != config.OffloadModeAuto {
			p.fail("%s: offload %s refused: %s. Offload to the active port instead (offload-dev: <port>), use offload: none, or set ipsec.unsafe-bond-offload: true if your kernel has the fix", path, mode, why)
			return "", false
		}
		p.note("%s: offload auto -> none: %s", path, why)
		return config.OffloadModeNone, true
	}
	if !p.addrOn(dev, pr.Local) {
		p.fail("%s: offload %s with keying: ike needs local %s on offload-dev %s: strongSwan offloads an SA to the interface that holds its local address, and %s is not on %s. Put the address on %s (uplinks.addresses), or use offload: none", path, mode, pr.Local, dev, pr.Local, dev, dev)
		return "", false
	}
	if mode == config.OffloadModePacket {
		p.note("%s: hw_offload = packet needs strongSwan 6 (Debian bookworm's 5.9.8 refuses it at load-conn) and a NIC with packet offload", path)
	}
	return mode, true
}

// addrOn reports whether a is, or will be, on dev.
func (p *planner) addrOn(dev string, a netip.Addr) bool {
	if k := p.live.link(dev); k != nil {
		for _, x := range k.Addrs {
			if x.Addr() == a {
				return true
			}
		}
	}
	if u := p.h.Uplinks; u != nil && (dev == p.bondName || (p.bondName == "" && len(p.ports) == 1 && p.ports[0] == dev)) {
		for _, x := range u.Addresses {
			if x.Addr() == a {
				return true
			}
		}
	}
	return false
}

// ikePeer plans one IKE peer: load (or replace) its connection, then
// initiate it unless a CHILD_SA is installed.
func (p *planner) ikePeer(path string, pr *config.Peer) {
	il := p.live.IKE
	if il == nil || il.Err != nil {
		why := "not asked"
		if il != nil {
			why = il.Err.Error()
		}
		p.fail("%s: keying: ike needs charon at %s: %s", path, p.h.IPsec.IKE.VICI, why)
		return
	}
	mode, ok := p.ikeOffload(path, pr)
	if !ok || !p.driverQuirks(path, pr, map[string]string{"out": mode, "in": mode}, false) {
		return
	}
	if problem := config.IKESecretProblem(ikeSecretFile(p.h)); problem != "" {
		p.fail("%s: ipsec.ike: secret refused: %s", path, problem)
		return
	}
	o, err := ikeConn(p.h, pr, mode)
	if err != nil {
		p.fail("%s: %v", path, err)
		return
	}
	p.ikeBlock(pr) // plan_ike_block.go: before charon's policies exist
	var stale []string
	loaded := false
	for _, c := range il.Conns {
		switch {
		case c == o.Name:
			loaded = true
		case strings.HasPrefix(c, connPrefix(p.h, pr.Name)):
			stale = append(stale, c)
		}
	}
	uri := p.h.IPsec.IKE.VICI
	for _, c := range stale {
		c := c
		p.add(Step{Section: "ipsec", Action: "delete", Object: "IKE connection " + c, Why: "the file's settings for " + pr.Name + " changed (the connection is replaced; its SAs are renegotiated)",
			Commands: []string{"swanctl --unload-conn " + c + " && swanctl --terminate --ike " + c}, run: func(r *runner) error {
				return withVICI(uri, func(cl *swan.Client) error { return cl.UnloadOverlay(c) })
			}})
	}
	if !loaded {
		var conf bytes.Buffer
		o.WriteSwanctl(&conf, ikeSecretFile(p.h))
		cmds := []string{"swanctl --load-creds --load-conns   # sluice loads over VICI what this swanctl.conf holds:"}
		for _, l := range strings.Split(strings.TrimRight(conf.String(), "\n"), "\n") {
			cmds = append(cmds, "  "+l)
		}
		h := p.h
		p.add(Step{Section: "ipsec", Action: "create", Object: "IKE connection " + o.Name, Why: "missing in charon", Commands: cmds, run: func(r *runner) error {
			sec, err := loadIKESecret(h)
			if err != nil {
				return err
			}
			if err := withVICI(uri, func(cl *swan.Client) error { return cl.LoadOverlay(o, sec) }); err != nil {
				return err
			}
			r.created(entry{Kind: kindIKEConn, Name: o.Name})
			return nil
		}})
	}
	if loaded && slices.ContainsFunc(il.Children[o.Name], func(c swan.OverlayChild) bool { return c.State == "INSTALLED" }) {
		return
	}
	// Last: IKE needs the route to the peer, which the VTEP section
	// makes; until then the trap policy holds the peer's traffic.
	p.ikeLast = append(p.ikeLast, Step{Section: "ipsec", Action: "create", Object: "IKE SA with " + pr.Name, Why: "no CHILD_SA installed", IKEPeer: pr.Name,
		Commands: []string{"swanctl --initiate --child " + o.Name}, run: func(r *runner) error {
			err := withVICI(uri, func(cl *swan.Client) error {
				err := cl.Initiate(o.Name, o.Name, ikeTimeout)
				if err != nil {
					// Stop the attempt: charon would keep retransmitting
					// it, and when the peer comes up and initiates too
					// there would be two IKE_SAs with a CHILD_SA each.
					_ = cl.TerminateForce(o.Name)
				}
				return err
			})
			if err != nil {
				// The peer may not have its connection yet: the trap
				// policy holds the traffic (never in clear) and the
				// peer's apply, or the first packet, brings it up.
				r.report(OffloadNote{Peer: pr.Name}, "IKE with %s not up yet (%s): the trap policy holds its traffic until the peer's apply initiates, or a packet triggers IKE; sluice verify says when it is up", pr.Name, trimErr(err))
				return nil
			}
			r.report(OffloadNote{Peer: pr.Name, Got: mode}, "IKE with %s: CHILD_SA installed (offload %s)", pr.Name, mode)
			return nil
		}})
}

func withVICI(uri string, f func(*swan.Client) error) error {
	c, err := swan.Connect(context.Background(), uri)
	if err != nil {
		return err
	}
	defer c.Close()
	return f(c)
}
