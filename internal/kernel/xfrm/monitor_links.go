// SPDX-License-Identifier: Apache-2.0

package xfrm

import (
	"context"
	"encoding/binary"
	"fmt"
	"syscall"

	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// When a device goes down, the kernel deletes every SA and policy
// offloaded to it (xfrm_dev_down: xfrm_dev_state_flush and
// xfrm_dev_policy_flush) and says nothing on the XFRM groups. A mirror
// that only listened there would keep them, and once the link is up again
// send traffic into a port that no longer has a policy for it: the port
// sends it in cleartext. So the watch also listens for links going down
// and reports each as a Resync: dump everything again.

// ifinfomsg layout (struct ifinfomsg): family, pad, type, index, flags, change.
const (
	ifinfoIndex  = 4
	ifinfoFlags  = 8
	ifinfoChange = 12
	ifinfoLen    = 16
)

// subscribeLinks opens a socket on the target namespace's link group.
func (x *Handle) subscribeLinks() (*nl.NetlinkSocket, error) {
	return nl.SubscribeAt(x.target(), netns.None(), unix.NETLINK_ROUTE, unix.RTNLGRP_LINK)
}

// readLinksDown sends a Resync for every link that goes from up to down,
// and for lost link notifications, until ctx ends or s fails (fatal).
func readLinksDown(ctx context.Context, s *nl.NetlinkSocket, send func(Event) bool, fatal func(error)) {
	receive(ctx, s, "xfrm monitor: links", send, fatal, func(msgs []syscall.NetlinkMessage, from *unix.SockaddrNetlink) bool {
		if from.Pid != nl.PidKernel {
			return true
		}
		for _, m := range msgs {
			if idx, down := linkWentDown(m.Header.Type, m.Data); down {
				err := fmt.Errorf("link %d went down: the kernel removed the SAs and policies offloaded to it without an XFRM event", idx)
				if !send(Event{Kind: Resync, Err: err}) {
					return false
				}
			}
		}
		return true
	})
}

// linkWentDown reports whether an RTM_NEWLINK notification says IFF_UP was
// just cleared (the kernel sets it in ifi_change when it toggles): the
// moment xfrm_dev_down flushed the device's offloaded state.
func linkWentDown(typ uint16, b []byte) (int, bool) {
	if typ != unix.RTM_NEWLINK || len(b) < ifinfoLen {
		return 0, false
	}
	flags := binary.NativeEndian.Uint32(b[ifinfoFlags:])
	change := binary.NativeEndian.Uint32(b[ifinfoChange:])
	idx := int(int32(binary.NativeEndian.Uint32(b[ifinfoIndex:])))
	return idx, change&unix.IFF_UP != 0 && flags&unix.IFF_UP == 0
}
