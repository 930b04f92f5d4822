// SPDX-License-Identifier: Apache-2.0

package xfrm

import (
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
)

// BlockPolicy is a policy without a template that drops what it matches
// (`ip xfrm policy add ... action block`). The overlay installs them
// behind charon's policies for the same selectors, so a pair's traffic
// is dropped, never sent in clear, while charon is down.
//
// Two policies with one selector and direction are one policy to the
// kernel unless their mark (or interface id) differs, so a block policy
// beside charon's carries a mark: Mark/MarkMask 0/1 and 1/1 together
// match every packet, whatever its mark.
type BlockPolicy struct {
	Dir            Dir
	Src, Dst       netip.Prefix
	Priority       uint32
	Mark, MarkMask uint32
}

func (b BlockPolicy) netlink() *netlink.XfrmPolicy {
	return &netlink.XfrmPolicy{Dir: netlink.Dir(b.Dir), Src: prefixNet(b.Src), Dst: prefixNet(b.Dst), Priority: int(b.Priority),
		Action: netlink.XFRM_POLICY_BLOCK, Mark: &netlink.XfrmMark{Value: b.Mark, Mask: b.MarkMask}}
}

// String is how plan and errors name it.
func (b BlockPolicy) String() string {
	return fmt.Sprintf("block policy %s %s->%s mark %d/%d", b.Dir, b.Src, b.Dst, b.Mark, b.MarkMask)
}

// Command is the equivalent ip command (verb add, update or delete).
func (b BlockPolicy) Command(verb string) string {
	c := fmt.Sprintf("ip xfrm policy %s src %s dst %s dir %s mark %#x mask %#x", verb, b.Src, b.Dst, b.Dir, b.Mark, b.MarkMask)
	if verb != "delete" {
		c += fmt.Sprintf(" priority %d action block", b.Priority)
	}
	return c
}

// Matches reports whether the live policy l is b.
func (b BlockPolicy) Matches(l *Policy) bool {
	return l.Dir == b.Dir && !l.Sub && l.Sel.Src == b.Src.Masked() && l.Sel.Dst == b.Dst.Masked() && l.Sel.Proto == 0 &&
		l.Sel.SPortMask == 0 && l.Sel.DPortMask == 0 && l.Sel.Ifindex == 0 && l.IfID == 0 &&
		l.Mark == b.Mark&b.MarkMask && l.MarkMask == b.MarkMask
}

// BlockPolicyAdd installs b in the current namespace (update: replace
// the one with its selector and mark).
func BlockPolicyAdd(b BlockPolicy, update bool) error {
	var err error
	if update {
		err = netlink.XfrmPolicyUpdate(b.netlink())
	} else {
		err = netlink.XfrmPolicyAdd(b.netlink())
	}
	if err != nil {
		return fmt.Errorf("xfrm %s: %w", b, err)
	}
	return nil
}

// BlockPolicyDelete removes b from the current namespace.
func BlockPolicyDelete(b BlockPolicy) error {
	if err := netlink.XfrmPolicyDel(b.netlink()); err != nil {
		return fmt.Errorf("xfrm delete %s: %w", b, err)
	}
	return nil
}
