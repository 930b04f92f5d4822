// SPDX-License-Identifier: Apache-2.0

package swan

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sluice/internal/testutil"
)

// needCharon skips when the test cannot run a real charon: it needs root
// (namespaces) and Debian's strongSwan (make setup installs it).
func needCharon(t *testing.T) {
	t.Helper()
	testutil.RequireRoot(t, "charon runs in its own network and mount namespaces")
	for _, p := range []string{CharonBinary, "/usr/sbin/swanctl"} {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("%s is not installed (make setup installs strongSwan)", p)
		}
	}
}

// testNetns makes a network namespace with lo up, deleted at the end.
func testNetns(t *testing.T) string {
	t.Helper()
	name, _ := testutil.NewNetNS(t)
	exec.Command("ip", "-n", name, "link", "set", "lo", "up").Run()
	return name
}

func startTestCharon(t *testing.T, o CharonOptions) *Charon {
	t.Helper()
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	c, err := StartCharon(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Stop()
		if t.Failed() {
			t.Logf("charon log:\n%s", c.LogTail(40))
		}
	})
	return c
}

// checkLoaded compares charon's list-conns and get-shared with the spec:
// exactly the spec's connections, each with its child, addresses,
// identities and traffic selectors, and every secret name.
func checkLoaded(t *testing.T, c *Client, s *Spec) {
	t.Helper()
	conns, err := c.ListConns()
	if err != nil {
		t.Fatal(err)
	}
	want := s.All()
	if len(conns) != len(want) {
		t.Fatalf("charon has %d connections, want %d", len(conns), len(want))
	}
	byName := map[string]Conn{}
	for _, cn := range conns {
		byName[cn.Name] = cn
	}
	bad := 0
	fail := func(f string, a ...any) {
		if bad++; bad <= 5 {
			t.Errorf(f, a...)
		}
	}
	for _, tn := range want {
		cn, ok := byName[tn.Conn]
		if !ok {
			fail("connection %s not loaded", tn.Conn)
			continue
		}
		if !slices.Equal(cn.LocalAddrs, []string{tn.LocalAddr.String()}) || !slices.Equal(cn.RemoteAddrs, []string{tn.RemoteAddr.String()}) {
			fail("%s: addrs %v -> %v, want %s -> %s", tn.Conn, cn.LocalAddrs, cn.RemoteAddrs, tn.LocalAddr, tn.RemoteAddr)
		}
		if !slices.Equal(cn.LocalIDs, []string{tn.LocalID}) || !slices.Equal(cn.RemoteIDs, []string{tn.RemoteID}) || cn.Version != "IKEv2" {
			fail("%s: ids %v/%v version %s, want %s/%s IKEv2", tn.Conn, cn.LocalIDs, cn.RemoteIDs, cn.Version, tn.LocalID, tn.RemoteID)
		}
		if len(cn.Children) != 1 {
			fail("%s: %d children", tn.Conn, len(cn.Children))
			continue
		}
		ch := cn.Children[0]
		if ch.Name != tn.Child || ch.Mode != "TUNNEL" || !slices.Equal(ch.LocalTS, []string{tn.LocalTS.String()}) || !slices.Equal(ch.RemoteTS, []string{tn.RemoteTS.String()}) {
			fail("%s: child %s %s %v === %v, want %s TUNNEL %s === %s", tn.Conn, ch.Name, ch.Mode, ch.LocalTS, ch.RemoteTS, tn.Child, tn.LocalTS, tn.RemoteTS)
		}
	}
	keys, err := c.SharedKeys()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, k := range keys {
		have[k] = true
	}
	for _, tn := range want {
		if !have[tn.Secret] {
			fail("secret %s not loaded", tn.Secret)
		}
	}
	if bad > 0 {
		t.Fatalf("%d mismatches between charon and the spec", bad)
	}
}

// TestGeneratedConfigLoadsIntoCharon is the golden test against strongSwan
// itself: for every topology, role and port and N = 1, 2, 255, 256, 2000,
// `swanctl --load-all` loads the generated files into a real charon 5.9.8,
// and VICI list-conns / get-shared show exactly the expected connection
// and child names, addresses, identities and traffic selectors.
func TestGeneratedConfigLoadsIntoCharon(t *testing.T) {
	needCharon(t)
	// 5.9.8 does not know hw_offload = packet (see TestPacketOffloadNeedsNewerCharon):
	// cover the three values it knows.
	offloads := []string{"no", "crypto", "auto"}
	for vi, v := range variants {
		t.Run(v.name(0)[:len(v.name(0))-2], func(t *testing.T) {
			ch := startTestCharon(t, CharonOptions{NetNS: testNetns(t)})
			cl, err := Connect(context.Background(), ch.URI)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			for _, n := range goldenSizes {
				s := v.spec(n)
				s.HWOffload = offloads[vi%len(offloads)]
				dir := t.TempDir()
				if _, err := Generate(dir, s, nil); err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				out, err := exec.Command("swanctl", "--load-all", "--noprompt", "--file", filepath.Join(dir, ConfFile), "--uri", ch.URI).CombinedOutput()
				if err != nil {
					t.Fatalf("N=%d: swanctl --load-all: %v\n%s", n, err, tail(string(out), 10))
				}
				if want := fmt.Sprintf("successfully loaded %d connections", n); !strings.Contains(string(out), want) {
					t.Fatalf("N=%d: swanctl did not say %q:\n%s", n, want, tail(string(out), 10))
				}
				t.Logf("N=%d: swanctl --load-all %.2fs", n, time.Since(start).Seconds())
				checkLoaded(t, cl, s)
			}
		})
	}
}

func tail(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// TestPacketOffloadNeedsNewerCharon: the seed's hw_offload = packet is
// refused by Debian 12's strongSwan 5.9.8, both by swanctl and through
// sluice's VICI loader, whose error says what to do.
func TestPacketOffloadNeedsNewerCharon(t *testing.T) {
	needCharon(t)
	ch := startTestCharon(t, CharonOptions{NetNS: testNetns(t)})
	s := &Spec{Topology: TopologyTest0, Role: RoleGW0, Tunnels: 1}
	s.Normalize()
	if s.HWOffload != "packet" {
		t.Fatalf("default hw_offload %q, the seed uses packet", s.HWOffload)
	}
	dir := t.TempDir()
	if _, err := Generate(dir, s, nil); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("swanctl", "--load-all", "--noprompt", "--file", filepath.Join(dir, ConfFile), "--uri", ch.URI).CombinedOutput()
	v, _ := exec.Command("swanctl", "--version", "--daemon", "--uri", ch.URI).CombinedOutput()
	if !strings.Contains(string(v), "5.9.8") {
		t.Skipf("charon is not 5.9.8 (%s): this pins 5.9.8's refusal", strings.TrimSpace(string(v)))
	}
	if err == nil || !strings.Contains(string(out), "invalid value for: hw_offload") {
		t.Fatalf("swanctl loaded hw_offload = packet into 5.9.8 (%v):\n%s", err, out)
	}
	_, err = Up(context.Background(), ch.URI, s, NewPSK(), UpOptions{})
	if err == nil || !strings.Contains(err.Error(), "--hw-offload crypto, auto or no") {
		t.Fatalf("Up with packet offload on 5.9.8: %v", err)
	}
}
