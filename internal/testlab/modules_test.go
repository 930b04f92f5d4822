// SPDX-License-Identifier: Apache-2.0

package testlab

import (
	"reflect"
	"strings"
	"testing"
)

// A modules.dep excerpt as Debian's 6.12 ships it.
const depSnippet = `kernel/fs/9p/9p.ko.xz: kernel/net/9p/9pnet.ko.xz kernel/fs/netfs/netfs.ko.xz
kernel/net/9p/9pnet.ko.xz: kernel/fs/netfs/netfs.ko.xz
kernel/net/9p/9pnet_virtio.ko.xz: kernel/net/9p/9pnet.ko.xz kernel/fs/netfs/netfs.ko.xz
kernel/fs/netfs/netfs.ko.xz:
kernel/drivers/net/bonding/bonding.ko.xz: kernel/net/tls/tls.ko.xz
kernel/net/tls/tls.ko.xz:
kernel/net/sched/act-test.ko.xz:
`

func parseSnippet(t *testing.T) moduleDeps {
	t.Helper()
	deps, err := parseModulesDep(strings.NewReader(depSnippet))
	if err != nil {
		t.Fatal(err)
	}
	return deps
}

func TestLoadOrder9p(t *testing.T) {
	got, err := loadOrder(parseSnippet(t), nil, []string{"9pnet_virtio", "9p"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"kernel/fs/netfs/netfs.ko.xz",
		"kernel/net/9p/9pnet.ko.xz",
		"kernel/net/9p/9pnet_virtio.ko.xz",
		"kernel/fs/9p/9p.ko.xz",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("load order\n got %q\nwant %q", got, want)
	}
}

// The order must come from each module's own line, not from how a line
// happens to list its dependencies.
func TestLoadOrderIgnoresLineOrder(t *testing.T) {
	deps, err := parseModulesDep(strings.NewReader("c.ko: a.ko b.ko\nb.ko: a.ko\na.ko:\n"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := loadOrder(deps, nil, []string{"c"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a.ko", "b.ko", "c.ko"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestLoadOrderBuiltinAndMissing(t *testing.T) {
	deps := parseSnippet(t)
	builtin, err := parseBuiltin(strings.NewReader("kernel/drivers/virtio/virtio_pci.ko\n"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := loadOrder(deps, builtin, []string{"virtio_pci", "tls"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"kernel/net/tls/tls.ko.xz"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	if _, err := loadOrder(deps, builtin, []string{"nosuchmod"}); err == nil || !strings.Contains(err.Error(), "nosuchmod") {
		t.Fatalf("missing module: err = %v, want one naming it", err)
	}
}

func TestLoadOrderCycle(t *testing.T) {
	deps, err := parseModulesDep(strings.NewReader("a.ko: b.ko\nb.ko: a.ko\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := loadOrder(deps, nil, []string{"a"}); err == nil || !strings.Contains(err.Error(), "cycle") {
		t.Fatalf("err = %v, want a cycle error", err)
	}
}

func TestModuleName(t *testing.T) {
	for in, want := range map[string]string{
		"kernel/net/9p/9pnet_virtio.ko.xz": "9pnet_virtio",
		"kernel/net/sched/act-test.ko.zst": "act_test",
		"psample.ko":                       "psample",
		"9p":                               "9p",
	} {
		if got := moduleName(in); got != want {
			t.Errorf("moduleName(%q) = %q, want %q", in, got, want)
		}
	}
	// '-' and '_' are the same module to the kernel.
	if _, err := loadOrder(parseSnippet(t), nil, []string{"act_test"}); err != nil {
		t.Errorf("act_test: %v", err)
	}
}

func TestParseModulesDepMalformed(t *testing.T) {
	if _, err := parseModulesDep(strings.NewReader("no colon here\n")); err == nil {
		t.Fatal("want an error for a line without ':'")
	}
}
