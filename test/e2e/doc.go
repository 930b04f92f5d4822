// SPDX-License-Identifier: Apache-2.0

// Package e2e holds end-to-end tests that run the sluice binary against
// real network namespaces on the host kernel.
package e2e
