// SPDX-License-Identifier: Apache-2.0

package lab

import (
	"strings"
	"testing"
)

// gateway-model's spec: sluice forwards unless told otherwise, one tunnel,
// no xdp-redirect (its hops would bypass the model's SAs).
func TestGatewayModelSpec(t *testing.T) {
	s := Spec{Topology: GatewayModel}
	if err := s.Validate(); err != nil || s.Forwarder != FwdSluice || s.Tunnels != 1 {
		t.Errorf("defaults: %+v, %v; want forwarder sluice, 1 tunnel", s, err)
	}
	for _, bad := range []Spec{
		{Topology: GatewayModel, Tunnels: 2},
		{Topology: GatewayModel, Forwarder: FwdXDPRedirect},
	} {
		if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "gateway-model") {
			t.Errorf("%+v: %v, want refused naming gateway-model", bad, err)
		}
	}
	k := Spec{Topology: GatewayModel, Forwarder: FwdKernel}
	if err := k.Validate(); err != nil {
		t.Errorf("--forwarder kernel: %v", err)
	}
	p, err := buildPlan(s)
	if err != nil || !p.model || p.target != ModelTarget || len(p.hops) != 1 || p.hops[0].Out != ModelPort {
		t.Errorf("plan: %+v, %v", p, err)
	}
}
