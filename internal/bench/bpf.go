// SPDX-License-Identifier: Apache-2.0

package bench

// The generator (bpf/gen.c) and the sink (bpf/sink.c); bpf2go writes the
// bindings and objects beside this file.
//go:generate go run sluice/tools/bpfgen -type gen_config -type gen_entry -type gen_cpu_state gen ../../bpf/gen.c
//go:generate go run sluice/tools/bpfgen -type sink_stats -type sink_seq sink ../../bpf/sink.c

// The cached forward in prefixes (bpf/stage_probe.c), for `bench fastpath --stages`.
//go:generate go run sluice/tools/bpfgen stageprobe ../../bpf/stage_probe.c
