// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/vishvananda/netns"

	"sluice/internal/fileread"
	"sluice/internal/kernel"
)

// A lost datagram is only explained by a kernel counter that rose while
// it was in flight. The bench samples, at every window boundary, the
// counters of both hosts that name a drop: /proc/net/xfrm_stat (IPsec:
// no state, expired or invalid state, replay), /proc/net/snmp's Ip and
// Udp errors (a full socket buffer is Udp RcvbufErrors), /proc/net/dev's
// per-device drops, and the guest's softnet backlog drops. Each rekey
// gets the deltas of its window, and each loss a cause from them.

// dropCounterNames are the /proc/net/snmp counters that count a dropped
// packet (the rest count traffic).
var dropCounterNames = map[string][]string{
	"Ip":  {"InHdrErrors", "InAddrErrors", "InUnknownProtos", "InDiscards", "OutDiscards", "OutNoRoutes", "ReasmFails", "FragFails"},
	"Udp": {"NoPorts", "InErrors", "RcvbufErrors", "SndbufErrors", "InCsumErrors", "MemErrors"},
}

// Causes of a loss, from the counters of its window.
const (
	CauseSend        = "send error"         // A's kernel refused the datagram (write error)
	CauseIPsec       = "IPsec"              // an xfrm_stat counter rose
	CauseOutside     = "outside IPsec"      // only non-IPsec drop counters rose
	CauseUnexplained = "no counter rose"    // nothing in the kernel says where
	causeSocketFull  = "B socket drops"     // key of the receiver's SO_RXQ_OVFL count
	counterSoftnet   = "VM softnet dropped" // backlog drops, the whole guest
)

// nsCounters holds /proc/net files opened inside one network namespace:
// a proc net file keeps reading the namespace it was opened in, so each
// sample is a read, not a fork of ip netns exec.
type nsCounters struct {
	side  string
	files map[string]*os.File // xfrm_stat, snmp, dev
}

func openCounters(side, ns string) (*nsCounters, error) {
	c := &nsCounters{side: side, files: map[string]*os.File{}}
	open := func() error {
		for _, name := range []string{"xfrm_stat", "snmp", "dev"} {
			f, err := os.Open("/proc/thread-self/net/" + name)
			if err != nil {
				if name == "xfrm_stat" && os.IsNotExist(err) {
					continue // CONFIG_XFRM_STATISTICS off
				}
				return err
			}
			c.files[name] = f
		}
		return nil
	}
	if ns == "" {
		return c, open()
	}
	h, err := netns.GetFromName(ns)
	if err != nil {
		return nil, fmt.Errorf("netns %s: %w", ns, err)
	}
	defer h.Close()
	if err := kernel.InNetns(h, open); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (c *nsCounters) Close() {
	for _, f := range c.files {
		f.Close()
	}
}

// read adds this namespace's drop counters to m, keyed "A xfrm
// XfrmInNoStates", "B Udp RcvbufErrors", "B dev bond0 rx_dropped".
func (c *nsCounters) read(m map[string]uint64) {
	for name, f := range c.files {
		b, err := readAt0(f)
		if err != nil {
			continue
		}
		switch name {
		case "xfrm_stat":
			parseXfrmStat(b, c.side+" xfrm ", m)
		case "snmp":
			parseSNMP(b, c.side+" ", m)
		case "dev":
			parseNetDev(b, c.side+" dev ", m)
		}
	}
}

func readAt0(f *os.File) ([]byte, error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	return io.ReadAll(f)
}

func parseXfrmStat(b []byte, prefix string, m map[string]uint64) {
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) == 2 {
			if v, err := strconv.ParseUint(f[1], 10, 64); err == nil {
				m[prefix+f[0]] = v
			}
		}
	}
}

