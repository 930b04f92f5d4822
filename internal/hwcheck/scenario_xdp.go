// SPDX-License-Identifier: Apache-2.0

package hwcheck

import (
	"context"
	"fmt"

	"sluice/internal/driverquirk"
	"sluice/internal/wire"
)

// Two scenarios on frames XDP redirects into the port (ndo_xdp_xmit),
// as the gateway's fast path sends them: no kernel xfrm has seen them,
// so only the device's IPsec tables can encrypt them.

// Whether ndo_xdp_xmit frames meet the IPsec tables at all: the gateway
// forwards over XDP into packet-offload ports on that assumption, and
// the model's TX stage takes them (kmod/nicmodel/README.md, "The data
// path"); no mlx5 source read by sluice settles it for the XDP send
// queues, and the driver table has no row for it.
var xdpXmitScenario = scenario{
	name: "xdp-xmit-encrypted",
	assumption: expectation{
		behaviour: "xdp-xmit-meets-ipsec-tables",
		shows:     true,
		source:    "kmod/nicmodel/README.md (the TX stage takes ndo_xdp_xmit frames); unverified on mlx5",
	},
	outcomes: outcomes{
		yes: "ESP: redirected frames met the IPsec tables",
		no:  "cleartext: redirected frames bypassed the IPsec tables",
	},
	run: runXDPXmit,
}

// An SA deleted under XDP redirect (row 2): the OUT policy stays, its SA
// goes, the redirected frames keep coming. mlx5 in 6.12 has no miss rule
// in the TX SA table outside switchdev (ipsec_fs.c tx_create): they
// leave in cleartext. A device with the miss rule drops them.
var saDeletedScenario = scenario{
	name:      "sa-deleted-under-xdp",
	behaviour: driverquirk.NoTXMissRule,
	outcomes: outcomes{
		yes: "cleartext: frames of a policy without its SA left unencrypted",
		no:  "nothing: frames of a policy without its SA were dropped",
	},
	run: runSADeleted,
}

const xdpSPI, xdpReqid = 0x5201, 201

// xdpTunnel installs the offloaded OUT SA and policy for the XDP flow.
func (l *lab) xdpTunnel(u *undoList) (*xdpPath, error) {
	p, err := l.xdpPath()
	if err != nil {
		return nil, err
	}
	if err := l.addSA(u, true, sa{spi: xdpSPI, reqid: xdpReqid, out: true, offload: true, key: newKey()}); err != nil {
		return nil, err
	}
	err = l.addPolicy(u, true, policy{src: hostPrefix(xdpSrc), dst: hostPrefix(xdpDst), out: true, reqid: xdpReqid, offload: true})
	return p, err
}

// sendXDP sends frames through the redirect and returns what the peer
// got of the flow: cleartext and ESP of the SA.
func (l *lab) sendXDP(ctx context.Context, p *xdpPath, frames int) (clear, esp int, err error) {
	got, err := l.captureWhile(func() error { return p.send(ctx, frames) })
	if err != nil {
		return 0, 0, err
	}
	return wire.Tally(got, flowOf(xdpSrc, xdpDst))[wire.Cleartext], len(espOf(got, xdpSPI)), nil
}

func runXDPXmit(ctx context.Context, l *lab, frames int) measurement {
	var u undoList
	defer l.undoScenario(&u)
	p, err := l.xdpTunnel(&u)
	if err != nil {
		return setupFailed(err)
	}
	clear, esp, err := l.sendXDP(ctx, p, frames)
	if err != nil {
		return setupFailed(err)
	}
	ev := fmt.Sprintf("%d frames %s -> %s redirected into %s: %d ESP (spi %#x), %d cleartext on %s", frames, xdpSrc, xdpDst, l.port, esp, xdpSPI, clear, l.peer)
	// Here ESP shows the behaviour (the frames met the tables).
	return verdictOf(esp, clear, frames, ev)
}

func runSADeleted(ctx context.Context, l *lab, frames int) measurement {
	var u undoList
	defer l.undoScenario(&u)
	p, err := l.xdpTunnel(&u)
	if err != nil {
		return setupFailed(err)
	}
	// First with the SA: redirected frames must leave as ESP, or the
	// deletion cannot be told from a path that never encrypts.
	clear, esp, err := l.sendXDP(ctx, p, frames)
	if err != nil {
		return setupFailed(err)
	}
	before := fmt.Sprintf("with the SA: %d ESP, %d cleartext", esp, clear)
	if esp*2 < frames || clear > 0 {
		return inconclusive("redirected frames did not leave as ESP while the SA was there (see xdp-xmit-encrypted)", before)
	}
	if err := l.inA(func() error { return deleteSA(linkB, xdpSPI) }); err != nil {
		return setupFailed(err)
	}
	clear, esp, err = l.sendXDP(ctx, p, frames)
	if err != nil {
		return setupFailed(err)
	}
	ev := fmt.Sprintf("%s; SA spi %#x deleted, policy kept, %d frames: %d ESP, %d cleartext on %s", before, xdpSPI, frames, esp, clear, l.peer)
	switch {
	case clear*2 >= frames && esp == 0:
		return showed(true, ev)
	case clear == 0 && esp == 0:
		return showed(false, ev)
	default:
		return inconclusive("frames after the deletion were neither all dropped nor mostly cleartext", ev)
	}
}
