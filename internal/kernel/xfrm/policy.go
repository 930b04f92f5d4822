// SPDX-License-Identifier: Apache-2.0

package xfrm

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// Adding and deleting policies. PolicyAdd is the one way sluice installs a
// policy; it sends XFRMA_OFFLOAD_DEV, which vishvananda/netlink cannot.

// ESPPolicy is a policy to install: one ESP template, optionally offloaded.
type ESPPolicy struct {
	Dir      Dir
	Src, Dst netip.Prefix
	Priority uint32
	// Template: the SA endpoints (tunnel mode only), reqid, mode.
	TmplSrc, TmplDst netip.Addr
	Reqid            uint32
	Tunnel           bool
	Offload          *Offload
}

// PolicyAdd installs (or, with update, replaces) a policy
// (`ip xfrm policy add|update`).
func (x *Handle) PolicyAdd(p ESPPolicy, update bool) error {
	typ, flags := nl.XFRM_MSG_NEWPOLICY, unix.NLM_F_CREATE|unix.NLM_F_EXCL|unix.NLM_F_ACK
	if update {
		typ, flags = nl.XFRM_MSG_UPDPOLICY, unix.NLM_F_CREATE|unix.NLM_F_REPLACE|unix.NLM_F_ACK
	}
	body, err := encodePolicy(p)
	if err != nil {
		return err
	}
	if err := x.execute(xfrmRequest(typ, flags, body), 0, nil); err != nil {
		return fmt.Errorf("xfrm policy add src %s dst %s dir %s: %w", p.Src, p.Dst, p.Dir, err)
	}
	return nil
}

// PolicyAdd installs a policy in the current namespace; see
// Handle.PolicyAdd.
func PolicyAdd(p ESPPolicy, update bool) error { return (&Handle{}).PolicyAdd(p, update) }

// encodePolicy builds struct xfrm_userpolicy_info, one XFRMA_TMPL and
// XFRMA_OFFLOAD_DEV.
func encodePolicy(p ESPPolicy) ([]byte, error) {
	if !p.Src.IsValid() || !p.Dst.IsValid() || p.Src.Addr().Is4() != p.Dst.Addr().Is4() {
		return nil, fmt.Errorf("xfrm policy: src %v and dst %v must both be set and of one family", p.Src, p.Dst)
	}
	if p.Offload != nil {
		if err := p.Offload.validate(); err != nil {
			return nil, err
		}
	}
	b := make([]byte, xfrmPolicyInfoLen, 512)
	putSelector(b[polSel:], &netlink.XfrmPolicy{Src: prefixNet(p.Src), Dst: prefixNet(p.Dst)})
	// Byte and packet limits "infinite"; the time limits stay 0 (none).
	for _, off := range []int{lftSoftByte, lftHardByte, lftSoftPacket, lftHardPacket} {
		ne.PutUint64(b[polLft+off:], nl.XFRM_INF)
	}
	ne.PutUint32(b[polPriority:], p.Priority)
	b[polDir] = uint8(p.Dir)
	// action allow (0), flags 0, share any (0)
	t := make([]byte, xfrmTmplLen)
	family := uint16(unix.AF_INET)
	if !p.Src.Addr().Is4() {
		family = unix.AF_INET6
	}
	if p.Tunnel {
		putAddr(t[tmplDaddr:], net.IP(p.TmplDst.AsSlice()))
		putAddr(t[tmplSaddr:], net.IP(p.TmplSrc.AsSlice()))
		if p.TmplDst.Is4() {
			family = unix.AF_INET
		} else {
			family = unix.AF_INET6
		}
	}
	t[tmplProto] = unix.IPPROTO_ESP
	ne.PutUint16(t[tmplFamily:], family)
	ne.PutUint32(t[tmplReqid:], p.Reqid)
	if p.Tunnel {
		t[tmplMode] = uint8(netlink.XFRM_MODE_TUNNEL)
	}
	// Any algorithm (as iproute2 sends them).
	for _, off := range []int{tmplAalgos, tmplEalgos, tmplCalgos} {
		ne.PutUint32(t[off:], ^uint32(0))
	}
	b = putAttr(b, nl.XFRMA_TMPL, t)
	if p.Offload != nil {
		b = putAttr(b, nl.XFRMA_OFFLOAD_DEV, p.Offload.MarshalAttr())
	}
	return b, nil
}

func prefixNet(p netip.Prefix) *net.IPNet {
	bits := 32
	if !p.Addr().Is4() {
		bits = 128
	}
	return &net.IPNet{IP: net.IP(p.Masked().Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), bits)}
}

// PolicyDelete removes the policy with this selector and direction
// (`ip xfrm policy delete`).
func PolicyDelete(dir Dir, src, dst netip.Prefix) error {
	pol := &netlink.XfrmPolicy{Src: prefixNet(src), Dst: prefixNet(dst), Dir: netlink.Dir(dir)}
	if err := netlink.XfrmPolicyDel(pol); err != nil {
		return fmt.Errorf("xfrm policy delete src %s dst %s dir %s: %w", src, dst, dir, err)
	}
	return nil
}