// parseSNMP reads /proc/net/snmp's header/value line pairs, keeping the
// drop counters of dropCounterNames.
func parseSNMP(b []byte, prefix string, m map[string]uint64) {
	lines := strings.Split(string(b), "\n")
	for i := 0; i+1 < len(lines); i++ {
		names, values := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		if len(names) < 2 || len(names) != len(values) || names[0] != values[0] {
			continue
		}
		proto := strings.TrimSuffix(names[0], ":")
		keep := dropCounterNames[proto]
		for j := 1; j < len(names); j++ {
			if slices.Contains(keep, names[j]) {
				if v, err := strconv.ParseUint(values[j], 10, 64); err == nil {
					m[prefix+proto+" "+names[j]] = v
				}
			}
		}
		i++
	}
}

// parseNetDev reads /proc/net/dev: per device, rx errs and drop are
// fields 3-4, tx errs and drop fields 11-12 (1-based after the name).
func parseNetDev(b []byte, prefix string, m map[string]uint64) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		name = strings.TrimSpace(name)
		if !ok || name == "lo" {
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 16 {
			continue
		}
		for _, c := range []struct {
			i int
			k string
		}{{2, "rx_errors"}, {3, "rx_dropped"}, {10, "tx_errors"}, {11, "tx_dropped"}} {
			if v, err := strconv.ParseUint(f[c.i], 10, 64); err == nil {
				m[prefix+name+" "+c.k] = v
			}
		}
	}
}

// softnetDropped sums the second column of /proc/net/softnet_stat: packets
// the guest dropped because a CPU's backlog was full (netdev_max_backlog).
// The data is per CPU, not per namespace.
func softnetDropped(m map[string]uint64) {
	b, err := fileread.ReadKernel("/proc/net/softnet_stat", fileread.ProcLimit)
	if err != nil {
		return
	}
	var sum uint64
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		if v, err := strconv.ParseUint(f[1], 16, 64); err == nil {
			sum += v
		}
	}
	m[counterSoftnet] = sum
}

// counterSampler takes samples of both hosts' counters plus the
// receiver's socket drops.
type counterSampler struct {
	a, b        *nsCounters
	socketDrops func() uint64
}

func (s *counterSampler) sample() map[string]uint64 {
	m := map[string]uint64{}
	if s == nil {
		return m
	}
	s.a.read(m)
	s.b.read(m)
	softnetDropped(m)
	if s.socketDrops != nil {
		m[causeSocketFull] = s.socketDrops()
	}
	return m
}

func (s *counterSampler) Close() {
	if s != nil {
		s.a.Close()
		s.b.Close()
	}
}

// isIPsecCounter: a counter of xfrm_stat, the kernel's IPsec drops.
func isIPsecCounter(k string) bool { return strings.Contains(k, " xfrm ") }

// causeOf names the cause of a window's losses from its counters.
func causeOf(sendErrs int, drops map[string]uint64) string {
	if sendErrs > 0 {
		return CauseSend
	}
	outside := false
	for k := range drops {
		if isIPsecCounter(k) {
			return CauseIPsec
		}
		outside = true
	}
	if outside {
		return CauseOutside
	}
	return CauseUnexplained
}

// formatCounters prints counters as "name +n, ..." in name order.
func formatCounters(m map[string]uint64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s +%d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func openSampler(nsA, nsB string) (*counterSampler, error) {
	a, err := openCounters("A", nsA)
	if err != nil {
		return nil, fmt.Errorf("counters in %q: %w", nsA, err)
	}
	b, err := openCounters("B", nsB)
	if err != nil {
		a.Close()
		return nil, fmt.Errorf("counters in %q: %w", nsB, err)
	}
	return &counterSampler{a: a, b: b}, nil
}

// counterDelta keeps the counters that rose from before to after.
func counterDelta(before, after map[string]uint64) map[string]uint64 {
	var d map[string]uint64
	for k, v := range after {
		if v > before[k] {
			if d == nil {
				d = map[string]uint64{}
			}
			d[k] = v - before[k]
		}
	}
	return d
}
