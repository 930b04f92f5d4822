// SPDX-License-Identifier: Apache-2.0

package hwcheck

import (
	"context"
	"fmt"

	"sluice/internal/driverquirk"
)

// A carried oseq (row 7): an OUT SA added with the sequence number an SA
// it replaces reached (oseq 0x1000, as sluice moves SAs at a bond
// failover), ESN off. mlx5 in 6.12 starts a non-ESN SA at 1 whatever
// oseq says (mlx5e_xfrm_add_state: esn_state.esn = 1): the peer, whose
// window is past 1, drops the packets, and the key's GCM nonces repeat.
var oseqScenario = scenario{
	name:      "carried-oseq",
	behaviour: driverquirk.SeqRestartsAtOne,
	outcomes: outcomes{
		yes: "sequence 1: the carried oseq was ignored",
		no:  fmt.Sprintf("sequence %d: the carried oseq was honoured", oseqCarried+1),
	},
	run: runOseq,
}

const (
	oseqSPI, oseqReqid = 0x5501, 501
	oseqCarried        = 0x1000
)

func runOseq(ctx context.Context, l *lab, frames int) measurement {
	var u undoList
	defer l.undoScenario(&u)
	if err := l.addSA(&u, true, sa{spi: oseqSPI, reqid: oseqReqid, out: true, offload: true, oseq: oseqCarried, key: newKey()}); err != nil {
		return setupFailed(err)
	}
	// Host to host: an exact selector, so the subnet row cannot interfere.
	if err := l.addPolicy(&u, true, policy{src: hostPrefix(innerA), dst: hostPrefix(innerB), out: true, reqid: oseqReqid, offload: true}); err != nil {
		return setupFailed(err)
	}
	got, err := l.sendAndCapture(ctx, frames)
	if err != nil {
		return setupFailed(err)
	}
	esp := espOf(got, oseqSPI)
	if len(esp) == 0 {
		return inconclusive("no ESP of the SA reached the peer", fmt.Sprintf("%d datagrams sent, none arrived as ESP spi %#x", frames, oseqSPI))
	}
	first := esp[0].Seq
	ev := fmt.Sprintf("SA added with oseq %d, ESN off: first ESP sequence number on %s: %d (%d ESP frames)", oseqCarried, l.peer, first, len(esp))
	switch first {
	case 1:
		return showed(true, ev)
	case oseqCarried + 1:
		return showed(false, ev)
	default:
		return inconclusive("the first sequence number is neither 1 nor oseq + 1", ev)
	}
}
