// SPDX-License-Identifier: Apache-2.0

// Command bpfgen runs bpf2go with sluice's one set of BPF compiler flags:
// every go:generate line that builds bpf/*.c is
//
//	//go:generate go run sluice/tools/bpfgen [-type T ...] IDENT ../../bpf/FILE.c
//
// so the flags are written here once, as cilium/ebpf's Makefile passes
// BPF2GO_CFLAGS once. BPF2GO_CFLAGS, when set, replaces them (bpf2go's own
// convention), and BPF2GO_CC names the compiler, as for bpf2go.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// cflags are the flags every BPF object is compiled with: optimised (the
// verifier needs it), with BTF (-g), every warning an error.
const cflags = "-O2 -g -Wall -Werror"

func main() {
	flags := os.Getenv("BPF2GO_CFLAGS")
	if flags == "" {
		flags = cflags + multiarchInclude()
	}
	args := append([]string{"tool", "bpf2go", "-tags", "linux", "-target", "bpfel", "-cflags", flags}, os.Args[1:]...)
	cmd := exec.Command("go", args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "bpfgen: go %s: %v\n", strings.Join(args, " "), err)
		os.Exit(1)
	}
}

// multiarchInclude is " -I/usr/include/TRIPLET" on a multiarch system
// (Debian, Ubuntu): <linux/types.h> includes <asm/types.h>, which lives
// there, and clang does not search it for the bpf target. The triplet is
// the compiler's own (x86_64-linux-gnu, aarch64-linux-gnu ...), so the
// build is not tied to one architecture; "" where there is none.
func multiarchInclude() string {
	cc := os.Getenv("BPF2GO_CC")
	if cc == "" {
		cc = "clang"
	}
	out, err := exec.Command(cc, "-print-multiarch").Output()
	triplet := strings.TrimSpace(string(out))
	if err != nil || triplet == "" {
		return ""
	}
	dir := "/usr/include/" + triplet
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return ""
	}
	return " -I" + dir
}
