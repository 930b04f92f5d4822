// SPDX-License-Identifier: Apache-2.0

// Package guard holds repository-wide tests that keep the architecture
// honest: import rules, package documentation, bounded file reads, and
// kernel packages whose messages state facts (the callers add the fix).
package guard
