// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"sluice/internal/fileread"
	"sluice/internal/fleet"
	"sluice/internal/fleet/kubetest"
	"sluice/internal/fleet/v1alpha1"
)

// TestFleetScaleRealistic measures a fleet of N Hosts with realistic
// objects in a real API server: each Host carries an IKE certificate as
// the runbook issues it, each status is what Agent.status writes for N-1
// peers with their SA pairs, and W agents (their own informers, each on
// its own connection) watch. For one Host status write it reports the
// bytes the API server sends to all watchers and the time until every
// watcher has it, once with the per-peer tunnels in the status and once
// without them; then what one agent restarting into that fleet lists and
// spends per watch event. A measurement, not a pass/fail test: it runs
// only with SLUICE_FLEET_SCALE_REALISTIC (a comma-separated list of N);
// docs/benchmarks.md records the numbers:
//
//	SLUICE_FLEET_SCALE_REALISTIC=100,1000 SLUICE_FLEET_WATCHERS=100 \
//	  go test -count=1 -v -timeout 30m -run TestFleetScaleRealistic ./internal/agent/
//
// SLUICE_FLEET_CHANGES (default 20) is the number of status writes timed
// per kind; SLUICE_FLEET_FILL (default 150s) bounds the time spent giving
// every Host its full status before the restart is measured.
func TestFleetScaleRealistic(t *testing.T) {
	env := os.Getenv("SLUICE_FLEET_SCALE_REALISTIC")
	if env == "" {
		t.Skip("a measurement: set SLUICE_FLEET_SCALE_REALISTIC=100,1000 (docs/benchmarks.md)")
	}
	watchers, changes := envInt(t, "SLUICE_FLEET_WATCHERS", 100), envInt(t, "SLUICE_FLEET_CHANGES", 20)
	fill := 150 * time.Second
	if v := os.Getenv("SLUICE_FLEET_FILL"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("SLUICE_FLEET_FILL=%q: write a duration such as 150s", v)
		}
		fill = d
	}
	for _, f := range strings.Split(env, ",") {
		n, err := strconv.Atoi(f)
		if err != nil || n < 2 {
			t.Fatalf("SLUICE_FLEET_SCALE_REALISTIC: %q is not a host count of at least 2", f)
		}
		t.Run(fmt.Sprint(n), func(t *testing.T) { scaleRealistic(t, n, watchers, changes, fill) })
	}
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: write a positive number", name, v)
	}
	return n
}

func loadavg() string {
	b, _ := fileread.ReadKernel("/proc/loadavg", fileread.ProcLimit)
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// inParallel runs f(0..count-1) on workers goroutines; it stops handing
// out work at the deadline (zero: none) and returns how many ran.
func inParallel(t *testing.T, count, workers int, deadline time.Time, f func(i int) error) int {
	var wg sync.WaitGroup
	var done atomic.Int64
	var firstErr atomic.Value
	ch := make(chan int)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range ch {
				if err := f(i); err != nil {
					firstErr.CompareAndSwap(nil, err)
				}
				done.Add(1)
			}
		}()
	}
	for i := 0; i < count && (deadline.IsZero() || time.Now().Before(deadline)); i++ {
		ch <- i
	}
	close(ch)
	wg.Wait()
	if e := firstErr.Load(); e != nil {
		t.Fatal(e)
	}
	return int(done.Load())
}

