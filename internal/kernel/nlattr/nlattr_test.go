// SPDX-License-Identifier: Apache-2.0

package nlattr

import (
	"bytes"
	"strings"
	"testing"

	"github.com/vishvananda/netlink/nl"
)

// Append writes what the library's RtAttr writes, and Walk reads it back.
func TestAppendMatchesLibraryAndWalksBack(t *testing.T) {
	vals := [][]byte{{1}, {1, 2, 3, 4}, []byte("flower\x00"), nil}
	var b, lib []byte
	for i, v := range vals {
		b = Append(b, uint16(i+1), v)
		lib = append(lib, nl.NewRtAttr(i+1, v).Serialize()...)
	}
	if !bytes.Equal(b, lib) {
		t.Fatalf("Append\n got %x\nwant %x (nl.RtAttr)", b, lib)
	}
	var got [][]byte
	if err := Walk(b, func(typ uint16, v []byte) {
		if int(typ) != len(got)+1 {
			t.Errorf("attribute %d has type %d", len(got)+1, typ)
		}
		got = append(got, v)
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(vals) {
		t.Fatalf("walked %d attributes, appended %d", len(got), len(vals))
	}
	for i := range vals {
		if !bytes.Equal(got[i], vals[i]) {
			t.Errorf("attribute %d: %x, want %x", i+1, got[i], vals[i])
		}
	}
}

// A nested attribute's flag is stripped from its type, and a length that
// runs past the buffer is an error, never a panic or a short value.
func TestWalkMasksFlagsAndRefusesTruncation(t *testing.T) {
	b := Append(nil, 7|nl.NLA_F_NESTED, []byte{1, 2, 3, 4})
	var typ uint16
	if err := Walk(b, func(t uint16, _ []byte) { typ = t }); err != nil || typ != 7 {
		t.Errorf("nested 7: type %d, err %v", typ, err)
	}
	for cut := 1; cut < len(b); cut++ {
		err := Walk(b[:cut], func(uint16, []byte) { t.Errorf("cut at %d: a value was passed on", cut) })
		if cut >= HdrLen && (err == nil || !strings.Contains(err.Error(), "length 8")) {
			t.Errorf("cut at %d: err %v, want the length named", cut, err)
		}
	}
}
