// SPDX-License-Identifier: Apache-2.0

// Package gateway is the gateway daemon: it turns gateway.yaml into the
// daemon's options, locks the pin dir, attaches the fast path
// (internal/fastpath) to the configured interfaces, runs the mirror, the
// flower tier, the API and the metrics, watches the pins, and stops a
// running daemon ('sluice gateway stop'). internal/fastpath is the data
// path it drives; internal/cli only parses flags and calls Run and Stop.
package gateway
