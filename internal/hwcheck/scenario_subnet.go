// SPDX-License-Identifier: Apache-2.0

package hwcheck

import (
	"context"
	"fmt"

	"sluice/internal/driverquirk"
	"sluice/internal/wire"
)

// A subnet-selector tunnel (row 1 of issue 31): an offloaded OUT policy
// 10.71.0.0/16 -> 10.72.0.0/16 and its SA; the port's host sends from
// 10.71.0.1 to 10.72.0.1, hosts of the subnets but not their network
// addresses. mlx5 in 6.12 matches the selector's addresses exactly
// (setup_fte_addr4), so the datagrams miss the device's policy table and
// leave in cleartext; with the subnet fix they leave as ESP.
var subnetScenario = scenario{
	name:      "subnet-selector",
	behaviour: driverquirk.ExactSelectorMatch,
	outcomes: outcomes{
		yes: "cleartext: the /16 selector matched its network address only",
		no:  "ESP: the /16 selector matched the subnet",
	},
	run: runSubnet,
}

const subnetSPI, subnetReqid = 0x5101, 101

func runSubnet(ctx context.Context, l *lab, frames int) measurement {
	var u undoList
	defer l.undoScenario(&u)
	key := newKey()
	if err := l.addSA(&u, true, sa{spi: subnetSPI, reqid: subnetReqid, out: true, offload: true, key: key}); err != nil {
		return setupFailed(err)
	}
	if err := l.addPolicy(&u, true, policy{src: netA, dst: netB, out: true, reqid: subnetReqid, offload: true}); err != nil {
		return setupFailed(err)
	}
	got, err := l.sendAndCapture(ctx, frames)
	if err != nil {
		return setupFailed(err)
	}
	clear := wire.Tally(got, flowOf(innerA, innerB))[wire.Cleartext]
	esp := espOf(got, subnetSPI)
	ev := fmt.Sprintf("%d datagrams %s -> %s: %d ESP (spi %#x), %d cleartext on %s", frames, innerA, innerB, len(esp), subnetSPI, clear, l.peer)
	return verdictOf(clear, len(esp), frames, ev)
}

// espOf is the ESP frames of one SPI.
func espOf(frames []wire.Frame, spi uint32) []wire.Frame {
	var out []wire.Frame
	for _, f := range frames {
		if f.Class == wire.ESP && f.SPI == spi {
			out = append(out, f)
		}
	}
	return out
}

// verdictOf reads a transmit scenario where cleartext shows the
// behaviour and ESP refutes it: frames of one kind only, at least
// decisive of them (a single frame could be a stray). Fewer than sent
// may arrive, which the evidence shows.
func verdictOf(clear, esp, sent int, evidence string) measurement {
	decisive := min(2, sent)
	switch {
	case clear >= decisive && esp == 0:
		return showed(true, evidence)
	case esp >= decisive && clear == 0:
		return showed(false, evidence)
	case clear > 0 && esp > 0:
		return inconclusive("some frames left as ESP and some in cleartext", evidence)
	default:
		return inconclusive("too few frames reached the peer to tell", evidence)
	}
}

// setupFailed: the kernel or the port refused the scenario's set-up (or
// the run was interrupted), so it measured nothing. That fails the run:
// "not run" is for what the run lacks (more ports), not for a refusal.
func setupFailed(err error) measurement { return inconclusive("could not set up: "+err.Error(), "") }

// undoScenario removes a scenario's SAs and policies; what cannot be
// removed is reported, the namespaces' end removes it anyway.
func (l *lab) undoScenario(u *undoList) {
	if err := u.run(); err != nil {
		fmt.Fprintf(l.log, "  cleaning up the scenario: %v\n", err)
	}
}
