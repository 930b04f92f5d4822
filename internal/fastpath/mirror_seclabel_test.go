// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"testing"

	"sluice/internal/kernel/xfrm"
)

// What the watch learns about a security context reaches the program: a
// labelled policy, and one whose lookup found it gone (Unconfirmed), are
// uncertain, so their packets go to the kernel.
func TestMirrorLabelledOrUnconfirmedPolicyIsUncertain(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    xfrm.Policy
		want bool
	}{
		{"plain", xfrm.Policy{}, false},
		{"security context", xfrm.Policy{SecCtx: true}, true},
		{"unconfirmed", xfrm.Policy{Unconfirmed: true}, true},
	} {
		v := policyValue(&tc.p, nil, nil)
		if got := v.Flags&flagUncertain != 0; got != tc.want {
			t.Errorf("%s: uncertain=%v, want %v", tc.name, got, tc.want)
		}
	}
}
