// SPDX-License-Identifier: Apache-2.0

// Package guard holds repository-wide tests that keep the architecture
// honest: import rules and package documentation.
package guard
