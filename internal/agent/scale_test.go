// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"sluice/internal/fleet"
	"sluice/internal/fleet/kubetest"
	"sluice/internal/fleet/v1alpha1"
)

// TestFleetScale measures one agent's view of a fleet without a data
// path: N Host objects in a real API server, one agent's watch cache,
// its render time, its memory and the watch traffic it receives. It is a
// measurement, not a pass/fail test: it runs only with SLUICE_FLEET_SCALE
// (a comma-separated list of N) and logs the numbers docs/benchmarks.md
// records:
//
//	SLUICE_FLEET_SCALE=100,1000 go test -count=1 -v -run TestFleetScale ./internal/agent/
func TestFleetScale(t *testing.T) {
	env := os.Getenv("SLUICE_FLEET_SCALE")
	if env == "" {
		t.Skip("a measurement: set SLUICE_FLEET_SCALE=100,1000 (docs/benchmarks.md)")
	}
	for _, f := range strings.Split(env, ",") {
		n, err := strconv.Atoi(f)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(fmt.Sprint(n), func(t *testing.T) { scale(t, n) })
	}
}

type countingRT struct {
	rt    http.RoundTripper
	bytes *atomic.Int64
}

type countingBody struct {
	io.ReadCloser
	bytes *atomic.Int64
}

func (b countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.bytes.Add(int64(n))
	return n, err
}

func (c countingRT) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.rt.RoundTrip(r)
	if resp != nil {
		resp.Body = countingBody{resp.Body, c.bytes}
	}
	return resp, err
}

func heap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func scale(t *testing.T, n int) {
	s := kubetest.Need(t)
	admin := s.Install(t, "../..")
	ctx := context.Background()
	hosts := admin.Resource(v1alpha1.HostsResource).Namespace("sluice-system")
	ov := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "fleet.sluice.dev/v1alpha1", "kind": "Overlay",
		"metadata": map[string]any{"name": "prod", "namespace": "sluice-system"},
		"spec": map[string]any{"members": map[string]any{"matchLabels": map[string]any{"sluice.dev/overlay": "prod"}},
			"segments": []any{map[string]any{"name": "t1", "vni": int64(100)}}, "keying": map[string]any{"mode": "ike"}, "vtepPool": "10.0.0.0/8"}}}
	if _, err := admin.Resource(v1alpha1.OverlaysResource).Namespace("sluice-system").Create(ctx, ov, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mk := func(i int) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "fleet.sluice.dev/v1alpha1", "kind": "Host",
			"metadata": map[string]any{"name": fmt.Sprintf("hv-%04d", i), "namespace": "sluice-system", "labels": map[string]any{"sluice.dev/overlay": "prod"}},
			"spec": map[string]any{"vtep": fmt.Sprintf("10.%d.%d.%d", 100+i/65536, (i/256)%256, i%256),
				"underlay": map[string]any{"address": fmt.Sprintf("172.%d.%d.%d/12", 16+i/65536, (i/256)%256, i%256), "interface": "bond0"}}}}
	}
	parallel := func(count int, f func(i int) error) time.Duration {
		start := time.Now()
		var wg sync.WaitGroup
		ch := make(chan int)
		var firstErr atomic.Value
		for w := 0; w < 16; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range ch {
					if err := f(i); err != nil {
						firstErr.CompareAndSwap(nil, err)
					}
				}
			}()
		}
		for i := 0; i < count; i++ {
			ch <- i
		}
		close(ch)
		wg.Wait()
		if e := firstErr.Load(); e != nil {
			t.Fatal(e)
		}
		return time.Since(start)
	}
	created := parallel(n, func(i int) error { _, err := hosts.Create(ctx, mk(i), metav1.CreateOptions{}); return err })
	// The agent of hv-0000: its own watch connection, counted.
	var bytes atomic.Int64
	cfg := s.Config("admin")
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return countingRT{rt, &bytes} }
	h0 := heap()
	src, err := newKubeSource(cfg, "sluice-system", 0, func() {})
	if err != nil {
		t.Fatal(err)
	}
	c, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	if !src.start(c) {
		t.Fatal("no sync")
	}
	syncT := time.Since(start)
	h1 := heap()
	listBytes := bytes.Load()
	ovs, hs := src.snapshot()
	const rounds = 20
	start = time.Now()
	var d fleet.Desired
	for r := 0; r < rounds; r++ {
		d = fleet.Render("hv-0000", ovs, hs, fleet.Local{Name: "hv-0000", CA: "/etc/sluice/ca.pem", Cert: "/etc/sluice/h.pem", PrivKey: "/etc/sluice/h.key"})
	}
	render := time.Since(start) / rounds
	if d.Refused || len(d.Peers) != n-1 {
		t.Fatalf("render: refused %v, %d peers: %v", d.Refused, len(d.Peers), d.Problems)
	}
	start = time.Now()
	for r := 0; r < rounds; r++ {
		_, _ = src.snapshot()
	}
	snap := time.Since(start) / rounds
	// Every host writes its status once (what N agents do after a change
	// that touches all of them): the traffic one agent receives.
	ev0, b0 := src.events.Load(), bytes.Load()
	status := map[string]any{"lastApply": map[string]any{"time": "2026-11-25T12:00:00Z", "result": "Applied", "steps": int64(7), "digest": "0123456789ab"},
		"tunnels": []any{map[string]any{"peer": "hv-0001", "vtep": "10.100.0.1", "state": "Up"}}}
	statusT := parallel(n, func(i int) error {
		u := mk(i)
		cur, err := hosts.Get(ctx, u.GetName(), metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Object["status"] = status
		_, err = hosts.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	waitEvents := func(want int64) {
		deadline := time.Now().Add(60 * time.Second)
		for src.events.Load() < want && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitEvents(ev0 + int64(n))
	time.Sleep(500 * time.Millisecond)
	statusEv, statusB := src.events.Load()-ev0, bytes.Load()-b0
	// One host joins.
	ev0, b0 = src.events.Load(), bytes.Load()
	if _, err := hosts.Create(ctx, mk(n), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitEvents(ev0 + 1)
	time.Sleep(300 * time.Millisecond)
	joinEv, joinB := src.events.Load()-ev0, bytes.Load()-b0
	h2 := heap()
	// IKE initiation slots of the N-host mesh over the default 30 s window.
	perSec := make([]int, 30)
	pairs := 0
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("hv-%04d", i)
	}
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			perSec[fleet.Slot(names[i], names[j], 30*time.Second)/time.Second]++
			pairs++
		}
	}
	maxSec := 0
	for _, c := range perSec {
		maxSec = max(maxSec, c)
	}
	t.Logf("| %d hosts | create %v | agent list+sync %v, %d KiB | cache heap %d KiB (%d after updates) | snapshot %v | render %v (doc %d B) | all N statuses once: %d events, %d KiB | one join: %d events, %d B | writes %v | IKE pairs %d, max %d/s (mean %d/s) over 30 s |",
		n, created.Round(time.Millisecond), syncT.Round(time.Millisecond), listBytes>>10, (int64(h1)-int64(h0))>>10, (int64(h2)-int64(h0))>>10,
		snap.Round(time.Microsecond), render.Round(time.Microsecond), len(d.Doc), statusEv, statusB>>10, joinEv, joinB, statusT.Round(time.Millisecond),
		pairs, maxSec, pairs/30)
}
