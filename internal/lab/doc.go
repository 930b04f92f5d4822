// SPDX-License-Identifier: Apache-2.0

// Package lab builds network-namespace labs for the benchmarks: namespaces
// joined by veth pairs, addressed with the BlueField-3 benchmark's address plan (clients in
// 16.0.0.0/8, one 48.x.y.0/24 behind each tunnel, tunnel endpoints in
// 123.0.0.0/16), and a forwarder in the device under test: the kernel's IP
// forwarding, a bare XDP redirect (bpf/redirect.c) or sluice's gateway fast
// path.
//
// Topologies:
//
//	forwarder     gen --g0|lan0-- dut --wan0|s0-- sink
//	gateway-pair  gen --g0|p1-- gw0 --p0|p0-- gw1 --p1|s0-- sink
//	overlay-pair  h0 --w0|w0-- h1 with a VXLAN overlay (needs ESP: the test VM)
//
// A lab is named (default "lab"); its namespaces are "sl-NAME-ROLE" and its
// state (what was made, the gateway daemons' pids, a bpffs mount for pinned
// links) lives under /run/sluice/lab/NAME. Up is idempotent; Down removes
// everything Up made, in any state. The network is configured with iproute2
// (ip -batch), so what the lab does is what an operator would type.
package lab
