// SPDX-License-Identifier: Apache-2.0

// Package api is the local interface of a running `sluice gateway run`:
// versioned JSON over HTTP on a unix socket (socket.go, server.go), a typed
// client for the `show` commands (client.go), and Prometheus metrics on an
// opt-in TCP address (metrics.go). The schema is in types.go and
// docs/api.md.
package api
