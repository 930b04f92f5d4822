// SPDX-License-Identifier: Apache-2.0

package xfrm

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"sluice/internal/testutil"
)

var (
	pfx  = netip.MustParsePrefix
	addr = netip.MustParseAddr
)

// TestDumpPolicies installs policies with iproute2 and checks that every
// field comes back as the operator typed it.
func TestDumpPolicies(t *testing.T) {
	ns, h := testutil.NewNetNS(t)
	testutil.IP(t, ns, "link", "set", "lo", "up")
	cases := []struct {
		cmd  string
		want Policy
	}{
		{"src 10.0.1.0/24 dst 10.0.2.0/24 proto tcp sport 1000 dport 2000 dir out priority 100 mark 0x5 mask 0xff if_id 7 " +
			"tmpl src 192.0.2.1 dst 192.0.2.2 proto esp spi 0x1234 reqid 11 mode tunnel",
			Policy{Dir: DirOut, Priority: 100, Mark: 5, MarkMask: 0xff, IfID: 7,
				Sel: Selector{Src: pfx("10.0.1.0/24"), Dst: pfx("10.0.2.0/24"), Proto: unix.IPPROTO_TCP,
					SPort: 1000, SPortMask: 0xffff, DPort: 2000, DPortMask: 0xffff},
				Tmpls: []Tmpl{{Src: addr("192.0.2.1"), Dst: addr("192.0.2.2"), Proto: ProtoESP, SPI: 0x1234, Reqid: 11, Mode: ModeTunnel}}}},
		{"src 2001:db8:1::/64 dst 2001:db8:2::/64 proto udp sport 53 dport 5353 dir in priority 200 " +
			"tmpl proto esp reqid 12 mode transport level use",
			Policy{Dir: DirIn, Priority: 200,
				Sel: Selector{Src: pfx("2001:db8:1::/64"), Dst: pfx("2001:db8:2::/64"), Proto: unix.IPPROTO_UDP,
					SPort: 53, SPortMask: 0xffff, DPort: 5353, DPortMask: 0xffff},
				Tmpls: []Tmpl{{Proto: ProtoESP, Reqid: 12, Mode: ModeTransport, Optional: true}}}},
		// The kernel keeps the host bits (10.0.3.7/24); we report the prefix.
		// ICMP type and code travel in the port fields, host order.
		{"src 10.0.3.7/24 dst 10.0.4.0/24 proto icmp type 8 code 3 dir fwd action block",
			Policy{Dir: DirFwd, Action: ActionBlock,
				Sel: Selector{Src: pfx("10.0.3.0/24"), Dst: pfx("10.0.4.0/24"), Proto: unix.IPPROTO_ICMP,
					SPort: 8, SPortMask: 0xffff, DPort: 3, DPortMask: 0xffff}}},
		{"src 2001:db8:3::1/128 dst ::/0 proto ipv6-icmp type 128 code 0 dir fwd priority 5 " +
			"tmpl src 2001:db8::a dst 2001:db8::b proto esp mode tunnel reqid 13",
			Policy{Dir: DirFwd, Priority: 5,
				Sel: Selector{Src: pfx("2001:db8:3::1/128"), Dst: pfx("::/0"), Proto: unix.IPPROTO_ICMPV6,
					SPort: 128, SPortMask: 0xffff, DPortMask: 0xffff},
				Tmpls: []Tmpl{{Src: addr("2001:db8::a"), Dst: addr("2001:db8::b"), Proto: ProtoESP, Reqid: 13, Mode: ModeTunnel}}}},
		{"src 0.0.0.0/0 dst 10.9.0.0/16 dev lo dir out ptype sub " +
			"tmpl src 192.0.2.1 dst 192.0.2.3 proto ah reqid 14 mode tunnel tmpl proto comp mode transport level use",
			Policy{Dir: DirOut, Sub: true,
				Sel: Selector{Src: pfx("0.0.0.0/0"), Dst: pfx("10.9.0.0/16"), Ifindex: 1},
				Tmpls: []Tmpl{{Src: addr("192.0.2.1"), Dst: addr("192.0.2.3"), Proto: ProtoAH, Reqid: 14, Mode: ModeTunnel},
					{Proto: ProtoComp, Optional: true}}}},
	}
	for _, c := range cases {
		testutil.IP(t, ns, append([]string{"xfrm", "policy", "add"}, strings.Fields(c.cmd)...)...)
	}
	got, err := HandleAt(h).DumpPolicies()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(cases) {
		t.Fatalf("dumped %d policies, installed %d: %+v", len(got), len(cases), got)
	}
	for _, c := range cases {
		var p *Policy
		for i := range got {
			if got[i].Sel.Src == c.want.Sel.Src && got[i].Dir == c.want.Dir {
				p = &got[i]
			}
		}
		if p == nil {
			t.Errorf("%s: not dumped", c.cmd)
			continue
		}
		// The kernel numbers policies itself, keeping the direction in
		// the low 3 bits (xfrm_gen_index).
		if p.Index == 0 || Dir(p.Index%8) != c.want.Dir {
			t.Errorf("%s: index %#x does not carry dir %v", c.cmd, p.Index, c.want.Dir)
		}
		// Proto and Mode name themselves as ip xfrm spells them.
		for _, tm := range p.Tmpls {
			for _, w := range []string{"proto " + tm.Proto.String(), "mode " + tm.Mode.String()} {
				if !strings.Contains(" "+c.cmd+" ", " "+w+" ") {
					t.Errorf("%s: a template says %q, a word ip xfrm does not use here", c.cmd, w)
				}
			}
		}
		c.want.Index = p.Index
		if !reflect.DeepEqual(*p, c.want) {
			t.Errorf("ip xfrm policy add %s\n got %+v\nwant %+v", c.cmd, *p, c.want)
		}
	}
}

