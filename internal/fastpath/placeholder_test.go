package fastpath

import (
	"encoding/binary"
	"os"
	"testing"

	"github.com/cilium/ebpf"
)

func frame(etherType uint16, size int) []byte {
	b := make([]byte, size)
	if size >= 14 {
		binary.BigEndian.PutUint16(b[12:], etherType)
	}
	return b
}

// TestPlaceholderRun proves the bpf2go chain end to end: the committed object
// loads into the running kernel and BPF_PROG_RUN executes it.
func TestPlaceholderRun(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("loading BPF programs needs root")
	}
	var objs placeholderObjects
	if err := loadPlaceholderObjects(&objs, nil); err != nil {
		t.Fatalf("loading placeholder: %v", err)
	}
	defer objs.Close()

	cases := []struct {
		name  string
		frame []byte
		class uint32
	}{
		{"ipv4", frame(0x0800, 64), 1},
		{"ipv6", frame(0x86dd, 64), 2},
		{"arp", frame(0x0806, 64), 3},
	}
	for _, c := range cases {
		ret, err := objs.XdpPlaceholder.Run(&ebpf.RunOptions{Data: c.frame})
		if err != nil {
			t.Fatalf("%s: run: %v", c.name, err)
		}
		if ret != 2 { // XDP_PASS
			t.Errorf("%s: verdict %d, want XDP_PASS (2)", c.name, ret)
		}
		var perCPU []uint64
		if err := objs.ClassCounts.Lookup(c.class, &perCPU); err != nil {
			t.Fatal(err)
		}
		var sum uint64
		for _, v := range perCPU {
			sum += v
		}
		if sum != 1 {
			t.Errorf("%s: class %d counted %d times, want 1", c.name, c.class, sum)
		}
	}
}
