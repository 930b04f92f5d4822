// SPDX-License-Identifier: Apache-2.0

// Command gendocs writes sluice's man pages and shell completions into a
// directory (make package runs it): go run ./tools/gendocs -out DIR.
package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"sluice/internal/cli"
	"sluice/internal/manual"
)

func main() {
	out := flag.String("out", "bin/package/docs", "directory to write man/ and completions/ into")
	version := flag.String("version", "dev", "version printed in the pages' footer")
	flag.Parse()
	// SOURCE_DATE_EPOCH (reproducible-builds.org): the Makefile passes the commit's date.
	date := time.Unix(0, 0).UTC()
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		sec, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			fmt.Fprintf(os.Stderr, "gendocs: SOURCE_DATE_EPOCH=%q is not a number of seconds\n", s)
			os.Exit(2)
		}
		date = time.Unix(sec, 0).UTC()
	}
	if err := manual.Write(cli.NewRootCommand(), *out, *version, date); err != nil {
		fmt.Fprintln(os.Stderr, "gendocs:", err)
		os.Exit(1)
	}
}
