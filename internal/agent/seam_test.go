// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"slices"
	"testing"

	"sluice/internal/config"
	"sluice/internal/overlay"
)

// The agent decides on the overlay engine's typed fields, never on its
// display text: these steps and notes are worded unlike anything the
// engine prints, and the agent must decide as it would on the real ones.

func TestGateReadsIKEPeerNotObject(t *testing.T) {
	steps := []overlay.Step{
		{Section: "ipsec", Action: "create", Object: "SA out 10.0.0.1->10.0.0.2 spi 0x1 (IKE SA with b in its text)"},
		{Section: "ipsec", Action: "create", Object: "negotiate with peer b (reworded)", IKEPeer: "b"},
		{Section: "ipsec", Action: "create", Object: "negotiate with peer c (reworded)", IKEPeer: "c"},
	}
	kept, held := gate(steps, func(peer string) bool { return peer == "c" })
	if !slices.Equal(held, []string{"b"}) {
		t.Errorf("held %q, want [b]: the gate must hold the initiation whose IKEPeer is b", held)
	}
	if len(kept) != 2 || kept[0].IKEPeer != "" || kept[1].IKEPeer != "c" {
		t.Errorf("kept %+v, want the SA step and c's initiation", kept)
	}
	if onlyInitiations(&overlay.Plan{Steps: steps}) {
		t.Error("onlyInitiations: true for a plan with an SA step")
	}
	if !onlyInitiations(&overlay.Plan{Steps: steps[1:]}) {
		t.Error("onlyInitiations: false for a plan of initiations only")
	}
}

func TestTruthReadsTypedOffloadNotes(t *testing.T) {
	rep := &overlay.VerifyReport{SAs: []overlay.SAStatus{
		{Peer: "b", Dir: "out", SPI: 0x100, Asked: config.OffloadModeAuto, Got: config.OffloadModeCrypto},
		{Peer: "b", Dir: "in", SPI: 0x200, Asked: config.OffloadModeAuto, Got: config.OffloadModePacket},
	}}
	why := "packet: the driver said no (EOPNOTSUPP)"
	notes := []overlay.OffloadNote{
		{Peer: "b", Dir: "out", SPI: 0x100, Asked: config.OffloadModeAuto, Got: config.OffloadModeCrypto,
			Refused: []string{why}, Text: "a sentence that names no peer and no verdict"},
		{Peer: "b", Dir: "in", SPI: 0x200, Got: config.OffloadModePacket, Text: "b in: refused nothing"},
	}
	got := newTruthTracker().look(rep, notes)
	if len(got) != 2 {
		t.Fatalf("%d SAs, want 2", len(got))
	}
	in, out := got[0], got[1]
	// The SA's own kernel state first (per-SA truth), then the driver's
	// refusal from the typed note.
	wantWhy := []string{"asked auto, the kernel holds crypto", why}
	if !slices.Equal(out.WhyNot, wantWhy) || !out.Fallback {
		t.Errorf("out: whyNot %q fallback %v, want %q true", out.WhyNot, out.Fallback, wantWhy)
	}
	if len(in.WhyNot) != 0 || in.Fallback {
		t.Errorf("in: whyNot %q fallback %v, want none: its note refused nothing", in.WhyNot, in.Fallback)
	}
}
