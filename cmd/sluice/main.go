// SPDX-License-Identifier: Apache-2.0

// Command sluice makes IPsec with NIC offload fast, correct and observable.
// Everything lives in internal/cli; main only maps an error to an exit code.
package main

import (
	"fmt"
	"os"

	"sluice/internal/cli"
)

func main() {
	if err := cli.Run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "sluice:", err)
		os.Exit(cli.ExitCode(err))
	}
}
