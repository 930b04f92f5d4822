// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// trexStub is a stand-in for TRex's trex_stl_lib.api, enough to run a
// generated profile: it records the field engine's variables and writes,
// then plays them packet by packet as TRex does ("inc" steps every
// variable once per packet, wrapping at its end) and prints each packet's
// destination address.
const trexStub = `
import struct, sys

class Layer:
    def __init__(self, **kw): self.kw = kw
    def __truediv__(self, other): return Stack([self, other])
    def __len__(self): return 0
class Stack(Layer):
    def __init__(self, layers): self.layers = layers
    def __truediv__(self, other): return Stack(self.layers + [other])
    def __len__(self): return 42
def Ether(**kw): return Layer(**kw)
def IP(**kw): return Layer(**kw)
def UDP(**kw): return Layer(**kw)

class STLVmFlowVar:
    def __init__(self, name, min_value=0, max_value=255, size=4, op="inc", value_list=None, step=1, init_value=None):
        def v(x):
            if isinstance(x, str):
                return struct.unpack("!I", bytes(int(o) for o in x.split(".")))[0]
            return x
        self.name, self.size, self.op = name, size, op
        self.values = list(value_list) if value_list is not None else list(range(v(min_value), v(max_value) + 1, step))
        assert op == "inc", op
class STLVmWrFlowVar:
    def __init__(self, fv_name, pkt_offset, offset_fixup=0):
        self.fv_name, self.pkt_offset, self.offset_fixup = fv_name, pkt_offset, offset_fixup
class STLVmFixIpv4:
    def __init__(self, offset): pass
def STLScVmRaw(ins): return ins
class STLPktBuilder:
    def __init__(self, pkt, vm): self.pkt, self.vm = pkt, vm
class STLTXCont:
    def __init__(self, pps): self.pps = pps
class STLStream:
    def __init__(self, packet, mode): self.packet = packet

def destinations(profile, n):
    vm = profile.get_streams()[0].packet.vm
    vars = {i.name: i for i in vm if isinstance(i, STLVmFlowVar)}
    writes = [i for i in vm if isinstance(i, STLVmWrFlowVar) and i.pkt_offset == "IP.dst"]
    out = []
    for k in range(n):
        dst = bytearray([48, 0, 0, 1])
        for w in writes:
            var = vars[w.fv_name]
            val = var.values[k % len(var.values)]
            b = val.to_bytes(var.size, "big")
            dst[w.offset_fixup:w.offset_fixup + var.size] = b
        out.append(".".join(str(o) for o in dst))
    return out
`

// The TRex profile sends exactly to the tunnels' destinations: run with
// a stub of TRex's library, the field engine's address sequence covers
// every host of every tunnel and nothing else (the old two-counter profile
// sent about half of its packets with 256 tunnels to subnets no tunnel
// has), in the built-in generator's order.
func TestTRexProfileEnumeratesTheTunnels(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 absent: cannot run the generated profile")
	}
	p, _ := LoadProfile("imix-simple")
	for _, tunnels := range []int{1, 256, 300, 2000} {
		b, err := TRexProfile(p, TRexOptions{Tunnels: tunnels})
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		os.MkdirAll(filepath.Join(dir, "trex_stl_lib"), 0o755)
		os.WriteFile(filepath.Join(dir, "trex_stl_lib", "__init__.py"), nil, 0o644)
		os.WriteFile(filepath.Join(dir, "trex_stl_lib", "api.py"), []byte(trexStub), 0o644)
		os.WriteFile(filepath.Join(dir, "profile.py"), b, 0o644)
		want := Destinations(tunnels, p.Flows.DstHosts)
		n := 2 * len(want)
		script := "import sys; sys.path.insert(0, sys.argv[1]); import profile; from trex_stl_lib.api import destinations\n" +
			"print('\\n'.join(destinations(profile.register(), int(sys.argv[2]))))"
		out, err := exec.Command(py, "-c", script, dir, strconv.Itoa(n)).CombinedOutput()
		if err != nil {
			t.Fatalf("%d tunnels: running the profile: %v\n%s", tunnels, err, out)
		}
		got := strings.Fields(string(out))
		if len(got) != n {
			t.Fatalf("%d tunnels: %d addresses, want %d", tunnels, len(got), n)
		}
		valid := map[netip.Addr]bool{}
		for _, a := range want {
			valid[a] = true
		}
		seen := map[netip.Addr]bool{}
		stray := 0
		for i, s := range got {
			a := netip.MustParseAddr(s)
			if !valid[a] {
				stray++
				continue
			}
			seen[a] = true
			if a != want[i%len(want)] {
				t.Fatalf("%d tunnels: packet %d to %s, the generator sends it to %s", tunnels, i, a, want[i%len(want)])
			}
		}
		if stray > 0 || len(seen) != len(want) {
			t.Errorf("%d tunnels: %d of %d packets to no tunnel; %d of %d destinations reached", tunnels, stray, n, len(seen), len(want))
		}
	}
}
