// SPDX-License-Identifier: Apache-2.0

package swan

import (
	"bufio"
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// variant is one generator of the BlueField-3 benchmark: a topology, a role and a port.
type variant struct {
	topology, role string
	port           int
	script         string // testdata/seed002/<script>
	output         string // the file the seed's script writes, %d = N
}

var variants = []variant{
	{TopologyTest0, RoleGW0, 0, "test0-gw0.sh", "s0-%d.conf"},
	{TopologyTest0, RoleGW1, 0, "test0-gw1.sh", "s1-%d.conf"},
	{TopologyRouted, RoleGW0, 0, "routed-gw0-p0.sh", "s0-0-%d.conf"},
	{TopologyRouted, RoleGW0, 1, "routed-gw0-p1.sh", "s0-1-%d.conf"},
	{TopologyRouted, RoleGW1, 0, "routed-gw1-p0.sh", "s1-0-%d.conf"},
	{TopologyRouted, RoleGW1, 1, "routed-gw1-p1.sh", "s1-1-%d.conf"},
}

// goldenSizes are the tunnel counts the issue names: 1, 2, both sides of
// the 255 boundary of the addressing, and a few thousand.
var goldenSizes = []int{1, 2, 255, 256, 2000}

func (v variant) name(n int) string {
	return fmt.Sprintf("%s-%s-p%d-%d", v.topology, v.role, v.port, n)
}

func (v variant) spec(n int) *Spec {
	s := &Spec{Topology: v.topology, Role: v.role, Ports: []int{v.port}, Tunnels: n}
	s.Normalize()
	return s
}

// parseSettings flattens a strongSwan settings file (swanctl.conf syntax:
// sections, key = value, include, # comments) into "a.b.key" -> value.
// Includes are resolved relative to the including file.
func parseSettings(t *testing.T, path string, into map[string]string, prefix []string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	stack := slices.Clone(prefix)
	for ln := 1; sc.Scan(); ln++ {
		line := strings.TrimSpace(sc.Text())
		if i := strings.Index(line, "#"); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		switch {
		case line == "":
		case line == "}":
			if len(stack) == len(prefix) {
				t.Fatalf("%s:%d: unbalanced }", path, ln)
			}
			stack = stack[:len(stack)-1]
		case strings.HasSuffix(line, "{"):
			stack = append(stack, strings.TrimSpace(strings.TrimSuffix(line, "{")))
		case strings.HasPrefix(line, "include "):
			inc := strings.TrimSpace(strings.TrimPrefix(line, "include "))
			if !filepath.IsAbs(inc) {
				inc = filepath.Join(filepath.Dir(path), inc)
			}
			parseSettings(t, inc, into, stack)
		case strings.Contains(line, "="):
			k, v, _ := strings.Cut(line, "=")
			key := strings.Join(append(slices.Clone(stack), strings.TrimSpace(k)), ".")
			if _, dup := into[key]; dup {
				t.Fatalf("%s:%d: %s set twice", path, ln, key)
			}
			v = strings.TrimSpace(v)
			if strings.HasSuffix(key, ".secret") {
				k, err := ParsePSK(v)
				if err != nil {
					t.Fatalf("%s:%d: %v", path, ln, err)
				}
				v = fmt.Sprintf("%x", k.Bytes())
			}
			into[key] = v
		default:
			t.Fatalf("%s:%d: cannot parse %q", path, ln, line)
		}
	}
	if len(stack) != len(prefix) {
		t.Fatalf("%s: %d sections not closed", path, len(stack)-len(prefix))
	}
}

func settings(t *testing.T, path string) map[string]string {
	m := map[string]string{}
	parseSettings(t, path, m, nil)
	return m
}

// TestGeneratorMatchesSeedScripts runs the BlueField-3 benchmark's own bash generators
// (testdata/seed002, copied verbatim) and demands that sluice's swanctl.conf
// plus secrets.conf set exactly the same keys to the same values, for
// every topology, role and port and N = 1, 2, 255, 256, 2000.
func TestGeneratorMatchesSeedScripts(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash is needed to run the seed's generators")
	}
	psk := filepath.Join(t.TempDir(), "psk")
	os.WriteFile(psk, []byte("'TopSecret'\n"), 0o600)
	for _, v := range variants {
		t.Run(v.script, func(t *testing.T) {
			t.Parallel()
			for _, n := range goldenSizes {
				seedDir := t.TempDir()
				cmd := exec.Command("bash", filepath.Join(mustAbs(t, "testdata/seed002"), v.script), fmt.Sprint(n))
				cmd.Dir = seedDir
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("seed generator: %v\n%s", err, out)
				}
				want := settings(t, filepath.Join(seedDir, fmt.Sprintf(v.output, n)))

				s := v.spec(n)
				s.PSKFile = psk
				dir := t.TempDir()
				if _, err := Generate(dir, s, NewPlan(s, "p0", "p1", true)); err != nil {
					t.Fatal(err)
				}
				got := settings(t, filepath.Join(dir, ConfFile))
				if len(got) != len(want) {
					t.Errorf("N=%d: %d settings, the seed has %d", n, len(got), len(want))
				}
				bad := 0
				for k, wv := range want {
					if gv, ok := got[k]; !ok || gv != wv {
						if bad++; bad <= 5 {
							t.Errorf("N=%d: %s = %q, the seed says %q", n, k, gv, wv)
						}
					}
				}
				if bad > 0 {
					t.Fatalf("N=%d: %d settings differ from the seed", n, bad)
				}
			}
		})
	}
}

