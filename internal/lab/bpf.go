// SPDX-License-Identifier: Apache-2.0

package lab

// The bare XDP redirect forwarder (bpf/redirect.c); bpf2go writes the
// bindings and objects beside this file.
//go:generate go run sluice/tools/bpfgen -type redir_config redirect ../../bpf/redirect.c
