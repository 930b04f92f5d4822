// SPDX-License-Identifier: Apache-2.0

package xfrm

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// Decoding of the XFRM uapi structs (include/uapi/linux/xfrm.h). We read the
// bytes ourselves instead of going through vishvananda/netlink's XfrmPolicy
// and XfrmState because those drop what the fast path needs (port masks,
// template "optional", policy type, security context, offload device).
// The offsets are named in layout.go.

// nlaTypeMask strips NLA_F_NESTED and NLA_F_NET_BYTEORDER from a type.
const nlaTypeMask = 0x3fff

// Netlink carries host-order integers in native byte order; addresses,
// ports and SPIs are big endian, as on the wire.
var (
	ne = binary.NativeEndian
	be = binary.BigEndian
)

// xfrmAddr reads an xfrm_address_t (xfrmAddrLen bytes) for the given family. An
// unspecified family yields the zero Addr: SA selectors may leave it unset.
func xfrmAddr(b []byte, family uint16) (netip.Addr, error) {
	switch family {
	case unix.AF_INET:
		return netip.AddrFrom4([4]byte(b[:4])), nil
	case unix.AF_INET6:
		return netip.AddrFrom16([xfrmAddrLen]byte(b[:xfrmAddrLen])), nil
	case unix.AF_UNSPEC:
		return netip.Addr{}, nil
	}
	return netip.Addr{}, fmt.Errorf("unknown address family %d", family)
}

// xfrmEndpoint is xfrmAddr for template/SA endpoints, where all-zero means
// "not set" (transport-mode templates carry 0.0.0.0).
func xfrmEndpoint(b []byte, family uint16) (netip.Addr, error) {
	a, err := xfrmAddr(b, family)
	if err != nil || a.IsUnspecified() {
		return netip.Addr{}, err
	}
	return a, nil
}

func parseSelector(b []byte) (Selector, error) {
	if len(b) < xfrmSelectorLen {
		return Selector{}, fmt.Errorf("xfrm_selector: %d bytes, want %d", len(b), xfrmSelectorLen)
	}
	family := ne.Uint16(b[selFamily:])
	s := Selector{
		DPort:     be.Uint16(b[selDport:]),
		DPortMask: be.Uint16(b[selDportMsk:]),
		SPort:     be.Uint16(b[selSport:]),
		SPortMask: be.Uint16(b[selSportMsk:]),
		Proto:     b[selProto],
		Ifindex:   int(int32(ne.Uint32(b[selIfindex:]))),
	}
	if family == unix.AF_UNSPEC {
		return s, nil
	}
	var err error
	if s.Dst, err = selPrefix(b[selDaddr:], family, b[selPlenD]); err != nil {
		return s, fmt.Errorf("xfrm_selector dst: %w", err)
	}
	if s.Src, err = selPrefix(b[selSaddr:], family, b[selPlenS]); err != nil {
		return s, fmt.Errorf("xfrm_selector src: %w", err)
	}
	return s, nil
}

// selPrefix masks the host bits: the kernel keeps whatever the user typed
// (10.0.0.1/24) but matches only the prefix, and BPF LPM keys need the
// canonical form.
func selPrefix(b []byte, family uint16, plen uint8) (netip.Prefix, error) {
	a, err := xfrmAddr(b, family)
	if err != nil {
		return netip.Prefix{}, err
	}
	p, err := a.Prefix(int(plen))
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("prefix length %d for %s", plen, a)
	}
	return p, nil
}

func parsePolicyInfo(b []byte) (Policy, error) {
	if len(b) < xfrmPolicyInfoLen {
		return Policy{}, fmt.Errorf("xfrm_userpolicy_info: %d bytes, want %d", len(b), xfrmPolicyInfoLen)
	}
	sel, err := parseSelector(b[polSel:])
	if err != nil {
		return Policy{}, err
	}
	return Policy{
		Sel:      sel,
		Priority: ne.Uint32(b[polPriority:]),
		Index:    ne.Uint32(b[polIndex:]),
		Dir:      Dir(b[polDir]),
		Action:   Action(b[polAction]),
	}, nil
}

