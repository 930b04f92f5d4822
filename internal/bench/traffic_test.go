// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"testing"
	"time"
)

// TestPacerSlipsRatherThanBursts: on schedule the pacer sends the rate in
// chunks of ~2 ms; after the thread was held back 50 ms it sends at most
// two chunks at once, then waits again (no line-rate catch-up burst).
func TestPacerSlipsRatherThanBursts(t *testing.T) {
	p := pacer{rate: 75000}
	total := 0
	for ms := 1; ms <= 1000; ms++ {
		n, _ := p.next(time.Duration(ms) * time.Millisecond)
		total += n
	}
	if total < 75000-150 || total > 75000 {
		t.Fatalf("on schedule: %d frames in 1 s at 75 kpps", total)
	}
	burst := 0
	for {
		n, wait := p.next(1050 * time.Millisecond)
		if n == 0 {
			if wait <= 0 {
				t.Fatalf("nothing to send and no wait")
			}
			break
		}
		burst += n
	}
	if burst > 2*150 {
		t.Fatalf("after a 50 ms stall the pacer sent %d frames at once, want at most two 2 ms chunks (300)", burst)
	}
	if n, _ := (&pacer{}).next(time.Second); n != maxChunk {
		t.Fatalf("rate 0 (as fast as possible): chunk %d, want %d", n, maxChunk)
	}
}