func mustAbs(t *testing.T, p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestAddressingIsUniqueUpToTheLimit walks every tunnel of the largest
// configurations: carriers and remote selectors never repeat, stay inside
// their /16 and /8, and never hit the gateway's own, network or broadcast
// addresses.
func TestAddressingIsUniqueUpToTheLimit(t *testing.T) {
	for _, topo := range []string{TopologyTest0, TopologyRouted} {
		s := &Spec{Topology: topo, Role: RoleGW0, Tunnels: MaxTunnels(topo)}
		s.Normalize()
		if err := s.Validate(); err != nil {
			t.Fatal(err)
		}
		for _, p := range s.Ports {
			carriers, nets := map[netip.Addr]int{}, map[netip.Prefix]int{}
			carrierNet := netip.MustParsePrefix(fmt.Sprintf("123.%d.0.0/16", p))
			if topo == TopologyRouted {
				carrierNet = netip.MustParsePrefix(fmt.Sprintf("123.%d.0.0/16", 2+p))
			}
			for i := 1; i <= s.Tunnels; i++ {
				tn := s.Tunnel(p, i)
				c, r := tn.RemoteAddr, tn.RemoteTS
				if j, dup := carriers[c]; dup {
					t.Fatalf("%s p%d: tunnels %d and %d share carrier %s", topo, p, j, i, c)
				}
				if j, dup := nets[r]; dup {
					t.Fatalf("%s p%d: tunnels %d and %d share remote_ts %s", topo, p, j, i, r)
				}
				carriers[c], nets[r] = i, i
				b := c.As4()
				if !carrierNet.Contains(c) || (b[2] == 255 && b[3] == 255) || (b[2] == 0 && b[3] == 0) || c == tn.LocalAddr {
					t.Fatalf("%s p%d tunnel %d: carrier %s is not a usable host of %s", topo, p, i, c, carrierNet)
				}
				if r.Bits() != 24 || !netip.MustParsePrefix(fmt.Sprintf("%d.0.0.0/8", 48+p)).Contains(r.Addr()) {
					t.Fatalf("%s p%d tunnel %d: remote_ts %s outside %d.0.0.0/8", topo, p, i, r, 48+p)
				}
			}
		}
	}
}

// TestLimitsAreRefusedWithTheReason: one past each limit is refused, and the
// error says why.
func TestLimitsAreRefusedWithTheReason(t *testing.T) {
	for _, c := range []struct {
		topo string
		n    int
		want string
	}{
		{TopologyTest0, 65025, ""},
		{TopologyTest0, 65026, "255 x 255"},
		{TopologyRouted, 65023, ""},
		{TopologyRouted, 65024, "broadcast address 123.2.255.255"},
		{TopologyTest0, 0, "at least 1"},
	} {
		s := &Spec{Topology: c.topo, Role: RoleGW1, Tunnels: c.n}
		s.Normalize()
		err := s.Validate()
		if c.want == "" && err != nil {
			t.Errorf("%s %d: %v", c.topo, c.n, err)
		}
		if c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "--tunnels")) {
			t.Errorf("%s %d: error %v, want one naming --tunnels and %q", c.topo, c.n, err, c.want)
		}
	}
	bad := []struct {
		s    Spec
		want string
	}{
		{Spec{Topology: "mesh", Role: RoleGW0, Tunnels: 1}, "--topology"},
		{Spec{Topology: TopologyTest0, Role: "gw2", Tunnels: 1}, "--role"},
		{Spec{Topology: TopologyTest0, Role: RoleGW0, Tunnels: 1, Ports: []int{1}}, "test0 has one tunnel port"},
		{Spec{Topology: TopologyTest0, Role: RoleGW0, Tunnels: 1, HWOffload: "full"}, "--hw-offload"},
		{Spec{Topology: TopologyTest0, Role: RoleGW0, Tunnels: 1, ESP: "aes256gcm128 }"}, "--esp"},
	}
	for _, b := range bad {
		s := b.s
		s.Normalize()
		if err := s.Validate(); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%+v: error %v, want %q", b.s, err, b.want)
		}
	}
}