// TestPolicyAttrsOnKernelBytes covers the attributes the host cannot make
// (security contexts need an LSM, offload a packet-offload NIC): they are
// appended to a policy as the kernel dumped it.
func TestPolicyAttrsOnKernelBytes(t *testing.T) {
	ns, h := testutil.NewNetNS(t)
	testutil.IP(t, ns, "xfrm", "policy", "add", "src", "10.0.0.0/8", "dst", "10.1.0.0/16", "dir", "out", "tmpl", "proto", "esp")
	var raw [][]byte
	err := HandleAt(h).execute(xfrmRequest(nl.XFRM_MSG_GETPOLICY, unix.NLM_F_DUMP, nil), nl.XFRM_MSG_NEWPOLICY, func(b []byte) bool {
		raw = append(raw, append([]byte(nil), b...))
		return true
	})
	if err != nil || len(raw) != 1 {
		t.Fatalf("raw dump: %d messages, %v", len(raw), err)
	}
	plain, err := parsePolicyMsg(raw[0])
	if err != nil || plain.SecCtx || plain.Offload != nil || plain.Sub {
		t.Fatalf("plain policy: %+v, %v", plain, err)
	}
	// struct xfrm_user_sec_ctx (len, exttype, alg, doi, ctx_len) + context.
	ctx := append([]byte{14, 0, 8, 0, 1, 1, 6, 0}, "label\x00"...)
	ext := append(append(append([]byte(nil), raw[0]...),
		nlAttr(nl.XFRMA_SEC_CTX, ctx)...),
		nlAttr(nl.XFRMA_OFFLOAD_DEV, Offload{Ifindex: 4, Flags: OffloadPacket}.MarshalAttr())...)
	p, err := parsePolicyMsg(ext)
	if err != nil {
		t.Fatal(err)
	}
	if !p.SecCtx || !p.Offload.Packet() || p.Offload.Inbound() || p.Offload.Ifindex != 4 {
		t.Fatalf("extended policy: secctx=%v offload=%+v", p.SecCtx, p.Offload)
	}
	p.SecCtx, p.Offload = false, nil
	if !reflect.DeepEqual(p, plain) {
		t.Fatalf("extra attributes changed the rest:\n%+v\n%+v", p, plain)
	}
}

