// Package fastpath loads sluice's XDP programs (compiled from bpf/ by
// bpf2go; the generated objects are committed so `go build` needs no clang)
// and keeps their maps in step with the kernel's XFRM state.
package fastpath

//go:generate go tool bpf2go -tags linux -target bpfel -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" placeholder ../../bpf/placeholder.c
