// SPDX-License-Identifier: Apache-2.0

// Package install tests what `make package` builds as a user meets it: the
// .deb installed into a fresh Debian root, run, verified and removed, and
// the .rpm's contents. The root is debootstrap's, cached by make setup.
package install