func parseTmpls(b []byte) ([]Tmpl, error) {
	if len(b)%xfrmTmplLen != 0 {
		return nil, fmt.Errorf("XFRMA_TMPL: %d bytes is not a multiple of %d", len(b), xfrmTmplLen)
	}
	ts := make([]Tmpl, 0, len(b)/xfrmTmplLen)
	for ; len(b) > 0; b = b[xfrmTmplLen:] {
		family := ne.Uint16(b[tmplFamily:])
		dst, err := xfrmEndpoint(b[tmplDaddr:], family)
		if err != nil {
			return nil, fmt.Errorf("xfrm_user_tmpl: %w", err)
		}
		src, _ := xfrmEndpoint(b[tmplSaddr:], family)
		ts = append(ts, Tmpl{
			Dst: dst, Src: src,
			SPI:      be.Uint32(b[tmplSPI:]),
			Proto:    b[tmplProto],
			Reqid:    ne.Uint32(b[tmplReqid:]),
			Mode:     b[tmplMode],
			Optional: b[tmplOptional] != 0,
		})
	}
	return ts, nil
}

func parseStateInfo(b []byte) (State, error) {
	if len(b) < xfrmSAInfoLen {
		return State{}, fmt.Errorf("xfrm_usersa_info: %d bytes, want %d", len(b), xfrmSAInfoLen)
	}
	sel, err := parseSelector(b[saSel:])
	if err != nil {
		return State{}, err
	}
	family := ne.Uint16(b[saFamily:])
	dst, err := xfrmEndpoint(b[saDaddr:], family)
	if err != nil {
		return State{}, fmt.Errorf("xfrm_usersa_info: %w", err)
	}
	src, _ := xfrmEndpoint(b[saSaddr:], family)
	return State{
		Dst: dst, Src: src,
		SPI:   be.Uint32(b[saSPI:]),
		Proto: b[saProto],
		Reqid: ne.Uint32(b[saReqid:]),
		Mode:  b[saMode],
		Sel:   sel,
		Alg:   StateAlg{ESN: b[saFlags]&nl.XFRM_STATE_ESN != 0},
	}, nil
}

// xfrmAttrs splits netlink attributes by type. Malformed lengths are an
// error rather than a silent stop: a half-read policy must not reach the
// fast path.
func xfrmAttrs(b []byte) (map[uint16][]byte, error) {
	m := make(map[uint16][]byte, 4)
	for len(b) >= unix.SizeofRtAttr {
		l, t := int(ne.Uint16(b)), ne.Uint16(b[2:])&nlaTypeMask
		if l < unix.SizeofRtAttr || l > len(b) {
			return nil, fmt.Errorf("attribute %d: length %d with %d bytes left", t, l, len(b))
		}
		m[t] = b[unix.SizeofRtAttr:l]
		b = b[min((l+3)&^3, len(b)):]
	}
	return m, nil
}

// markAndIfID reads XFRMA_MARK and XFRMA_IF_ID, shared by policies and SAs.
func markAndIfID(a map[uint16][]byte) (mark, mask, ifid uint32, err error) {
	if v, ok := a[nl.XFRMA_MARK]; ok {
		if len(v) < xfrmMarkLen {
			return 0, 0, 0, fmt.Errorf("XFRMA_MARK: %d bytes, want %d", len(v), xfrmMarkLen)
		}
		mark, mask = ne.Uint32(v[markValue:]), ne.Uint32(v[markMask:])
	}
	if v, ok := a[nl.XFRMA_IF_ID]; ok {
		if len(v) < 4 {
			return 0, 0, 0, fmt.Errorf("XFRMA_IF_ID: %d bytes, want 4", len(v))
		}
		ifid = ne.Uint32(v)
	}
	return mark, mask, ifid, nil
}

func offloadAttr(a map[uint16][]byte) (*Offload, error) {
	if v, ok := a[nl.XFRMA_OFFLOAD_DEV]; ok {
		return ParseOffload(v)
	}
	return nil, nil
}

