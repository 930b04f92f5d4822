// SPDX-License-Identifier: Apache-2.0

package xfrm

import (
	"bufio"
	"encoding/hex"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
)

// StateDetail is an SA with what `show ipsec sa` prints beyond State:
// algorithms, counters and lifetimes, and keys only when asked for.
type StateDetail struct {
	State
	Algorithm string  `json:"algorithm"`
	Bytes     uint64  `json:"bytes"`
	Packets   uint64  `json:"packets"`
	Failed    uint32  `json:"integrity_failed"`
	Replay    uint32  `json:"replay_dropped"`
	AddTime   uint64  `json:"add_time"`
	UseTime   uint64  `json:"use_time"`
	SoftBytes uint64  `json:"soft_byte_limit,omitempty"`
	HardBytes uint64  `json:"hard_byte_limit,omitempty"`
	SoftAdd   uint64  `json:"soft_add_expires_seconds,omitempty"`
	HardAdd   uint64  `json:"hard_add_expires_seconds,omitempty"`
	Key       *string `json:"key,omitempty"` // hex; set only with keys=true
}

type saID struct {
	dst   netip.Addr
	spi   uint32
	proto uint8
}

// StateDetails dumps the SAs of the calling thread's namespace. Offload
// comes from our own parser (the library drops XFRMA_OFFLOAD_DEV);
// counters, lifetimes and (if keys) key material from vishvananda/netlink.
func StateDetails(keys bool) ([]StateDetail, error) {
	states, err := DumpStates()
	if err != nil {
		return nil, err
	}
	lib, err := netlink.XfrmStateList(netlink.FAMILY_ALL)
	if err != nil {
		return nil, err
	}
	byID := map[saID]*netlink.XfrmState{}
	for i := range lib {
		d, _ := netip.AddrFromSlice(lib[i].Dst)
		byID[saID{d.Unmap(), uint32(lib[i].Spi), uint8(lib[i].Proto)}] = &lib[i]
	}
	out := make([]StateDetail, 0, len(states))
	for _, s := range states {
		d := StateDetail{State: s}
		if l := byID[saID{s.Dst, s.SPI, s.Proto}]; l != nil {
			st := l.Statistics
			d.Bytes, d.Packets, d.Failed, d.Replay, d.AddTime, d.UseTime = st.Bytes, st.Packets, st.Failed, st.Replay, st.AddTime, st.UseTime
			d.SoftBytes, d.HardBytes = unlimited(l.Limits.ByteSoft), unlimited(l.Limits.ByteHard)
			d.SoftAdd, d.HardAdd = l.Limits.TimeSoft, l.Limits.TimeHard
			for _, a := range []*netlink.XfrmStateAlgo{l.Aead, l.Crypt, l.Auth} {
				if a == nil {
					continue
				}
				if d.Algorithm != "" {
					d.Algorithm += " + "
				}
				d.Algorithm += a.Name
				if keys {
					k := hex.EncodeToString(a.Key)
					if d.Key != nil {
						k = *d.Key + " " + k
					}
					d.Key = &k
				}
			}
		}
		out = append(out, d)
	}
	return out, nil
}

// unlimited maps the kernel's "no limit" (all ones) to 0.
func unlimited(v uint64) uint64 {
	if v == ^uint64(0) {
		return 0
	}
	return v
}

// XFRMStats reads /proc/net/xfrm_stat (the kernel's XFRM error counters).
func XFRMStats() (map[string]uint64, error) {
	f, err := os.Open("/proc/net/xfrm_stat")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]uint64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) == 2 {
			n, _ := strconv.ParseUint(fs[1], 10, 64)
			out[fs[0]] = n
		}
	}
	return out, sc.Err()
}
