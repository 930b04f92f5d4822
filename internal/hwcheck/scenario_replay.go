// SPDX-License-Identifier: Apache-2.0

package hwcheck

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"sluice/internal/driverquirk"
	"sluice/internal/wire"
)

// Non-ESN replay (row 7): the port decrypts an inbound SA, ESN off,
// replay window 32. The peer's kernel encrypts one datagram in software;
// the run sends that same ESP frame twice more. mlx5 in 6.12 programs
// the replay window only for ESN SAs (mlx5e_ipsec_build_accel_xfrm_attrs)
// and the kernel does not check packet-offloaded SAs itself: the port's
// host receives the datagram three times. A device with a window
// delivers it once.
var replayScenario = scenario{
	name:      "non-esn-replay",
	behaviour: driverquirk.NoReplayWithoutESN,
	outcomes: outcomes{
		yes: "replays delivered: no anti-replay without ESN",
		no:  "replays dropped: the window holds without ESN",
	},
	run: runReplay,
}

const (
	replaySPI, replayReqid = 0x5401, 401
	replays                = 2
)

func runReplay(ctx context.Context, l *lab, _ int) measurement {
	var u undoList
	defer l.undoScenario(&u)
	key := newKey()
	// A decrypts in the device; B encrypts in software (its port holds no
	// SA, so the frame leaves B as its kernel built it).
	if err := l.addSA(&u, true, sa{spi: replaySPI, reqid: replayReqid, offload: true, window: 32, key: key}); err != nil {
		return setupFailed(err)
	}
	if err := l.addPolicy(&u, true, policy{src: hostPrefix(innerB), dst: hostPrefix(innerA), reqid: replayReqid, offload: true}); err != nil {
		return setupFailed(err)
	}
	if err := l.addSA(&u, false, sa{spi: replaySPI, reqid: replayReqid, window: 32, key: key}); err != nil {
		return setupFailed(err)
	}
	if err := l.addPolicy(&u, false, policy{src: hostPrefix(innerB), dst: hostPrefix(innerA), out: true, reqid: replayReqid}); err != nil {
		return setupFailed(err)
	}
	rcv, err := l.listenA()
	if err != nil {
		return setupFailed(err)
	}
	defer rcv.close()
	m, err := l.mark()
	if err != nil {
		return setupFailed(err)
	}
	if err := l.sendUDPTo(ctx, innerB, netip.AddrPortFrom(innerA, recvPort), 1); err != nil {
		return setupFailed(err)
	}
	first := rcv.count()
	frame, err := l.sentESP(m, replaySPI)
	if err != nil {
		return setupFailed(err)
	}
	if first != 1 {
		return inconclusive("the datagram did not arrive decrypted once before the replays", fmt.Sprintf("%s delivered %d of 1", innerA, first))
	}
	err = l.inB(func() error {
		s, err := newRawSender(l.peer)
		if err != nil {
			return err
		}
		defer s.close()
		return s.send(ctx, frame, replays)
	})
	if err != nil {
		return setupFailed(err)
	}
	again := rcv.count()
	ev := fmt.Sprintf("ESP spi %#x seq 1 sent once by %s's kernel and %d times again: %s delivered %d of the %d replays", replaySPI, l.peer, replays, innerA, again, replays)
	switch again {
	case replays:
		return showed(true, ev)
	case 0:
		return showed(false, ev)
	default:
		return inconclusive("some replays were delivered, some not", ev)
	}
}

// sentESP is the first ESP frame of spi the peer sent since m, as sent.
func (l *lab) sentESP(m wire.Mark, spi uint32) ([]byte, error) {
	if _, err := l.cap.Drain(10 * time.Second); err != nil {
		return nil, err
	}
	for _, p := range l.cap.PacketsSince(m) {
		if p.Outgoing && p.Class == wire.ESP && p.SPI == spi && p.VLANs == 0 {
			return p.Bytes, nil
		}
	}
	return nil, fmt.Errorf("%s sent no ESP frame of spi %#x: its kernel did not encrypt the datagram", l.peer, spi)
}
