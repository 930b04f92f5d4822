// SPDX-License-Identifier: Apache-2.0

package config

import (
	"strings"
	"testing"
	"time"
)

func TestParseGatewayFlower(t *testing.T) {
	g, err := ParseGateway([]byte(doc(
		"lab: true",
		"flower-test-skip-hw: true",
		"flower-inbound-chain: 7",
		"flower-promote-pps: 20",
		"flower-test-placement-interval: 500ms",
		"interfaces:",
		"  - name: p0",
		"    inbound: forward",
		"    wan-antispoof: upstream",
		"    flower: both",
		"    flower-rule-budget: 100",
		"  - name: p0.502",
		"    flower: outbound",
		"    flower-ttl: false",
	)), "gateway.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !g.FlowerTestSkipHW || g.FlowerInboundChain != 7 {
		t.Errorf("skip_hw %v chain %d, want true 7", g.FlowerTestSkipHW, g.FlowerInboundChain)
	}
	if g.FlowerPromotePPS != 20 || g.FlowerTestPlacementInterval != 500*time.Millisecond {
		t.Errorf("promote %d interval %s, want 20 500ms", g.FlowerPromotePPS, g.FlowerTestPlacementInterval)
	}
	p0, vl := g.Interfaces[0], g.Interfaces[1]
	if p0.Flower != FlowerBoth || !p0.Flower.Inbound() || !p0.Flower.Outbound() || p0.FlowerRuleBudget != 100 || !p0.FlowerTTL {
		t.Errorf("p0: %+v", p0)
	}
	if vl.Flower != FlowerOutbound || vl.Flower.Inbound() || vl.FlowerTTL || vl.FlowerRuleBudget != DefaultFlowerRuleBudget {
		t.Errorf("p0.502: %+v", vl)
	}
}

func TestParseGatewayFlowerErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		doc  string
		want []string
	}{
		{"skip_hw outside a lab", doc("flower-test-skip-hw: true", "interfaces:", "  - name: p0"),
			[]string{"gateway.yaml:1: flower-test-skip-hw: true needs lab: true", "set lab: true"}},
		{"inbound without inbound: forward", ifaceDoc("name: p0", "flower: inbound"),
			[]string{"gateway.yaml:3: interfaces[0].flower: \"inbound\" forwards decrypted traffic", "set inbound: forward"}},
		{"both without inbound: forward", ifaceDoc("name: p0", "flower: both"),
			[]string{"gateway.yaml:3: interfaces[0].flower: \"both\""}},
		{"unknown mode", ifaceDoc("name: p0", "flower: on"), []string{"gateway.yaml:3: interfaces[0].flower:", "use one of off (default), outbound, inbound or both"}},
		{"placement interval outside a lab", doc("flower-promote-pps: 10", "flower-test-placement-interval: 1s", "interfaces:", "  - name: p0"),
			[]string{"gateway.yaml:2: flower-test-placement-interval: needs lab: true"}},
		{"placement interval without placement", doc("lab: true", "flower-test-placement-interval: 1s", "interfaces:", "  - name: p0"),
			[]string{"gateway.yaml:2: flower-test-placement-interval: has no effect without flower-promote-pps"}},
		{"placement interval too short", doc("lab: true", "flower-promote-pps: 10", "flower-test-placement-interval: 1ms", "interfaces:", "  - name: p0"),
			[]string{"gateway.yaml:3: flower-test-placement-interval: \"1ms\" is not a duration from 100ms to 1m0s"}},
		{"placement without counters", doc("counters: false", "flower-promote-pps: 10", "interfaces:", "  - name: p0"),
			[]string{"gateway.yaml:2: flower-promote-pps: needs counters: true"}},
		{"chain out of range", doc("flower-inbound-chain: 70000", "interfaces:", "  - name: p0"), []string{"gateway.yaml:1: flower-inbound-chain:"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseGateway([]byte(tc.doc), "gateway.yaml")
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}
