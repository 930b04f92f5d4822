// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"fmt"
	"slices"

	"github.com/cilium/ebpf"

	"sluice/internal/fastpath"
)

// cachedStages are the programs of bpf/stage_probe.c, each the cached
// forward up to one more step, in order, with the verdict each returns on
// the cache-hit path; the live program (xdp_fastpath) follows them.
var cachedStages = []struct {
	prog, step string
	want       uint32
}{
	{"stage_entry", "BPF_PROG_RUN itself", 2},
	{"stage_config", "config and lease", 2},
	{"stage_parse", "parse", 2},
	{"stage_lookup", "flow key, gate, exact-match slot", 2},
	{"stage_checks", "size, MAC, SA check", 2},
	{"stage_redirect", "redirect (bpf_redirect_map, DEVMAP array)", 2},
	{"stage_rewrite", "rewrite (MACs, TTL)", 4},
	{"stage_cached", "decide_cached whole: + the gate's counters", 4},
}

// StageLive is the Program of the live program's row among the stages.
const StageLive = "xdp_fastpath"

// StageStep names the step each stage result adds to the one before; the
// live program's row is measured against stage_rewrite, the last step of
// the cached forward (the redirect is aimed before the rewrite): the same
// cached stage with the gate's, reason and per-policy counters, inline in
// the program.
func StageStep(prog string) string {
	for _, s := range cachedStages {
		if s.prog == prog {
			return s.step
		}
	}
	return "the live program: gate counters, counters (against stage_rewrite)"
}

// measureStages runs the stage probe's programs and the live program on
// frame, whose flow the live program has just cached, interleaved batch by
// batch so that a change in the machine's speed meets every program alike:
// each program's mean per run, in order, the live program last. Program of
// each result: the probe's program name, or "xdp_fastpath".
func measureStages(dp *fastpath.Datapath, frame []byte, repeat int) ([]FastpathResult, error) {
	spec, err := loadStageprobe()
	if err != nil {
		return nil, fmt.Errorf("stage probe: %w", err)
	}
	repl := map[string]*ebpf.Map{}
	for name, m := range dp.SharedMaps() {
		if ms := spec.Maps[name]; ms != nil {
			ms.MaxEntries = m.MaxEntries() // the loader sizes some by the CPU count
			repl[name] = m
		}
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{MapReplacements: repl})
	if err != nil {
		return nil, fmt.Errorf("stage probe: loading over the fast path's maps: %w", err)
	}
	defer coll.Close()
	progs := make([]*ebpf.Program, 0, len(cachedStages)+1)
	for _, s := range cachedStages {
		progs = append(progs, coll.Programs[s.prog])
	}
	progs = append(progs, dp.Program())
	batches := max(1, min(repeat/ttlBatch, maxForwardBatches))
	total := make([]float64, len(progs))
	for range batches {
		for i, p := range progs {
			ret, per, err := p.Benchmark(frame, ttlBatch, nil)
			if err != nil {
				return nil, fmt.Errorf("stage probe: %w", err)
			}
			want := uint32(4) // the live program's redirect
			if i < len(cachedStages) {
				want = cachedStages[i].want
			}
			if ret != want {
				name := StageLive
				if i < len(cachedStages) {
					name = cachedStages[i].prog
				}
				return nil, fmt.Errorf("stage probe: %s returned XDP action %d, not %d: the frame did not take the cache-hit path", name, ret, want)
			}
			total[i] += float64(per.Nanoseconds())
		}
	}
	var out []FastpathResult
	for i, t := range total {
		name := StageLive
		if i < len(cachedStages) {
			name = cachedStages[i].prog
		}
		out = append(out, FastpathResult{Program: name, Case: "outbound-match", NsPerPacket: t / float64(batches),
			Runs: batches * ttlBatch})
	}
	return out, nil
}

// stagesWanted says whether --stages asked for the stage table at this case.
func stagesWanted(o FastpathOptions, caseName string) bool {
	return o.Stages && caseName == "outbound-match" && (len(o.Cases) == 0 || slices.Contains(o.Cases, caseName))
}
