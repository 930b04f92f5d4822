// SPDX-License-Identifier: Apache-2.0

// Package vm holds the tests that need a real Debian kernel with ESP/GCM,
// bonding, 802.1Q, geneve, tc flower and netdevsim: features the host kernel
// lacks. Its test files carry the build tag "vmtest" and run inside the test
// VM (internal/testlab), never on the host:
//
//	bash scripts/vmtest.sh            # all VM tests
//	bash scripts/vmtest.sh 'TestESP'  # only matching tests (-test.run)
//
// vmtest.sh compiles the test binaries on the host (the guest needs no Go
// toolchain), boots one VM and runs them there as root. Outside the VM
// (SLUICE_IN_VM unset) every test skips.
package vm
