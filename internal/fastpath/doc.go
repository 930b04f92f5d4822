// SPDX-License-Identifier: Apache-2.0

// Package fastpath loads sluice's XDP fast path (compiled from bpf/ by
// bpf2go; the generated objects are committed so `go build` needs no clang),
// compiles the kernel's XFRM policies into its maps, mirrors the kernel into
// them, attaches and explains. The daemon that drives it is internal/gateway.
package fastpath

//go:generate go run sluice/tools/bpfgen -type fp_config -type fp_tuple -type fp_pkey -type fp_pkey4 -type fp_policy -type fp_pentry -type fp_didx4 -type fp_flow_key -type fp_flow -type fp_iface -type fp_vlan_key -type fp_counter -type fp_decision -type fp_reason -type fp_sa_ref -type fp_sa_opts -type fp_sa_check fastpath ../../bpf/fastpath.c
//go:generate go run sluice/tools/bpfgen -type parse_result parseprobe ../../bpf/parse_probe.c
