// SPDX-License-Identifier: Apache-2.0

package tcflower

import (
	"encoding/binary"
	"fmt"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"sluice/internal/kernel/nlattr"
)

// Dump lists the flower filters on the device's clsact ingress, in
// every chain: what reconciliation compares against. It reads only what
// Installed holds (the library decodes every key and action of every
// filter, which at 65,536 filters took longer than installing them).
func Dump(ifindex int) ([]Installed, error) {
	// The kernel dumps nothing, without an error, for a device that does
	// not exist: ask first.
	if _, err := netlink.LinkByIndex(ifindex); err != nil {
		return nil, fmt.Errorf("tc flower: dump ifindex %d: %w", ifindex, err)
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("tc flower: netlink socket: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("tc flower: bind netlink socket: %w", err)
	}
	const seq = 1
	req := binary.NativeEndian.AppendUint32(nil, unix.SizeofNlMsghdr+20)
	req = binary.NativeEndian.AppendUint16(req, unix.RTM_GETTFILTER)
	req = binary.NativeEndian.AppendUint16(req, unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	req = binary.NativeEndian.AppendUint32(req, seq)
	req = binary.NativeEndian.AppendUint32(req, 0)
	// struct tcmsg: every handle and priority of the ingress hook.
	req = append(req, nl.FAMILY_ALL, 0, 0, 0)
	req = binary.NativeEndian.AppendUint32(req, uint32(int32(ifindex)))
	req = binary.NativeEndian.AppendUint32(req, 0)
	req = binary.NativeEndian.AppendUint32(req, clsactIngress)
	req = binary.NativeEndian.AppendUint32(req, 0)
	if err := sendRetry(fd, req, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("tc flower: dump ifindex %d: %w", ifindex, err)
	}
	var out []Installed
	buf := make([]byte, 64<<10)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("tc flower: dump ifindex %d: %w", ifindex, err)
		}
		for b := buf[:n]; len(b) >= nlmsgHdrLen; {
			l := int(binary.NativeEndian.Uint32(b[nlmsgLen:]))
			if l < nlmsgHdrLen || l > len(b) {
				return nil, fmt.Errorf("tc flower: dump ifindex %d: malformed message", ifindex)
			}
			typ, mseq := binary.NativeEndian.Uint16(b[nlmsgType:]), binary.NativeEndian.Uint32(b[nlmsgSeq:])
			body := b[nlmsgHdrLen:l]
			b = b[min(len(b), nlAlign(l)):]
			if mseq != seq {
				continue
			}
			switch typ {
			case unix.NLMSG_DONE:
				return out, nil
			case unix.NLMSG_ERROR:
				if len(body) >= 4 {
					if errno := int32(binary.NativeEndian.Uint32(body)); errno != 0 {
						return nil, fmt.Errorf("tc flower: dump ifindex %d: %w", ifindex, unix.Errno(-errno))
					}
				}
				return out, nil
			case unix.RTM_NEWTFILTER:
				if h, ok := parseFlowerHandle(body); ok {
					out = append(out, h)
				}
			}
		}
	}
}

// parseFlowerHandle reads one RTM_NEWTFILTER of a dump (after the
// nlmsghdr). ok is false for other classifiers and for the header each
// priority's filter list begins with (handle 0).
func parseFlowerHandle(b []byte) (h Installed, ok bool) {
	if len(b) < tcmsgLen {
		return h, false
	}
	h.Handle = binary.NativeEndian.Uint32(b[tcmHandle:])
	h.Pref = uint16(binary.NativeEndian.Uint32(b[tcmInfo:]) >> 16)
	if h.Handle == 0 {
		return h, false
	}
	flower := false
	eachAttr(b[tcmsgLen:], func(typ uint16, v []byte) {
		switch typ {
		case nl.TCA_KIND:
			flower = string(v) == "flower\x00"
		case nl.TCA_CHAIN:
			if len(v) >= 4 {
				h.Chain = binary.NativeEndian.Uint32(v)
			}
		case nl.TCA_OPTIONS:
			eachAttr(v, func(typ uint16, v []byte) {
				switch typ {
				case nl.TCA_FLOWER_FLAGS:
					if len(v) >= 4 {
						f := binary.NativeEndian.Uint32(v)
						h.SkipSW, h.SkipHW = f&nl.TCA_CLS_FLAGS_SKIP_SW != 0, f&nl.TCA_CLS_FLAGS_SKIP_HW != 0
					}
				case nl.TCA_FLOWER_ACT:
					// The actions in order: the last one's counter.
					eachAttr(v, func(_ uint16, act []byte) { h.Packets = actionPackets(act) })
				}
			})
		}
	})
	return h, flower
}

// actionPackets reads an action's packet counter from its TCA_ACT_STATS
// (TCA_STATS_BASIC counts software and hardware together; a count past
// 32 bits comes in TCA_STATS_PKT64).
func actionPackets(act []byte) uint64 {
	var basic, pkt64 uint64
	eachAttr(act, func(typ uint16, v []byte) {
		if typ != nl.TCA_ACT_STATS {
			return
		}
		eachAttr(v, func(typ uint16, v []byte) {
			switch {
			case typ == nl.TCA_STATS_BASIC && len(v) >= gnetBasicLen:
				basic = uint64(binary.NativeEndian.Uint32(v[gnetBasicPackets:]))
			case typ == nl.TCA_STATS_PKT64 && len(v) >= 8:
				pkt64 = binary.NativeEndian.Uint64(v)
			}
		})
	})
	return max(basic, pkt64)
}

// eachAttr calls f for each netlink attribute in b (type without the
// nested and byte-order flags).
func eachAttr(b []byte, f func(typ uint16, v []byte)) {
	_ = nlattr.Walk(b, f) // a dump read as far as it is whole: the counters are advisory
}
