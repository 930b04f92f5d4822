// SPDX-License-Identifier: Apache-2.0

package hwcheck

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"sluice/internal/kernel"
)

// Frames that reach the port the way the gateway's fast path sends them:
// XDP redirects them into the port (the port's ndo_xdp_xmit), so no
// kernel xfrm marks them and only the device's IPsec tables decide.
// They come from a veth in the port's namespace whose XDP program
// redirects everything it receives into the port; the run writes them
// into the veth's other end.

var (
	xdpSrc = netip.MustParseAddr("10.71.9.1")
	xdpDst = netip.MustParseAddr("10.72.9.1")
)

const (
	vethIn   = "hwck0" // runs the redirect program
	vethFeed = "hwck1" // the run writes frames here
)

// xdpPath is the redirect path into the port.
type xdpPath struct {
	feed  *rawSender
	frame []byte
}

// xdpPath builds (once) the veth, attaches the programs and registers their
// removal. The port gets an XDP_PASS program too: mlx5 accepts
// ndo_xdp_xmit only on a device that runs one (MLX5E_STATE_XDP_ACTIVE).
func (l *lab) xdpPath() (*xdpPath, error) {
	if l.xdp != nil {
		return l.xdp, nil
	}
	p := &xdpPath{frame: udpFrame(l.macB, l.macA, xdpSrc, xdpDst)}
	err := l.inA(func() error {
		portIdx, err := ifindex(l.port)
		if err != nil {
			return err
		}
		pass, err := xdpProgram("hwcheck_pass", asm.Instructions{asm.Mov.Imm(asm.R0, 2), asm.Return()}) // XDP_PASS
		if err != nil {
			return err
		}
		defer pass.Close() // the link holds the program
		if err := l.attachXDP(pass, l.port, portIdx); err != nil {
			return err
		}
		if err := kernel.VethAdd(vethIn, vethFeed); err != nil {
			return err
		}
		// The veth goes with the namespace; deleted first all the same,
		// so nothing redirects into the port while it moves back.
		l.later("delete the veth "+vethIn, func() error {
			return l.inA(func() error { return kernel.LinkDelete(vethIn) })
		})
		redirect, err := xdpProgram("hwcheck_redirect", asm.Instructions{
			asm.Mov.Imm(asm.R1, int32(portIdx)),
			asm.Mov.Imm(asm.R2, 0),
			asm.FnRedirect.Call(),
			asm.Return(),
		})
		if err != nil {
			return err
		}
		defer redirect.Close()
		inIdx, err := ifindex(vethIn)
		if err != nil {
			return err
		}
		if err := l.attachXDP(redirect, vethIn, inIdx); err != nil {
			return err
		}
		p.feed, err = newRawSender(vethFeed)
		return err
	})
	if err != nil {
		return nil, err
	}
	l.later("close the frame sender", func() error { p.feed.close(); return nil })
	l.xdp = p
	return p, nil
}

// send writes n frames xdpSrc -> xdpDst into the redirect.
func (p *xdpPath) send(ctx context.Context, n int) error { return p.feed.send(ctx, p.frame, n) }

func ifindex(dev string) (int, error) {
	ifi, err := net.InterfaceByName(dev)
	if err != nil {
		return 0, err
	}
	return ifi.Index, nil
}

func xdpProgram(name string, insns asm.Instructions) (*ebpf.Program, error) {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: name, Type: ebpf.XDP, License: "GPL", Instructions: insns})
	if err != nil {
		return nil, fmt.Errorf("loading the XDP program %s: %w (hwcheck needs root and BPF)", name, err)
	}
	return prog, nil
}

// attachXDP attaches in native (driver) mode: the mode the gateway runs
// in, and the one in which redirected frames use ndo_xdp_xmit.
func (l *lab) attachXDP(prog *ebpf.Program, dev string, idx int) error {
	lk, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: idx, Flags: link.XDPDriverMode})
	if err != nil {
		return fmt.Errorf("attaching XDP (native) to %s: %w (the driver must support native XDP)", dev, err)
	}
	l.later("detach XDP from "+dev, lk.Close)
	return nil
}

// udpFrame is an Ethernet/IPv4/UDP frame src -> dst:9 with 64 bytes of
// payload; the IPv4 checksum is set, the UDP one left 0 (allowed).
func udpFrame(dstMAC, srcMAC net.HardwareAddr, src, dst netip.Addr) []byte {
	const payload = 64
	b := make([]byte, 14+20+8+payload)
	copy(b[0:6], dstMAC)
	copy(b[6:12], srcMAC)
	binary.BigEndian.PutUint16(b[12:], 0x0800)
	ip := b[14:34]
	ip[0], ip[8], ip[9] = 0x45, 64, 17 // version/IHL, TTL, UDP
	binary.BigEndian.PutUint16(ip[2:], uint16(20+8+payload))
	binary.BigEndian.PutUint16(ip[6:], 0x4000) // DF
	s4, d4 := src.As4(), dst.As4()
	copy(ip[12:16], s4[:])
	copy(ip[16:20], d4[:])
	binary.BigEndian.PutUint16(ip[10:], ipChecksum(ip))
	udp := b[34:42]
	binary.BigEndian.PutUint16(udp[0:], discardPort)
	binary.BigEndian.PutUint16(udp[2:], discardPort)
	binary.BigEndian.PutUint16(udp[4:], 8+payload)
	return b
}

func ipChecksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(h); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}
