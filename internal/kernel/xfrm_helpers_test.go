package kernel

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/vishvananda/netns"
)

var xfrmTestNSSeq atomic.Int32

// xfrmTestNS creates a fresh network namespace for one test and removes it
// at the end. It is named (bind-mounted under /run/netns) so that the test
// can drive it with `ip -n NAME`, exactly as an operator would.
func xfrmTestNS(t testing.TB) (string, netns.NsHandle) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces and XFRM policies")
	}
	name := fmt.Sprintf("sluice-t%d-%d", os.Getpid(), xfrmTestNSSeq.Add(1))
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	ns, err := netns.NewNamed(name) // also moves this thread into it
	if serr := netns.Set(orig); serr != nil {
		panic(fmt.Sprintf("cannot return to the test's network namespace: %v", serr))
	}
	if err != nil {
		t.Fatalf("new netns %s: %v", name, err)
	}
	t.Cleanup(func() {
		ns.Close()
		if err := netns.DeleteNamed(name); err != nil {
			t.Errorf("delete netns %s: %v", name, err)
		}
	})
	return name, ns
}

// ipn runs `ip -n ns args...` and fails the test with ip's own words.
func ipn(t *testing.T, ns string, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"-n", ns}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip -n %s %s: %v\n%s", ns, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// ipBatch feeds lines to `ip -n ns -batch -`.
func ipBatch(t testing.TB, ns string, lines []string) {
	t.Helper()
	cmd := exec.Command("ip", "-n", ns, "-batch", "-")
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ip -n %s -batch: %v\n%s", ns, err, out)
	}
}

// nlAttr builds one netlink attribute, for tests that extend kernel bytes.
func nlAttr(typ uint16, v []byte) []byte { return putAttr(nil, typ, v) }
