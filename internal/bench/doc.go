// Package bench measures: the fast path's per-packet cost with
// BPF_PROG_RUN (fastpath.go) and, in later parts, lab traffic.
package bench
