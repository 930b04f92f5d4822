// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"errors"
	"testing"
)

// BPF_PROG_RUN refuses a frame shorter than an Ethernet header with a bare
// EINVAL; Explain says what is wrong instead.
func TestExplainRefusesShortFrames(t *testing.T) {
	e := newTestEnv(t)
	for _, n := range []int{0, 1, 13} {
		_, err := e.dp.Explain(make([]byte, n), 0)
		if !errors.Is(err, ErrShortFrame) {
			t.Errorf("%d-byte frame: %v, want ErrShortFrame", n, err)
		}
	}
}
