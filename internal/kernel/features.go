// SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"errors"
	"net"
	"os"
	"sort"
	"strings"

	"sluice/internal/kernel/xfrm"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Feature names, as printed by `sluice version` and used as JSON keys.
const (
	FeatureESP       = "esp"
	FeatureGCM       = "gcm"
	FeatureXFRM      = "xfrm"
	FeatureXDP       = "xdp"
	FeatureBTF       = "btf"
	FeatureBonding   = "bonding"
	FeatureVLAN      = "8021q"
	FeatureVXLAN     = "vxlan"
	FeatureGeneve    = "geneve"
	FeatureFlower    = "flower"
	FeatureNetdevsim = "netdevsim"
)

// Features is what the running kernel can do, found by trying each feature
// for real (in a throwaway network namespace), not by reading a config file:
// a module that is configured but missing, or a build without the option,
// both show up as "no".
type Features struct {
	Release string          `json:"release"`
	Have    map[string]bool `json:"features"`
	// Evidence says, per feature, what was tried and what the kernel said.
	Evidence map[string]string `json:"evidence"`
	// Unknown lists features that could not be probed (e.g. not root).
	Unknown []string `json:"unknown,omitempty"`
}

// Names returns the feature names in display order.
func (f *Features) Names() []string {
	names := make([]string, 0, len(f.Have))
	for n := range f.Have {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

type probeResult struct {
	have     bool
	known    bool
	evidence string
}

func yes(ev string) probeResult { return probeResult{have: true, known: true, evidence: ev} }
func no(ev string) probeResult  { return probeResult{have: false, known: true, evidence: ev} }
func unknown(ev string) probeResult {
	return probeResult{known: false, evidence: ev}
}

// ProbeFeatures probes the running kernel. Probes that create links or
// states run inside a new network namespace that is destroyed afterwards, so
// the host is never touched. Without CAP_NET_ADMIN those probes report
// "unknown".
func ProbeFeatures() *Features {
	f := &Features{Have: map[string]bool{}, Evidence: map[string]string{}}
	var uts unix.Utsname
	if unix.Uname(&uts) == nil {
		f.Release = unix.ByteSliceToString(uts.Release[:])
	}
	set := func(name string, r probeResult) {
		f.Have[name] = r.have
		f.Evidence[name] = r.evidence
		if !r.known {
			f.Unknown = append(f.Unknown, name)
		}
	}

	set(FeatureXDP, probeXDP())
	set(FeatureBTF, probeBTF())
	if _, err := os.Stat("/sys/bus/netdevsim"); err == nil {
		set(FeatureNetdevsim, yes("/sys/bus/netdevsim exists"))
	} else {
		set(FeatureNetdevsim, no("/sys/bus/netdevsim missing (module not loaded or not built)"))
	}

	err := inThrowawayNetns(func(ns netns.NsHandle, h *netlink.Handle) {
		esp, gcm, x := probeXFRM(xfrm.HandleAt(ns))
		set(FeatureESP, esp)
		set(FeatureGCM, gcm)
		set(FeatureXFRM, x)
		set(FeatureBonding, probeLink(h, &netlink.Bond{LinkAttrs: netlink.LinkAttrs{Name: "probe-bond"}, Mode: netlink.BOND_MODE_ACTIVE_BACKUP}))
		set(FeatureVXLAN, probeLink(h, &netlink.Vxlan{LinkAttrs: netlink.LinkAttrs{Name: "probe-vxlan"}, VxlanId: 42, Port: 4789}))
		set(FeatureGeneve, probeLink(h, &netlink.Geneve{LinkAttrs: netlink.LinkAttrs{Name: "probe-geneve"}, ID: 42, Remote: net.IPv4(192, 0, 2, 1)}))
		set(FeatureVLAN, probeVLAN(h))
		set(FeatureFlower, probeFlower(h))
	})
	if err != nil {
		for _, n := range []string{FeatureESP, FeatureGCM, FeatureXFRM, FeatureBonding, FeatureVXLAN, FeatureGeneve, FeatureVLAN, FeatureFlower} {
			set(n, unknown("cannot create a probe network namespace: "+err.Error()))
		}
	}
	sort.Strings(f.Unknown)
	return f
}

func probeXDP() probeResult {
	if err := features.HaveProgramType(ebpf.XDP); err != nil {
		if errors.Is(err, ebpf.ErrNotSupported) {
			return no("loading an XDP program: " + err.Error())
		}
		return unknown("loading an XDP program: " + err.Error())
	}
	return yes("loaded a minimal XDP program")
}

func probeBTF() probeResult {
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		return no("/sys/kernel/btf/vmlinux missing")
	}
	return yes("/sys/kernel/btf/vmlinux exists")
}

// inThrowawayNetns runs fn with a fresh network namespace and a netlink
// handle bound to it. The namespace disappears when the handle and fd are
// closed.
func inThrowawayNetns(fn func(ns netns.NsHandle, h *netlink.Handle)) error {
	ns, err := NewNetns(nil)
	if err != nil {
		return err
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	fn(ns, h)
	return nil
}

// probeXFRM installs throwaway SAs. The kernel checks the algorithm before
// it resolves the ESP type, so "AEAD not found" (ENOSYS) means no GCM and
// says nothing about ESP, while "type not found" (EPROTONOSUPPORT) means the
// algorithm exists but ESP does not. The SAs go in through xfrm.StateAdd,
// the encoder `sluice apply` uses.
func probeXFRM(x *xfrm.Handle) (esp, gcm, xfrmOK probeResult) {
	src, dst := net.IPv4(192, 0, 2, 1), net.IPv4(192, 0, 2, 2)
	gcmSA := &netlink.XfrmState{
		Src: src, Dst: dst, Proto: netlink.XFRM_PROTO_ESP, Mode: netlink.XFRM_MODE_TRANSPORT, Spi: 0x100,
		Aead: &netlink.XfrmStateAlgo{Name: "rfc4106(gcm(aes))", Key: make([]byte, 20), ICVLen: 128},
	}
	err := x.StateAdd(gcmSA, nil)
	switch {
	case err == nil:
		return yes("installed an ESP SA with rfc4106(gcm(aes))"), yes("rfc4106(gcm(aes)) accepted for ESP"), yes("XFRM netlink answers")
	case errors.Is(err, unix.ENOSYS):
		gcm = no("rfc4106(gcm(aes)) SA refused: " + err.Error())
	case errors.Is(err, unix.EPROTONOSUPPORT):
		return no("ESP SA refused: " + err.Error()), yes("rfc4106(gcm(aes)) passed the algorithm check"), yes("XFRM netlink answers")
	case errors.Is(err, unix.EPERM):
		u := unknown("not permitted: " + err.Error())
		return u, u, u
	default:
		gcm = unknown("rfc4106(gcm(aes)) SA: " + err.Error())
	}
	// GCM is missing or unclear: tell ESP apart with a CBC/HMAC SA.
	cbcSA := &netlink.XfrmState{
		Src: src, Dst: dst, Proto: netlink.XFRM_PROTO_ESP, Mode: netlink.XFRM_MODE_TRANSPORT, Spi: 0x101,
		Crypt: &netlink.XfrmStateAlgo{Name: "cbc(aes)", Key: make([]byte, 16)},
		Auth:  &netlink.XfrmStateAlgo{Name: "hmac(sha256)", Key: make([]byte, 32), TruncateLen: 128},
	}
	err = x.StateAdd(cbcSA, nil)
	switch {
	case err == nil:
		return yes("installed an ESP SA with cbc(aes)+hmac(sha256)"), gcm, yes("XFRM netlink answers")
	case errors.Is(err, unix.EPROTONOSUPPORT):
		return no("ESP SA refused: " + err.Error()), gcm, yes("XFRM netlink answers")
	case errors.Is(err, unix.ENOSYS):
		return unknown("no algorithm to test ESP with: " + err.Error()), gcm, yes("XFRM netlink answers")
	default:
		return unknown("ESP SA: " + err.Error()), gcm, unknown("XFRM: " + err.Error())
	}
}

func probeLink(h *netlink.Handle, l netlink.Link) probeResult {
	kind := l.Type()
	if err := h.LinkAdd(l); err != nil {
		if errors.Is(err, unix.EOPNOTSUPP) || strings.Contains(err.Error(), "not supported") {
			return no("creating a " + kind + " link: " + err.Error())
		}
		if errors.Is(err, unix.EPERM) {
			return unknown("not permitted: " + err.Error())
		}
		return no("creating a " + kind + " link: " + err.Error())
	}
	_ = h.LinkDel(l)
	return yes("created a " + kind + " link")
}

// vethPair makes a veth pair to hang VLANs and qdiscs on (dummy may be
// missing from a kernel that has veth).
func vethPair(h *netlink.Handle, name string) (netlink.Link, error) {
	v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: name + "p"}
	if err := h.LinkAdd(v); err != nil {
		return nil, err
	}
	return h.LinkByName(name)
}

func probeVLAN(h *netlink.Handle) probeResult {
	parent, err := vethPair(h, "probe-vl")
	if err != nil {
		return unknown("creating a veth parent: " + err.Error())
	}
	r := probeLink(h, &netlink.Vlan{LinkAttrs: netlink.LinkAttrs{Name: "probe-vl.7", ParentIndex: parent.Attrs().Index}, VlanId: 7})
	_ = h.LinkDel(parent)
	return r
}

func probeFlower(h *netlink.Handle) probeResult {
	dev, err := vethPair(h, "probe-fl")
	if err != nil {
		return unknown("creating a veth: " + err.Error())
	}
	defer h.LinkDel(dev) //nolint:errcheck
	q := &netlink.GenericQdisc{
		QdiscAttrs: netlink.QdiscAttrs{LinkIndex: dev.Attrs().Index, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT},
		QdiscType:  "clsact",
	}
	if err := h.QdiscAdd(q); err != nil {
		return no("adding a clsact qdisc: " + err.Error())
	}
	flt := &netlink.Flower{
		FilterAttrs: netlink.FilterAttrs{LinkIndex: dev.Attrs().Index, Parent: netlink.HANDLE_MIN_INGRESS, Priority: 1, Protocol: unix.ETH_P_IP},
		Actions:     []netlink.Action{&netlink.GenericAction{ActionAttrs: netlink.ActionAttrs{Action: netlink.TC_ACT_OK}}},
	}
	if err := h.FilterAdd(flt); err != nil {
		return no("adding a flower filter: " + err.Error())
	}
	return yes("installed a flower filter on a clsact ingress")
}
