// SPDX-License-Identifier: Apache-2.0

package flower

import (
	"strings"
	"testing"
	"time"
)

func TestPlacementHysteresis(t *testing.T) {
	p := &Placement{PromotePPS: 1000, DemotePPS: 100, PromoteAfter: 3, DemoteAfter: 4, Interval: time.Second}
	var pk uint64
	tick := func(pps uint64, room bool) bool {
		pk += pps
		return p.Observe(7, pk, time.Second, room)
	}
	tick(0, true) // first sight: no rate
	if on, _ := p.OnFlower(7); on {
		t.Fatal("a new tunnel starts on XDP")
	}
	// Two steady intervals, a dip, then three: promoted on the third.
	for i, pps := range []uint64{2000, 2000, 500, 2000, 2000} {
		if tick(pps, true) {
			t.Fatalf("promoted too early at interval %d", i)
		}
	}
	if !tick(2000, true) || p.Promotions != 1 {
		t.Fatal("not promoted after three steady intervals")
	}
	// The rule's counter starts from zero: the first reading sets a base.
	pk = 0
	tick(0, true)
	// Between the thresholds nothing moves; below DemotePPS four times in a row demotes.
	for _, pps := range []uint64{500, 500, 50, 50, 50} {
		if tick(pps, true) {
			t.Fatal("demoted too early")
		}
	}
	if !tick(50, true) || p.Demoted != 1 {
		t.Fatal("not demoted after four idle intervals")
	}
	// No room in the budget: steady traffic stays on XDP.
	pk = 0
	tick(0, false)
	for i := 0; i < 5; i++ {
		if tick(5000, false) {
			t.Fatal("promoted without room")
		}
	}
	if _, why := p.OnFlower(7); !strings.Contains(why, "waiting for room in the device's rule budget") {
		t.Fatalf("a steady tunnel without room says %q", why)
	}
	if !tick(5000, true) {
		t.Fatal("not promoted once room appeared")
	}
}
