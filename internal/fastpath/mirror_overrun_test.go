// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
)

// activeTables reads back the policy table and tuples of the generation
// the program uses now.
func activeTables(t *testing.T, dp *Datapath) (map[fastpathFpPkey]fastpathFpPentry, [2][]fastpathFpTuple) {
	t.Helper()
	cfg, err := dp.config()
	if err != nil {
		t.Fatal(err)
	}
	open := func(outer *ebpf.Map) *ebpf.Map {
		var id uint32
		if err := outer.Lookup(cfg.Gen&1, &id); err != nil {
			t.Fatal(err)
		}
		inner, err := ebpf.NewMapFromID(ebpf.MapID(id))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { inner.Close() })
		return inner
	}
	entries := map[fastpathFpPkey]fastpathFpPentry{}
	var k fastpathFpPkey
	var v fastpathFpPentry
	for it := open(dp.objs.PolicyTables).Iterate(); it.Next(&k, &v); {
		entries[k] = v
	}
	var k4 fastpathFpPkey4 // IPv4 entries, in their own table
	for it := open(dp.objs.PolicyTables4).Iterate(); it.Next(&k4, &v); {
		entries[pkeyOf4(k4)] = v
	}
	var tuples [2][]fastpathFpTuple
	for fam := 0; fam < 2; fam++ {
		for i := 0; i < int(cfg.Ntuples[cfg.Gen&1][fam]); i++ {
			var tu fastpathFpTuple
			if err := dp.objs.Tuples.Lookup(uint32((int(cfg.Gen&1)*2+fam)*MaxTuples+i), &tu); err != nil {
				t.Fatal(err)
			}
			tuples[fam] = append(tuples[fam], tu)
		}
	}
	return entries, tuples
}

// TestMirrorConvergesAfterOverrun stalls the mirror behind a small socket
// buffer while ~50,000 policy adds and deletes hit the kernel, so that the
// kernel overruns the socket (ENOBUFS). The mirror must close at once, and
// open again only with tables equal, entry for entry, to what a kernel dump
// compiles to; status must never say in sync while the program is closed.
func TestMirrorConvergesAfterOverrun(t *testing.T) {
	e := newMirrorEnvBuf(t, 256<<10)
	e.waitFor("empty initial sync", func(s MirrorStatus) bool { return s.KernelPolicies == 0 })

	// One selector shape, so the tuple numbering does not depend on
	// the order policies are compiled in.
	var b strings.Builder
	const adds = 24000
	pol := func(verb string, i int) string {
		return fmt.Sprintf("xfrm policy %s src 10.%d.%d.0/24 dst 172.16.0.0/16 dir out", verb, i/256, i%256)
	}
	for i := 0; i < adds; i++ {
		fmt.Fprintf(&b, "%s priority %d tmpl src 123.0.0.1 dst 123.2.0.1 proto esp mode tunnel\n", pol("add", i), 100+i%5)
	}
	want := 0
	for i := 0; i < adds; i++ {
		switch i % 4 {
		case 0, 1:
			fmt.Fprintln(&b, pol("delete", i))
		case 2: // re-prioritised: an update event for the same index
			fmt.Fprintf(&b, "%s priority 7 tmpl src 123.0.0.1 dst 123.2.0.9 proto esp mode tunnel\n", pol("update", i))
			want++
		default:
			want++
		}
	}
	batch := filepath.Join(t.TempDir(), "burst.batch")
	if err := os.WriteFile(batch, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}

	// Stall the mirror as a SIGSTOP would: its next status update blocks
	// on the lock the test holds, so nobody drains the socket.
	e.mirror.mu.Lock()
	e.ip("-batch", batch)
	time.Sleep(200 * time.Millisecond) // let the first publish reach the lock
	e.mirror.mu.Unlock()

	// Watch status and program from now until the mirror has converged.
	var (
		mu         sync.Mutex
		violations []string
		samples    int
	)
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			default:
			}
			s := e.mirror.Status()
			open, err := e.dp.Open()
			s2 := e.mirror.Status()
			mu.Lock()
			samples++
			// A status read on both sides of the program read, and
			// the same on both, held while the program was read. (The
			// other way round, "closed" while the program is open, is
			// the safe side and happens on the edges: the program
			// opens before the status says so.)
			if err == nil && s.Syncs == s2.Syncs && s.State == s2.State && s.InSync && !open {
				violations = append(violations, fmt.Sprintf("status in_sync=%v state=%s while the program was open=%v", s.InSync, s.State, open))
			}
			mu.Unlock()
			time.Sleep(time.Millisecond)
		}
	}()
	s := e.waitFor("convergence after the overrun", func(s MirrorStatus) bool {
		return s.Resyncs > 0 && s.KernelPolicies == want
	})
	// Whatever the mirror still had queued, it has applied a second on.
	time.Sleep(time.Second)
	close(stop)
	<-sampled
	s = e.mirror.Status()
	t.Logf("%d resyncs, %d verified, %d divergences, %d syncs; %d samples", s.Resyncs, s.Verified, s.Divergences, s.Syncs, samples)
	if len(violations) > 0 {
		t.Fatalf("%d of %d samples disagreed, first: %s", len(violations), samples, violations[0])
	}

	snap, err := e.mirror.Src.Dump()
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Policies) != want {
		t.Fatalf("the kernel holds %d policies, want %d", len(snap.Policies), want)
	}
	tables, err := Compile(snap)
	if err != nil {
		t.Fatal(err)
	}
	entries, tuples := activeTables(t, e.dp)
	if len(entries) != len(tables.Entries) {
		t.Fatalf("the program's table holds %d entries, the kernel's dump compiles to %d", len(entries), len(tables.Entries))
	}
	for k, v := range tables.Entries {
		got, ok := entries[k]
		// Counter slots are Apply's (counterslots.go), not the compiler's:
		// every policy has one, whatever its number.
		for d := range got.Dir {
			if got.Present&(1<<d) != 0 && got.Dir[d].Cslot == 0 {
				t.Fatalf("entry %+v: policy %d has no counter slot", k, got.Dir[d].Index)
			}
			got.Dir[d].Cslot = 0
		}
		if !ok || got != v {
			t.Fatalf("entry %+v: program has %+v (present %v), kernel dump compiles to %+v", k, got, ok, v)
		}
	}
	if !reflect.DeepEqual(tuples[0], tables.Tuples[0]) || len(tuples[1]) != len(tables.Tuples[1]) {
		t.Fatalf("tuples differ: program %+v, kernel %+v", tuples, tables.Tuples)
	}
	if !s.InSync || s.KernelPolicies != want {
		t.Fatalf("a second after converging: %+v", s)
	}
	if s.Verified == 0 {
		t.Fatal("the mirror opened without a verifying dump")
	}
}
