// SPDX-License-Identifier: Apache-2.0

// Package fileread is the one way sluice reads a file whole: it refuses
// anything but a regular file before opening it (a FIFO would block the
// open, a device such as /dev/zero never ends) and anything larger than
// the caller's limit, with an error that names the file and the limit.
// It imports nothing of sluice, so every part may use it.
package fileread
