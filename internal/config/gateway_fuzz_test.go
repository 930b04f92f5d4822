// SPDX-License-Identifier: Apache-2.0

package config

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// FuzzParseGateway checks that no input makes ParseGateway panic, and that
// what it returns keeps its promises: either a Gateway that satisfies every
// rule, or a *ValidationErrors of single-line messages sorted by line.
//
// The normal test run executes the seed corpus only. To fuzz:
//
//	go test -run '^$' -fuzz FuzzParseGateway -fuzztime 20s ./internal/config/
func FuzzParseGateway(f *testing.F) {
	f.Add([]byte(fullExample))
	for _, tc := range errorCases {
		f.Add([]byte(tc.in))
	}
	if data, err := os.ReadFile(filepath.Join("..", "..", "docs", "gateway-config.md")); err == nil {
		for _, block := range bytes.Split(data, []byte("```yaml\n"))[1:] {
			if end := bytes.Index(block, []byte("```")); end >= 0 {
				f.Add(block[:end])
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := ParseGateway(data, "fuzz.yaml")
		if err != nil {
			checkErrors(t, data, g, err)
			return
		}
		checkGateway(t, g)
	})
}

func checkErrors(t *testing.T, data []byte, g *Gateway, err error) {
	t.Helper()
	if g != nil {
		t.Fatalf("got a Gateway and an error")
	}
	var ve *ValidationErrors
	if !errors.As(err, &ve) || len(ve.Errors) == 0 {
		t.Fatalf("error %T %v is not a non-empty *ValidationErrors", err, err)
	}
	// YAML also breaks lines at \r, NEL, LS and PS.
	maxLine := 2
	for _, br := range []string{"\n", "\r", "\u0085", "\u2028", "\u2029"} {
		maxLine += bytes.Count(data, []byte(br))
	}
	for i, e := range ve.Errors {
		if e.File != "fuzz.yaml" || e.Msg == "" || e.Line < 1 || e.Line > maxLine {
			t.Errorf("bad error %+v (file has %d lines)", e, maxLine-1)
		}
		if i > 0 && e.Line < ve.Errors[i-1].Line {
			t.Errorf("errors not sorted by line: %d after %d", e.Line, ve.Errors[i-1].Line)
		}
		if strings.ContainsAny(e.Error(), "\n\r") {
			t.Errorf("message spans lines: %q", e.Error())
		}
	}
	if n := strings.Count(err.Error(), "\n") + 1; n != len(ve.Errors) {
		t.Errorf("Error() has %d lines for %d errors", n, len(ve.Errors))
	}
}

// checkGateway asserts the rules on an accepted configuration.
func checkGateway(t *testing.T, g *Gateway) {
	t.Helper()
	if g.PolicySource != PolicySourceKernel && g.PolicySource != PolicySourceStatic {
		t.Fatalf("policy-source %q", g.PolicySource)
	}
	if g.PolicySource == PolicySourceStatic && !g.Lab {
		t.Fatalf("static policies without lab")
	}
	if g.PolicySource == PolicySourceKernel && len(g.Policies) > 0 {
		t.Fatalf("policies with policy-source kernel")
	}
	if g.Lease < MinLease || g.Lease > MaxLease {
		t.Fatalf("lease %v", g.Lease)
	}
	if !filepath.IsAbs(g.PinDir) {
		t.Fatalf("pin-dir %q", g.PinDir)
	}
	if len(g.Interfaces) == 0 {
		t.Fatalf("no interfaces")
	}
	var names []string
	for _, i := range g.Interfaces {
		if ifnameProblem(i.Name) != "" || slices.Contains(names, i.Name) {
			t.Fatalf("interface name %q (names so far %q)", i.Name, names)
		}
		names = append(names, i.Name)
		if (i.L2 != L2NIC && i.L2 != L2FIB) || (i.XDPMode != XDPNative && i.XDPMode != XDPGeneric) ||
			(i.Inbound != InboundPass && i.Inbound != InboundForward) ||
			(i.WANAntispoof != AntispoofNone && i.WANAntispoof != AntispoofUpstream) {
			t.Fatalf("interface %+v has an invalid enum", i)
		}
		if i.Inbound == InboundForward && i.WANAntispoof != AntispoofUpstream {
			t.Fatalf("inbound forward without wan-antispoof upstream: %+v", i)
		}
		if i.HairpinToNexthop.IsValid() && i.Inbound != InboundForward {
			t.Fatalf("hairpin without inbound forward: %+v", i)
		}
		if i.Line < 1 {
			t.Fatalf("interface line %d", i.Line)
		}
	}
	for _, p := range g.Policies {
		if p.Dir != DirIn && p.Dir != DirOut && p.Dir != DirFwd {
			t.Fatalf("policy dir %q", p.Dir)
		}
		if !p.Src.IsValid() || !p.Dst.IsValid() || p.Src.Addr().Is4() != p.Dst.Addr().Is4() || p.Src != p.Src.Masked() || p.Dst != p.Dst.Masked() {
			t.Fatalf("policy selector %s -> %s", p.Src, p.Dst)
		}
		if (p.Sport != 0 || p.Dport != 0) && !p.Proto.HasPorts() {
			t.Fatalf("ports on %s", p.Proto)
		}
		switch p.Action {
		case ActionAllow:
			if !p.Peer.IsValid() || !p.Local.IsValid() || p.Peer.Is4() != p.Src.Addr().Is4() || p.Local.Is4() != p.Src.Addr().Is4() {
				t.Fatalf("allow policy tunnel %s -> %s for %s", p.Local, p.Peer, p.Src)
			}
		case ActionBlock:
			if p.Peer.IsValid() || p.Local.IsValid() {
				t.Fatalf("block policy with a tunnel")
			}
		default:
			t.Fatalf("policy action %q", p.Action)
		}
		switch p.Offload {
		case OffloadPacket:
			if p.Dir == DirFwd || !slices.Contains(names, p.OffloadDev) {
				t.Fatalf("packet offload on %q for dir %s", p.OffloadDev, p.Dir)
			}
		case OffloadNone:
			if p.OffloadDev != "" {
				t.Fatalf("offload-dev without packet offload")
			}
		default:
			t.Fatalf("policy offload %q", p.Offload)
		}
	}
}
