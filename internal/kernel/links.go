// SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
)

// LinkInfo is what the fast path needs to know about an interface.
type LinkInfo struct {
	Name    string
	Ifindex int
	MAC     net.HardwareAddr
	// VLAN child: its tag and parent device (0 otherwise).
	VLANID        uint16
	ParentIfindex int
	Up            bool
	// XDPProgID is the XDP program attached to it (0: none): what an
	// attachment check compares with the program of a pinned link.
	XDPProgID uint32
}

// Link looks an interface up by name in the calling thread's namespace.
func Link(name string) (*LinkInfo, error) {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return nil, fmt.Errorf("interface %q: %w", name, err)
	}
	a := l.Attrs()
	info := &LinkInfo{Name: a.Name, Ifindex: a.Index, MAC: a.HardwareAddr, Up: a.Flags&net.FlagUp != 0}
	if a.Xdp != nil && a.Xdp.Attached {
		info.XDPProgID = a.Xdp.ProgId
	}
	if v, ok := l.(*netlink.Vlan); ok {
		info.VLANID = uint16(v.VlanId)
		info.ParentIfindex = a.ParentIndex
	}
	return info, nil
}

// LinkByIndex looks an interface up by index.
func LinkByIndex(idx int) (*LinkInfo, error) {
	l, err := netlink.LinkByIndex(idx)
	if err != nil {
		return nil, fmt.Errorf("interface #%d: %w", idx, err)
	}
	return Link(l.Attrs().Name)
}

// LinkIndexes lists the ifindex of every link in the calling thread's
// namespace.
func LinkIndexes() ([]int, error) {
	ls, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("ip link list: %w", err)
	}
	out := make([]int, len(ls))
	for i, l := range ls {
		out[i] = l.Attrs().Index
	}
	return out, nil
}
