// SPDX-License-Identifier: Apache-2.0

package api

import "syscall"

// errConnRefused is what connecting to a stale socket returns.
var errConnRefused error = syscall.ECONNREFUSED
