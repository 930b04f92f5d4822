// SPDX-License-Identifier: Apache-2.0

// Package bench measures: the fast path's per-packet cost with
// BPF_PROG_RUN (fastpath.go), and lab traffic: an XDP live-frame generator
// (bpf/gen.c) and an XDP sink (bpf/sink.c) that count every frame exactly,
// profiles (profiles/*.yaml), stepped and RFC 2544 search runs, reports
// (report.json, steps.csv, PNG/SVG charts, report.html), the ConnectX-6 SR-IOV guide's
// iperf3/ping statistics and TRex profile export. See docs/bench.md.
package bench
