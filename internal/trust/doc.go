// SPDX-License-Identifier: Apache-2.0

// Package trust decides which directories the gateway daemon may act in:
// the API socket's directory and the BPF pin dir. Root acting by path in
// a directory another user can write lets that user swap what the path
// names between a check and a use (a symlink, a renamed directory), so
// the daemon refuses such directories, as sshd's StrictModes does, and
// acts through a directory descriptor opened with O_NOFOLLOW.
package trust
