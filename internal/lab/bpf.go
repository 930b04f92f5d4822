// SPDX-License-Identifier: Apache-2.0

package lab

// The bare XDP redirect forwarder (bpf/redirect.c); bpf2go writes the
// bindings and objects beside this file.
//go:generate go tool bpf2go -tags linux -target bpfel -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -type redir_config redirect ../../bpf/redirect.c