func applyPolicyAttrs(p *Policy, a map[uint16][]byte) (err error) {
	if v, ok := a[nl.XFRMA_TMPL]; ok {
		if p.Tmpls, err = parseTmpls(v); err != nil {
			return err
		}
	}
	if p.Mark, p.MarkMask, p.IfID, err = markAndIfID(a); err != nil {
		return err
	}
	if v, ok := a[nl.XFRMA_POLICY_TYPE]; ok {
		if len(v) < 1 {
			return fmt.Errorf("XFRMA_POLICY_TYPE: empty")
		}
		p.Sub = v[policyTypeType] == xfrmPolicyTypeSub
	}
	_, p.SecCtx = a[nl.XFRMA_SEC_CTX]
	p.Offload, err = offloadAttr(a)
	return err
}

// Of XFRMA_ALG_* only names and lengths are read: key material is
// deliberately never looked at.
func applyStateAttrs(s *State, a map[uint16][]byte) (err error) {
	if s.Mark, s.MarkMask, s.IfID, err = markAndIfID(a); err != nil {
		return err
	}
	if v, ok := a[nl.XFRMA_ALG_AEAD]; ok && len(v) >= xfrmAlgoAEADLen {
		s.Alg.AEAD, s.Alg.ICVBits = algoName(v), int(ne.Uint32(v[algoICVLen:]))
	}
	if v, ok := a[nl.XFRMA_ALG_CRYPT]; ok && len(v) >= xfrmAlgoNameLen {
		s.Alg.Crypt = algoName(v)
	}
	if v, ok := a[nl.XFRMA_ALG_AUTH_TRUNC]; ok && len(v) >= xfrmAlgoAEADLen {
		s.Alg.Auth, s.Alg.AuthTruncBits = algoName(v), int(ne.Uint32(v[algoICVLen:]))
	} else if v, ok := a[nl.XFRMA_ALG_AUTH]; ok && len(v) >= xfrmAlgoNameLen {
		s.Alg.Auth = algoName(v)
	}
	if v, ok := a[nl.XFRMA_ENCAP]; ok && len(v) >= encapType+2 {
		s.Alg.Encap = ne.Uint16(v[encapType:])
	}
	// Short direction or CPU attributes are errors, not "absent": an SA
	// read as unrestricted would reach the fast path as one it may use.
	if v, ok := a[nl.XFRMA_SA_DIR]; ok {
		if len(v) < 1 {
			return fmt.Errorf("XFRMA_SA_DIR: empty")
		}
		s.Dir = SADir(v[0])
	}
	if v, ok := a[nl.XFRMA_SA_PCPU]; ok {
		if len(v) < 4 {
			return fmt.Errorf("XFRMA_SA_PCPU: %d bytes, want 4", len(v))
		}
		s.PerCPU, s.CPU = true, ne.Uint32(v)
	}
	s.Offload, err = offloadAttr(a)
	return err
}

// parsePolicyMsg decodes XFRM_MSG_NEWPOLICY/UPDPOLICY (dumps and events).
func parsePolicyMsg(b []byte) (Policy, error) {
	p, err := parsePolicyInfo(b)
	if err != nil {
		return p, err
	}
	a, err := xfrmAttrs(b[xfrmPolicyInfoLen:])
	if err == nil {
		err = applyPolicyAttrs(&p, a)
	}
	return p, err
}

// parseStateMsg decodes XFRM_MSG_NEWSA/UPDSA (dumps and events).
func parseStateMsg(b []byte) (State, error) {
	s, err := parseStateInfo(b)
	if err != nil {
		return s, err
	}
	a, err := xfrmAttrs(b[xfrmSAInfoLen:])
	if err == nil {
		err = applyStateAttrs(&s, a)
	}
	return s, err
}

// algoName reads the name of a struct xfrm_algo, _auth or _aead.
func algoName(v []byte) string {
	return unix.ByteSliceToString(v[algoNameOff : algoNameOff+xfrmAlgoNameLen])
}
