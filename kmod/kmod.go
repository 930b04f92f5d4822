// SPDX-License-Identifier: Apache-2.0

// Package kmod carries the sources of sluice's own kernel modules so that
// a sluice binary can build them for the test VM's kernel from any working
// directory ("sluice vm nicmodel"). Today there is one: nicmodel, the
// packet-offload NIC model (nicmodel/README.md).
package kmod

import "embed"

// Nicmodel holds nicmodel's Kbuild, Makefile, C sources and headers,
// under "nicmodel/".
//
//go:embed nicmodel/Kbuild nicmodel/Makefile nicmodel/*.c nicmodel/*.h
var Nicmodel embed.FS