// TestSecretsStayPrivate: the secrets file is 0600, the key is in no other
// generated file and a PSK never formats as itself.
func TestSecretsStayPrivate(t *testing.T) {
	dir := t.TempDir()
	s := &Spec{Topology: TopologyTest0, Role: RoleGW0, Tunnels: 3}
	s.Normalize()
	res, err := Generate(dir, s, NewPlan(s, "p0", "p1", true))
	if err != nil {
		t.Fatal(err)
	}
	if !res.GeneratedPSK {
		t.Fatal("no --psk-file but no key generated")
	}
	key, err := ReadPSK(filepath.Join(dir, PSKFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{SecretsFile, PSKFile} {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v (%v), want 0600", f, st.Mode().Perm(), err)
		}
	}
	for _, f := range []string{ConfFile, SpecFile, RoutingFile} {
		b, _ := os.ReadFile(filepath.Join(dir, f))
		if bytes.Contains(b, []byte(key.Hex()[2:])) {
			t.Errorf("%s contains the key", f)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, SecretsFile)); !bytes.Contains(b, []byte(key.Hex())) {
		t.Error("secrets.conf does not hold the key")
	}
	if fmt.Sprint(key) != "<psk redacted>" || fmt.Sprintf("%v %+v", key, []PSK{key}) == key.Hex() {
		t.Errorf("a PSK formats as %q", fmt.Sprint(key))
	}
	// up --dir finds the same spec and key again.
	s2, err := LoadSpec(dir)
	if err != nil || s2.Tunnels != 3 || s2.Role != RoleGW0 {
		t.Fatalf("LoadSpec: %+v %v", s2, err)
	}
	if k2, err := ReadPSK(s2.PSKFile); err != nil || !bytes.Equal(k2.Bytes(), key.Bytes()) {
		t.Fatalf("the key named by %s: %v", SpecFile, err)
	}
	for _, c := range []struct{ in, err string }{{"", "empty"}, {"0xzz", "not hex"}, {"0s!!", "not base64"}} {
		if _, err := ParsePSK(c.in); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("ParsePSK(%q): %v", c.in, err)
		}
	}
}

