// SPDX-License-Identifier: Apache-2.0

package wire

import (
	"encoding/hex"
	"strings"
	"testing"
)

func frame(t *testing.T, h string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(h, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

const (
	eth4 = "020000000002 020000000001 0800"
	eth6 = "020000000002 020000000001 86dd"
	// IPv4 header without checksum: 10.0.0.1 > 48.0.1.1, protocol set by %s.
	ip4 = "45000054 0000 4000 40 %s 0000 0a000001 30000101"
	ip6 = "60000000 0010 %s 40 fd710000000000000000000000000001 fd720000000000000000000000000001"
)

func ipv4(proto, flags string) string {
	h := strings.Replace(ip4, "%s", proto, 1)
	return strings.Replace(h, "4000", flags, 1)
}

// TestClassifyFrame: the oracle tells ESP from cleartext and from link
// control as the leak assertions need, behind VLAN tags and IPv6
// extension headers too.
func TestClassifyFrame(t *testing.T) {
	pad := strings.Repeat("00", 40)
	cases := []struct {
		name string
		hex  string
		want FrameClass
	}{
		{"ipv4 esp", eth4 + ipv4("32", "4000") + pad, ESP},
		{"ipv4 icmp", eth4 + ipv4("01", "4000") + pad, Cleartext},
		{"ipv4 first fragment", eth4 + ipv4("01", "2000") + pad, Cleartext},
		{"ipv4 esp in udp 4500", eth4 + ipv4("11", "4000") + "1194 1194 0010 0000 00001001" + pad, ESP},
		{"ipv4 ike marker on 4500", eth4 + ipv4("11", "4000") + "1194 1194 0010 0000 00000000" + pad, Cleartext},
		{"ipv4 igmp", eth4 + ipv4("02", "4000") + pad, LinkControl},
		{"vlan ipv4 icmp", "020000000002 020000000001 8100 01f6 0800" + ipv4("01", "4000") + pad, Cleartext},
		{"qinq ipv4 esp", "020000000002 020000000001 88a8 0064 8100 01f6 0800" + ipv4("32", "4000") + pad, ESP},
		{"arp", "ffffffffffff 020000000001 0806" + pad, LinkControl},
		{"lldp", "0180c200000e 020000000001 88cc" + pad, LinkControl},
		{"mpls", "020000000002 020000000001 8847" + pad, NonIP},
		{"ipv6 esp", eth6 + strings.Replace(ip6, "%s", "32", 1) + pad, ESP},
		{"ipv6 udp", eth6 + strings.Replace(ip6, "%s", "11", 1) + pad, Cleartext},
		{"ipv6 dstopts then esp", eth6 + strings.Replace(ip6, "%s", "3c", 1) + "3200000000000000" + pad, ESP},
		{"ipv6 fragment then udp", eth6 + strings.Replace(ip6, "%s", "2c", 1) + "1100000100000001" + pad, Cleartext},
		{"ipv6 neighbour solicitation", eth6 + strings.Replace(ip6, "%s", "3a", 1) + "87000000" + pad, LinkControl},
	}
	for _, c := range cases {
		f := ClassifyFrame(frame(t, c.hex))
		if f.Class != c.want {
			t.Errorf("%s: %s, want %s", c.name, f, c.want)
		}
	}
	esp := ClassifyFrame(frame(t, eth4+ipv4("32", "4000")+"00001001 00000007"+pad))
	if esp.SPI != 0x1001 || esp.Seq != 7 {
		t.Errorf("ipv4 esp: %s, want spi 0x1001 seq 7", esp)
	}
	f := ClassifyFrame(frame(t, eth6+strings.Replace(ip6, "%s", "2c", 1)+"1100000100000001"+pad))
	if !f.Fragment || f.Proto != 17 {
		t.Errorf("ipv6 fragment: %s, want a UDP fragment", f)
	}
}

// TestFlowHas: a flow selects by prefix, in one direction.
func TestFlowHas(t *testing.T) {
	f := ClassifyFrame(frame(t, eth4+ipv4("01", "4000")+strings.Repeat("00", 40)))
	if !FlowOf("10.0.0.0/8", "48.0.1.0/24").Has(f) || FlowOf("48.0.1.0/24", "10.0.0.0/8").Has(f) {
		t.Errorf("flow 10/8 > 48.0.1/24 and its reverse on %s: want true, false", f)
	}
	if !FlowOf("10.0.0.1", "48.0.1.1").Has(f) || (Flow{}).Has(ClassifyFrame(frame(t, "ffffffffffff 020000000001 0806"+strings.Repeat("00", 40)))) {
		t.Errorf("host flow or ARP: wrong")
	}
}