func TestPolicyDefaults(t *testing.T) {
	ns, h := testutil.NewNetNS(t)
	x := HandleAt(h)
	d, err := x.PolicyDefaults()
	if err != nil || d != (PolicyDefaults{ActionAllow, ActionAllow, ActionAllow}) {
		t.Fatalf("fresh namespace: %+v err=%v, want all allow", d, err)
	}
	testutil.IP(t, ns, "xfrm", "policy", "setdefault", "in", "block", "fwd", "accept", "out", "block")
	d, err = x.PolicyDefaults()
	if err != nil || d != (PolicyDefaults{ActionBlock, ActionAllow, ActionBlock}) {
		t.Fatalf("after setdefault in block fwd accept out block: %+v err=%v", d, err)
	}
}

// TestDumpStatesEmpty checks the GETSA dump plumbing on a kernel without
// SAs (no ESP here); the VM tests dump real SAs.
func TestDumpStatesEmpty(t *testing.T) {
	_, h := testutil.NewNetNS(t)
	states, err := HandleAt(h).DumpStates()
	if err != nil || len(states) != 0 {
		t.Fatalf("states %+v, err %v", states, err)
	}
}

// TestDumpPoliciesScale dumps 65,536 policies. Timing is logged, not
// asserted; docs/benchmarks.md carries the numbers.
func TestDumpPoliciesScale(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skips the 65,536-policy install")
	}
	ns, h := testutil.NewNetNS(t)
	const n = 1 << 16
	lines := make([]string, n)
	for i := range lines {
		lines[i] = fmt.Sprintf("xfrm policy add src 10.%d.%d.0/24 dst 172.16.0.0/16 dir out priority %d "+
			"tmpl src 192.0.2.1 dst 198.51.100.1 proto esp reqid %d mode tunnel", i>>8, i&255, i, i+1)
	}
	start := time.Now()
	testutil.IPBatch(t, ns, lines)
	t.Logf("ip -batch installed %d policies in %v", n, time.Since(start).Round(time.Millisecond))
	start = time.Now()
	got, err := HandleAt(h).DumpPolicies()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("DumpPolicies returned %d policies in %v", len(got), time.Since(start).Round(time.Millisecond))
	if len(got) != n {
		t.Fatalf("dumped %d policies, want %d", len(got), n)
	}
	seen := make([]bool, n)
	for _, p := range got {
		i := int(p.Priority)
		want := pfx(fmt.Sprintf("10.%d.%d.0/24", i>>8, i&255))
		if i >= n || seen[i] || p.Sel.Src != want || len(p.Tmpls) != 1 || p.Tmpls[0].Reqid != uint32(i+1) {
			t.Fatalf("policy %+v: wrong or duplicate (want src %v reqid %d)", p, want, i+1)
		}
		seen[i] = true
	}
}

// TestPolicyDefaultsRefusedIsAnError: only a kernel that does not know
// XFRM_MSG_GETDEFAULT means "accept". A refusal (here EPERM: the helper runs
// in a user namespace without CAP_NET_ADMIN over the host's network
// namespace) must be an error, not a guess.
func TestPolicyDefaultsRefusedIsAnError(t *testing.T) {
	if os.Getenv("SLUICE_POLICY_DEFAULTS_HELPER") == "1" {
		_, err := (&Handle{}).PolicyDefaults()
		switch {
		case err == nil:
			fmt.Println("RESULT no error")
		case errors.Is(err, ErrNoPolicyDefaults):
			fmt.Println("RESULT taken for an old kernel:", err)
		default:
			fmt.Println("RESULT error:", err)
		}
		return
	}
	testutil.RequireRoot(t, "creates a user namespace that lacks it")
	cmd := exec.Command("unshare", "--user", os.Args[0], "-test.run", "^TestPolicyDefaultsRefusedIsAnError$", "-test.count=1")
	cmd.Env = append(os.Environ(), "SLUICE_POLICY_DEFAULTS_HELPER=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "RESULT error:") || !strings.Contains(string(out), "operation not permitted") {
		t.Fatalf("GETDEFAULT without CAP_NET_ADMIN:\n%s\nwant an EPERM error", out)
	}
	if _, err := parsePolicyDefaults([]byte{1, 0}); err == nil {
		t.Fatal("a 2-byte xfrm_userpolicy_default was accepted")
	}
}
