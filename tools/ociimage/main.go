// SPDX-License-Identifier: Apache-2.0

// Command ociimage writes sluice's container image, the one the
// DaemonSet (deploy/daemonset.yaml) runs, as an OCI image layout from the
// static binary (make image runs it): one layer with the binary at
// /usr/local/sbin/sluice and an empty /tmp, nothing else. The agent
// talks netlink, XFRM and VICI itself; it needs no shell and no tools in
// the image. Written with the standard library, so no container
// runtime, daemon or registry is needed to build it.
//
//	go run ./tools/ociimage -binary bin/image/sluice -out bin/image/oci -ref sluice:VERSION
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"time"

	"sluice/internal/fileread"
)

func main() {
	bin := flag.String("binary", "", "the static sluice binary (CGO_ENABLED=0)")
	out := flag.String("out", "bin/image/oci", "directory to write the OCI image layout into")
	ref := flag.String("ref", "sluice:dev", "the image's name in the layout (org.opencontainers.image.ref.name)")
	version := flag.String("version", "dev", "org.opencontainers.image.version")
	arch := flag.String("arch", runtime.GOARCH, "the binary's architecture")
	flag.Parse()
	if err := run(*bin, *out, *ref, *version, *arch); err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
}

func run(bin, out, ref, version, arch string) error {
	if bin == "" {
		return fmt.Errorf("-binary: name the static sluice binary (make image builds it)")
	}
	// The static binary is ~50 MB; 256 MB bounds a wrong path (a disk
	// image) without limiting any real build.
	data, err := fileread.Read(bin, 256<<20)
	if err != nil {
		return err
	}
	// SOURCE_DATE_EPOCH (reproducible-builds.org): the Makefile passes the
	// commit's date, so one commit gives one image digest.
	created := time.Unix(0, 0).UTC()
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		sec, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("SOURCE_DATE_EPOCH=%q is not a number of seconds", s)
		}
		created = time.Unix(sec, 0).UTC()
	}
	if err := os.RemoveAll(out); err != nil {
		return err
	}
	d, err := Write(out, Image{Binary: data, Path: "/usr/local/sbin/sluice", Ref: ref, Version: version, Arch: arch, Created: created})
	if err != nil {
		return err
	}
	fmt.Printf("%s: OCI image %s, manifest %s\n", out, ref, d.Digest)
	return nil
}
