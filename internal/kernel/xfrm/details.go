// SPDX-License-Identifier: Apache-2.0

package xfrm

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink/nl"
)

// StateDetail is an SA with what `show ipsec sa` prints and `sluice apply`
// compares beyond State: algorithms, counters, lifetimes, the replay window
// and the key's length and digest; the key itself only when asked for.
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
	// ReplayWindow as installed: the window from XFRMA_REPLAY_ESN_VAL when
	// ESN is on.
	ReplayWindow uint32 `json:"-"`
	// KeyBits is the AEAD key's length (salt included) and KeyDigest its
	// SHA-256 (KeyDigest(key)), so a changed key is seen without the key
	// leaving this package; both zero for non-AEAD SAs.
	KeyBits   uint32   `json:"-"`
	KeyDigest [32]byte `json:"-"`
	// OSeq is the last sequence number sent, Seq the highest received
	// (XFRMA_REPLAY_ESN_VAL, else XFRMA_REPLAY_VAL; 64-bit with ESN). For
	// a packet-offloaded SA the device counts, and they may stay 0.
	OSeq, Seq uint64 `json:"-"`
}

// KeyDigest is the digest StateDetail.KeyDigest holds for key.
func KeyDigest(key []byte) [32]byte { return sha256.Sum256(key) }

// StateDetails dumps the SAs of the calling thread's namespace with their
// details, key material (hex) only if keys.
func StateDetails(keys bool) ([]StateDetail, error) {
	ss, err := xfrmDump(&Handle{}, nl.XFRM_MSG_GETSA, nl.XFRM_MSG_NEWSA, func(b []byte) (StateDetail, error) {
		return parseStateDetail(b, keys)
	})
	if err != nil {
		return nil, fmt.Errorf("dump xfrm states: %w", err)
	}
	return ss, nil
}

// parseStateDetail decodes XFRM_MSG_NEWSA as parseStateMsg does, plus the
// counters and limits of struct xfrm_usersa_info and the algorithms' keys
// (their digest; the hex key only if keys).
func parseStateDetail(b []byte, keys bool) (StateDetail, error) {
	st, err := parseStateMsg(b)
	if err != nil {
		return StateDetail{}, err
	}
	lft, cur, stats := b[saLft:], b[saCurlft:], b[saStats:]
	d := StateDetail{State: st,
		Bytes: ne.Uint64(cur[curBytes:]), Packets: ne.Uint64(cur[curPackets:]),
		AddTime: ne.Uint64(cur[curAdd:]), UseTime: ne.Uint64(cur[curUse:]),
		Replay: ne.Uint32(stats[statsReplay:]), Failed: ne.Uint32(stats[statsIntegrityFailed:]),
		SoftBytes: unlimited(ne.Uint64(lft[lftSoftByte:])), HardBytes: unlimited(ne.Uint64(lft[lftHardByte:])),
		SoftAdd: ne.Uint64(lft[lftSoftAdd:]), HardAdd: ne.Uint64(lft[lftHardAdd:]),
		ReplayWindow: uint32(b[saReplayWindow]),
	}
	a, err := xfrmAttrs(b[xfrmSAInfoLen:])
	if err != nil {
		return StateDetail{}, err
	}
	if v, ok := a[nl.XFRMA_REPLAY_ESN_VAL]; ok && len(v) >= xfrmReplayESNLen {
		d.ReplayWindow = ne.Uint32(v[replayESNWindow:])
		d.OSeq = uint64(ne.Uint32(v[replayESNOseqHi:]))<<32 | uint64(ne.Uint32(v[replayESNOseq:]))
		d.Seq = uint64(ne.Uint32(v[replayESNSeqHi:]))<<32 | uint64(ne.Uint32(v[replayESNSeq:]))
	} else if v, ok := a[nl.XFRMA_REPLAY_VAL]; ok && len(v) >= replayLen {
		d.OSeq, d.Seq = uint64(ne.Uint32(v[replayOseq:])), uint64(ne.Uint32(v[replaySeq:]))
	}
	// The algorithms in the order `show ipsec sa` has always printed them.
	var hexKeys []string
	for _, alg := range []struct {
		typ    uint16
		header int
	}{{nl.XFRMA_ALG_AEAD, xfrmAlgoAEADLen}, {nl.XFRMA_ALG_CRYPT, xfrmAlgoLen}, {nl.XFRMA_ALG_AUTH_TRUNC, xfrmAlgoAEADLen}} {
		v, ok := a[alg.typ]
		if !ok && alg.typ == nl.XFRMA_ALG_AUTH_TRUNC {
			alg.header = xfrmAlgoLen // a kernel that sent the untruncated form only
			v, ok = a[nl.XFRMA_ALG_AUTH]
		}
		if !ok || len(v) < alg.header {
			continue
		}
		if d.Algorithm != "" {
			d.Algorithm += " + "
		}
		d.Algorithm += algoName(v)
		bits := ne.Uint32(v[algoKeyLen:])
		key := v[alg.header:]
		if n := int(bits+7) / 8; n <= len(key) {
			key = key[:n]
		}
		if alg.typ == nl.XFRMA_ALG_AEAD {
			d.KeyBits, d.KeyDigest = bits, KeyDigest(key)
		}
		if keys {
			hexKeys = append(hexKeys, hex.EncodeToString(key))
		}
	}
	if keys && len(hexKeys) > 0 {
		k := strings.Join(hexKeys, " ")
		d.Key = &k
	}
	return d, nil
}

// unlimited maps the kernel's "no limit" (all ones) to 0.
func unlimited(v uint64) uint64 {
	if v == ^uint64(0) {
		return 0
	}
	return v
}

// Stats reads /proc/net/xfrm_stat (the kernel's XFRM error counters).
func Stats() (map[string]uint64, error) {
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
