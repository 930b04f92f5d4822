// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/cilium/ebpf"

	"sluice/internal/testutil"
)

// The generator's flow order: all-pairs walks every source for each
// destination; per-client ties source i to destination i mod ndsts, so
// the flow population is the sources alone (seed 002's clients over
// tunnels). Run with BPF_PROG_RUN, reading the addresses of each frame.
func TestGeneratorSpread(t *testing.T) {
	testutil.RequireRoot(t, "loads BPF programs")
	for _, c := range []struct {
		perClient uint32
		want      string
	}{
		{0, "[0>0 1>0 2>0 3>0 4>0 0>1 1>1 2>1 3>1 4>1 0>2 1>2 2>2 3>2 4>2 0>0]"},
		{1, "[0>0 1>1 2>2 3>0 4>1 0>0 1>1 2>2 3>0 4>1 0>0 1>1 2>2 3>0 4>1 0>0]"},
	} {
		var objs genObjects
		if err := loadGenObjects(&objs, nil); err != nil {
			t.Fatal(err)
		}
		var e genGenEntry
		e.FrameLen = 60
		binary.BigEndian.PutUint16(e.Hdr[12:], 0x0800)
		e.Hdr[14] = 0x45
		must := func(err error) {
			if err != nil {
				t.Fatal(err)
			}
		}
		must(objs.GenEntries.Put(uint32(0), e))
		must(objs.GenSched.Put(uint32(0), uint32(0)))
		for i := uint32(0); i < 3; i++ {
			must(objs.GenDsts.Put(i, 0x30000000+i)) // 48.0.0.i
		}
		must(objs.GenCfg.Put(uint32(0), genGenConfig{Nentries: 1, SchedLen: 1, SrcIp: 0x10000000, SrcCount: 5, Ndsts: 3,
			Sport: 1024, SportCount: 1, Dport: 5001, DportCount: 1, PerClient: c.perClient, MaxLen: 60}))
		var got []string
		for i := 0; i < 16; i++ {
			out := make([]byte, 60)
			ret, err := objs.XdpGen.Run(&ebpf.RunOptions{Data: make([]byte, 60), DataOut: out})
			if err != nil || ret != 3 { // XDP_TX
				t.Fatalf("run %d: %d, %v", i, ret, err)
			}
			src, dst := binary.BigEndian.Uint32(out[26:]), binary.BigEndian.Uint32(out[30:])
			got = append(got, fmt.Sprintf("%d>%d", src-0x10000000, dst-0x30000000))
		}
		objs.Close()
		if fmt.Sprint(got) != c.want {
			t.Errorf("per-client %d: source>destination %v, want %s", c.perClient, got, c.want)
		}
	}
}
