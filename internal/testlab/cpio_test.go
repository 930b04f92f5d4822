// SPDX-License-Identifier: Apache-2.0

package testlab

import (
	"bytes"
	"strconv"
	"testing"
)

type cpioEntry struct {
	name         string
	mode         uint32
	rmajor, rmin uint32
	data         string
}

// readCpio parses newc the way the kernel's initramfs unpacker does, to
// check the writer's headers and 4-byte alignment.
func readCpio(t *testing.T, b []byte) []cpioEntry {
	t.Helper()
	var out []cpioEntry
	field := func(hdr []byte, i int) uint32 {
		v, err := strconv.ParseUint(string(hdr[6+8*i:6+8*i+8]), 16, 32)
		if err != nil {
			t.Fatalf("field %d: %v", i, err)
		}
		return uint32(v)
	}
	align := func(n int) int { return (n + 3) &^ 3 }
	off := 0
	for {
		if off+110 > len(b) || string(b[off:off+6]) != "070701" {
			t.Fatalf("bad header at %d", off)
		}
		hdr := b[off : off+110]
		size, nameLen := int(field(hdr, 6)), int(field(hdr, 11))
		name := string(b[off+110 : off+110+nameLen-1])
		dataOff := align(off + 110 + nameLen)
		e := cpioEntry{name: name, mode: field(hdr, 1), rmajor: field(hdr, 9), rmin: field(hdr, 10),
			data: string(b[dataOff : dataOff+size])}
		off = align(dataOff + size)
		if name == "TRAILER!!!" {
			if off != len(b) {
				t.Fatalf("%d bytes after the trailer", len(b)-off)
			}
			return out
		}
		out = append(out, e)
	}
}

func TestCpioWriter(t *testing.T) {
	var buf bytes.Buffer
	c := newCpioWriter(&buf)
	c.Dir("/bin", 0o755)
	c.File("init", 0o755, []byte("#!/bin/sh\n"))
	c.File("bin/odd", 0o644, []byte("12345")) // not a multiple of 4
	c.Symlink("bin/sh", "busybox")
	c.CharDev("dev/console", 0o600, 5, 1)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	got := readCpio(t, buf.Bytes())
	want := []cpioEntry{
		{name: "bin", mode: modeDir | 0o755},
		{name: "init", mode: modeFile | 0o755, data: "#!/bin/sh\n"},
		{name: "bin/odd", mode: modeFile | 0o644, data: "12345"},
		{name: "bin/sh", mode: modeLink | 0o777, data: "busybox"},
		{name: "dev/console", mode: modeChr | 0o600, rmajor: 5, rmin: 1},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d entries, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("entry %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}