func scaleRealistic(t *testing.T, n, nw, k int, fillLimit time.Duration) {
	t.Logf("%d hosts, %d watchers: load average before %s", n, nw, loadavg())
	s := kubetest.Need(t)
	admin := s.Install(t, "../..")
	ctx := context.Background()
	hosts := admin.Resource(v1alpha1.HostsResource).Namespace("sluice-system")
	ov := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "fleet.sluice.dev/v1alpha1", "kind": "Overlay",
		"metadata": map[string]any{"name": "prod", "namespace": "sluice-system"},
		"spec": map[string]any{"members": map[string]any{"matchLabels": map[string]any{"sluice.dev/overlay": "prod"}},
			"segments": []any{map[string]any{"name": "t1", "vni": int64(100)}}, "keying": map[string]any{"mode": "ike"},
			"vtepPool": "10.0.0.0/8", "offload": "prefer-packet"}}}
	if _, err := admin.Resource(v1alpha1.OverlaysResource).Namespace("sluice-system").Create(ctx, ov, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ca, err := newScaleCA()
	if err != nil {
		t.Fatal(err)
	}
	certs := make([]string, n)
	for i := range certs {
		if certs[i], err = ca.issue(scaleName(i)); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	inParallel(t, n, 16, time.Time{}, func(i int) error {
		_, err := hosts.Create(ctx, scaleHost(i, certs[i]), metav1.CreateOptions{FieldManager: "sluice-agent"})
		return err
	})
	created := time.Since(start)
	fullSt, err := scaleStatus(0, n, true)
	if err != nil {
		t.Fatal(err)
	}
	sumSt, err := scaleStatus(0, n, false)
	if err != nil {
		t.Fatal(err)
	}
	fullB, _ := json.Marshal(fullSt)
	sumB, _ := json.Marshal(sumSt)
	t.Logf("objects: certificate %d B of PEM; status %d B with %d peers' tunnels, %d B without; %d Hosts created in %v",
		len(certs[0]), len(fullB), n-1, len(sumB), n, created.Round(time.Millisecond))

	wctx, stopWatchers := context.WithCancel(ctx)
	start = time.Now()
	ws, err := startScaleWatchers(wctx, s, nw)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d watchers synced in %v, %d KiB listed each", nw, time.Since(start).Round(time.Millisecond), wireBytes(ws)/int64(nw)>>10)
	// One write at a time, each on a Host of its own, spread over the
	// fleet: the cost of one change, with nothing else in flight.
	for v, perPeer := range []bool{true, false} {
		label := "status with per-peer tunnels"
		if !perPeer {
			label = "status without tunnels (per-peer detail moved out)"
		}
		if err := measureChanges(ctx, t, hosts, ws, n, k, v, perPeer, label); err != nil {
			t.Fatal(err)
		}
	}
	stopWatchers()
	ws = nil
	agentRestart(ctx, t, s, hosts, n, fillLimit)
	api, etcd := s.RSS()
	t.Logf("server: kube-apiserver %d MiB, etcd %d MiB resident; load average after %s", api>>20, etcd>>20, loadavg())
}

// measureChanges writes k statuses, one after the other, and logs the
// bytes all watchers received per write and how long until each had it.
func measureChanges(ctx context.Context, t *testing.T, hosts dynamic.ResourceInterface, ws []*scaleWatcher, n, k, offset int, perPeer bool, label string) error {
	var objBytes, wire int64
	var writes, toAll, each []time.Duration
	for c := 0; c < k; c++ {
		i := (c*n/k + offset) % n
		st, err := scaleStatus(i, n, perPeer)
		if err != nil {
			return err
		}
		cur, err := hosts.Get(ctx, scaleName(i), metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Object["status"] = st
		w0 := wireBytes(ws)
		start := time.Now()
		upd, err := hosts.UpdateStatus(ctx, cur, metav1.UpdateOptions{FieldManager: "sluice-agent"})
		if err != nil {
			return fmt.Errorf("%s of %s: %w", label, scaleName(i), err)
		}
		writes = append(writes, time.Since(start))
		lat, err := delivered(ws, upd.GetResourceVersion(), start, 2*time.Minute)
		if err != nil {
			return err
		}
		wire += wireBytes(ws) - w0
		b, _ := json.Marshal(upd.Object)
		objBytes += int64(len(b))
		each = append(each, lat...)
		toAll = append(toAll, sortedCopy(lat)[len(lat)-1])
	}
	writes, toAll, each = sortedCopy(writes), sortedCopy(toAll), sortedCopy(each)
	nw := int64(len(ws))
	t.Logf("%s, %d writes: object %d KiB; API bytes per change %d KiB to all %d watchers (%d KiB each); write p50 %v; seen by every watcher p50 %v p99 %v; by one watcher p50 %v p99 %v",
		label, k, objBytes/int64(k)>>10, wire/int64(k)>>10, nw, wire/int64(k)/nw>>10, percentile(writes, 0.5).Round(time.Millisecond),
		percentile(toAll, 0.5).Round(time.Millisecond), percentile(toAll, 0.99).Round(time.Millisecond),
		percentile(each, 0.5).Round(time.Millisecond), percentile(each, 0.99).Round(time.Millisecond))
	return nil
}

// agentRestart gives every Host its full status (as long as fillLimit
// allows, no watchers running) and measures one agent starting into that
// fleet: its list, its cache, and the snapshot and render it runs for
// each watch event.
func agentRestart(ctx context.Context, t *testing.T, s *kubetest.Server, hosts dynamic.ResourceInterface, n int, fillLimit time.Duration) {
	start := time.Now()
	filled := inParallel(t, n, 4, start.Add(fillLimit), func(i int) error {
		st, err := scaleStatus(i, n, true)
		if err != nil {
			return err
		}
		cur, err := hosts.Get(ctx, scaleName(i), metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Object["status"] = st
		_, err = hosts.UpdateStatus(ctx, cur, metav1.UpdateOptions{FieldManager: "sluice-agent"})
		return err
	})
	fillT := time.Since(start)
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
	start = time.Now()
	if !src.start(c) {
		t.Fatal("no sync")
	}
	syncT := time.Since(start)
	h1 := heap()
	const rounds = 5
	start = time.Now()
	var d fleet.Desired
	for r := 0; r < rounds; r++ {
		ovs, hs := src.snapshot()
		d = fleet.Render("hv-0000", ovs, hs, fleet.Local{Name: "hv-0000", CA: "/etc/sluice/ca.pem", Cert: "/etc/sluice/h.pem", PrivKey: "/etc/sluice/h.key"})
	}
	perEvent := time.Since(start) / rounds
	if d.Refused || len(d.Peers) != n-1 {
		t.Fatalf("render: refused %v, %d peers: %v", d.Refused, len(d.Peers), d.Problems)
	}
	t.Logf("agent restart with %d of %d Hosts carrying their full status (filled in %v): list + sync %v, %d KiB read; cache heap %d KiB; snapshot + render per watch event %v",
		filled, n, fillT.Round(time.Millisecond), syncT.Round(time.Millisecond), bytes.Load()>>10, (int64(h1)-int64(h0))>>10, perEvent.Round(time.Millisecond))
}