// TestRoutingPlanMatchesTheSeed checks the plan's commands for each role
// against the seed's "routings" scripts (small N, text level; the VM test
// applies one for real).
func TestRoutingPlanMatchesTheSeed(t *testing.T) {
	cmds := func(s *Spec) string {
		var b strings.Builder
		for _, st := range NewPlan(s, "p0", "p1", true).Steps {
			b.WriteString(strings.Join(st.Argv, " ") + "\n")
		}
		return b.String()
	}
	mk := func(topo, role string, n int, ports ...int) *Spec {
		s := &Spec{Topology: topo, Role: role, Tunnels: n, Ports: ports}
		s.Normalize()
		return s
	}
	for _, c := range []struct {
		s    *Spec
		want []string
		not  []string
	}{
		{mk(TopologyTest0, RoleGW0, 300), []string{"ip addr replace 123.0.0.1/16 dev p0", "ip addr replace 10.0.0.254/24 dev p1",
			"ip route replace 16.0.0.0/8 via 10.0.0.1", "ip route replace default via 10.10.10.10 dev dummy0", "sysctl -qw net.ipv4.ip_forward=1"}, []string{"123.0.0.2"}},
		{mk(TopologyTest0, RoleGW1, 300), []string{"ip addr replace 123.0.0.2/16 dev p0", "ip addr replace 123.0.0.255/16 dev p0",
			"ip addr replace 123.0.1.1/16 dev p0", "ip addr replace 123.0.1.46/16 dev p0", "ip route replace 48.0.0.0/8 via 11.0.0.1"}, []string{"123.0.1.47/"}},
		{mk(TopologyRouted, RoleGW0, 2), []string{"ip link add link p0 name p0.502 type vlan id 502", "ip link add link p1 name p1.504 type vlan id 504",
			"ip addr replace 123.1.0.1/16 dev p1", "ip addr replace 10.1.0.254/24 dev p1.504", "ip route replace 123.3.0.0/16 via 123.1.0.254",
			"ip route replace 17.0.0.0/8 via 10.1.0.1", "ip route replace 49.0.0.0/8 via 123.1.0.254"}, nil},
		{mk(TopologyRouted, RoleGW1, 2, 1), []string{"ip link add link p1 name p1.505 type vlan id 505", "ip addr replace 123.3.1.2/16 dev p1",
			"ip addr replace 123.3.1.3/16 dev p1", "ip addr replace 11.1.0.254/24 dev p1.505", "ip addr replace 123.3.0.1/16 dev p1",
			"ip route replace 123.1.0.0/16 via 123.3.0.254", "ip route replace 49.0.0.0/8 via 11.1.0.1", "ip route replace 17.0.0.0/8 via 123.3.0.254"},
			[]string{"p0", "123.3.1.4/"}},
	} {
		got := cmds(c.s)
		for _, w := range c.want {
			if !strings.Contains(got, w+"\n") {
				t.Errorf("%s %s: plan lacks %q:\n%s", c.s.Topology, c.s.Role, w, got)
			}
		}
		for _, n := range c.not {
			if strings.Contains(got, n) {
				t.Errorf("%s %s: plan has %q:\n%s", c.s.Topology, c.s.Role, n, got)
			}
		}
	}
	// The script is valid bash.
	var buf bytes.Buffer
	NewPlan(mk(TopologyRouted, RoleGW1, 3), "eth0", "eth1", true).WriteScript(&buf)
	if out, err := exec.Command("bash", "-n", "-c", buf.String()).CombinedOutput(); err != nil {
		t.Fatalf("routing.sh does not parse: %v\n%s\n%s", err, out, buf.String())
	}
}

// Names the kernel allows may still hold shell syntax ('$', ';', '('):
// the script's shell lines quote them, so bash runs no part of a name.
func TestRoutingScriptQuotesNames(t *testing.T) {
	spec := &Spec{Topology: TopologyRouted, Role: RoleGW1, Tunnels: 1}
	spec.Normalize()
	var buf bytes.Buffer
	NewPlan(spec, "a$(id)", "b;id", true).WriteScript(&buf)
	script := buf.String()
	for _, w := range []string{`ip link show dev 'a$(id).503' >/dev/null 2>&1 || ip link add link 'a$(id)' name 'a$(id).503' type vlan id 503`,
		`ip link show dev 'b;id.505' >/dev/null 2>&1 || ip link add link 'b;id' name 'b;id.505'`} {
		if !strings.Contains(script, w) {
			t.Errorf("routing.sh lacks %q:\n%s", w, script)
		}
	}
	if out, err := exec.Command("bash", "-n", "-c", script).CombinedOutput(); err != nil {
		t.Fatalf("routing.sh does not parse: %v\n%s", err, out)
	}
}
