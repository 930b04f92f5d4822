// SPDX-License-Identifier: Apache-2.0

package api

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"sluice/internal/testutil"
)

// fakeProvider stands in for the daemon: the API layer is plain Go, and
// the daemon side is covered by test/e2e against a real gateway.
type fakeProvider struct{ policies int }

func (f fakeProvider) Status() (*GatewayStatus, error) {
	return &GatewayStatus{Version: "test", PolicySource: "kernel",
		Interfaces: []InterfaceStatus{{Name: "p0", Ifindex: 2, Reasons: map[string]uint64{"forward-out": 7, "no-policy": 3}},
			{Name: "p1", Ifindex: 3, NextHop: &NextHop{Addr: "10.0.0.1", Resolved: true}, Reasons: map[string]uint64{}}},
		Mirror:    MirrorStatus{InSync: true, KernelPolicies: f.policies, MirroredPolicies: f.policies, Resyncs: 2},
		FlowCache: FlowCacheStatus{KeysL4: true, Hits: 40, Fills: 5, Bypassed: 1}}, nil
}

func (f fakeProvider) Policies() ([]PolicyStat, error) {
	var ps []PolicyStat
	for i := 0; i < f.policies; i++ {
		ps = append(ps, PolicyStat{Index: uint32(i+1) << 3, Dir: "out", Packets: uint64(i + 1), Bytes: uint64(100 * (i + 1))})
	}
	return ps, nil
}

func serve(t *testing.T, path string) {
	t.Helper()
	l, err := Listen(path, SocketOptions{UID: -1, GID: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { Serve(ctx, l, Handler(fakeProvider{policies: 3})); close(done) }()
	t.Cleanup(func() { cancel(); <-done; l.Close() })
}

func TestSocketModeOwnerAndRoundTrip(t *testing.T) {
	testutil.RequireRoot(t, "chown to another group")
	path := filepath.Join(t.TempDir(), "run", "sluice.sock")
	l, err := Listen(path, SocketOptions{Mode: 0o660, UID: -1, GID: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	st, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode()&os.ModeSocket == 0 || st.Mode().Perm() != 0o660 || st.Sys().(*syscall.Stat_t).Gid != 100 {
		t.Fatalf("socket mode %v gid %d, want a socket 0660 group 100", st.Mode(), st.Sys().(*syscall.Stat_t).Gid)
	}
	if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 1 {
		t.Fatalf("leftovers beside the socket: %v", entries)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go Serve(ctx, l, Handler(fakeProvider{policies: 3}))
	s, err := NewClient(path).Gateway()
	if err != nil {
		t.Fatal(err)
	}
	if s.Interfaces[0].Reasons["forward-out"] != 7 || !s.Mirror.InSync {
		t.Fatalf("round trip lost data: %+v", s)
	}
	ps, err := NewClient(path).Policies()
	if err != nil || len(ps) != 3 {
		t.Fatalf("policies: %v, %v", ps, err)
	}
}

func TestSecondDaemonRefusesALiveSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.sock")
	serve(t, path)
	_, err := Listen(path, SocketOptions{UID: -1, GID: -1})
	if !errors.Is(err, ErrSocketInUse) {
		t.Fatalf("second Listen: %v, want ErrSocketInUse", err)
	}
	if _, err := NewClient(path).Gateway(); err != nil {
		t.Fatalf("the first daemon must keep serving: %v", err)
	}
}

func TestStaleSocketIsReplaced(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.sock")
	old, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	old.(*net.UnixListener).SetUnlinkOnClose(false)
	old.Close() // a crashed daemon: the name stays, nobody answers
	serve(t, path)
	if _, err := NewClient(path).Gateway(); err != nil {
		t.Fatalf("after replacing a stale socket: %v", err)
	}
}

func TestForeignOrOddFilesAreNotReplaced(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain")
	os.WriteFile(plain, nil, 0o600)
	if _, err := Listen(plain, SocketOptions{UID: -1, GID: -1}); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("regular file at the socket path: %v", err)
	}
	if os.Geteuid() != 0 {
		return
	}
	foreign := filepath.Join(dir, "foreign.sock")
	l, err := net.Listen("unix", foreign)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	os.Lchown(foreign, 65534, 65534)
	if _, err := Listen(foreign, SocketOptions{UID: -1, GID: -1}); err == nil || !strings.Contains(err.Error(), "belongs to uid 65534") {
		t.Fatalf("stale socket owned by nobody: %v", err)
	}
}

func TestClientSaysWhenTheDaemonIsNotRunning(t *testing.T) {
	_, err := NewClient(filepath.Join(t.TempDir(), "none.sock")).Gateway()
	if !errors.Is(err, ErrNotRunning) || !strings.Contains(err.Error(), "sluice gateway run") {
		t.Fatalf("got %v, want ErrNotRunning with the fix", err)
	}
}

func TestMetricsParseAndBoundCardinality(t *testing.T) {
	const n = 120
	srv := httptest.NewServer(MetricsHandler(fakeProvider{policies: n}, 50, Build{Version: "v1", Commit: "abc", GoVersion: "go"}))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("metrics do not parse as Prometheus text: %v", err)
	}
	pol := fams["sluice_policy_packets_total"]
	if pol == nil || len(pol.Metric) != 51 {
		t.Fatalf("policy series: %d, want 50 + other", len(pol.GetMetric()))
	}
	var total, other float64
	for _, m := range pol.Metric {
		total += m.GetCounter().GetValue()
		for _, l := range m.Label {
			if l.GetName() == "policy" && l.GetValue() == "other" {
				other = m.GetCounter().GetValue()
			}
		}
	}
	if want := float64(n * (n + 1) / 2); total != want {
		t.Fatalf("policy packets sum to %v, want %v: aggregation lost counts", total, want)
	}
	if want := float64(70 * 71 / 2); other != want {
		t.Fatalf("other = %v, want the 70 quietest policies' %v", other, want)
	}
	checks := map[string]float64{"sluice_mirror_in_sync": 1, "sluice_mirror_resyncs_total": 2, "sluice_build_info": 1, "sluice_flow_cache_keys_l4": 1}
	for name, want := range checks {
		f := fams[name]
		if f == nil || len(f.Metric) != 1 {
			t.Fatalf("%s missing", name)
		}
		m := f.Metric[0]
		got := m.GetGauge().GetValue() + m.GetCounter().GetValue()
		if got != want {
			t.Fatalf("%s = %v, want %v", name, got, want)
		}
	}
	pk := fams["sluice_fastpath_packets_total"]
	found := false
	for _, m := range pk.GetMetric() {
		labels := fmt.Sprint(m.Label)
		if strings.Contains(labels, `"p0"`) && strings.Contains(labels, `"forward-out"`) && m.GetCounter().GetValue() == 7 {
			found = true
		}
	}
	if !found {
		t.Fatalf("no sluice_fastpath_packets_total{iface=p0,reason=forward-out} 7 in %v", pk)
	}
	cache := map[string]float64{}
	for _, m := range fams["sluice_flow_cache_packets_total"].GetMetric() {
		cache[m.Label[0].GetValue()] = m.GetCounter().GetValue()
	}
	if cache["hit"] != 40 || cache["fill"] != 5 || cache["bypass"] != 1 {
		t.Fatalf("sluice_flow_cache_packets_total by result: %v, want hit 40, fill 5, bypass 1", cache)
	}
}
