// SPDX-License-Identifier: Apache-2.0

package xfrm

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// Why a migration is a Resync, not an update:
//
// XFRM_MSG_MIGRATE (MOBIKE, libreswan; Linux 2.6.21 on) is announced only on
// XFRMNLGRP_MIGRATE. In xfrm_migrate() (net/xfrm/xfrm_policy.c) the kernel
// rewrites the policy's templates in place, inserts copies of the SAs with
// the new addresses and deletes the old ones; none of that is notified on
// the POLICY or SA groups, and km_migrate() runs last, once it is all done.
// The message says which endpoints moved, not what the kernel now holds (the
// new SAs' offload device, for one, comes from an attribute the
// announcement leaves out). XFRM_MSG_MIGRATE_STATE (Linux 7.2) replaces one
// SA in place, keeping its sequence numbers, and may keep, change or drop
// its offload device; it too is announced only on the MIGRATE group, after
// the fact.
//
// Applying either to the copy would mean re-deriving the kernel's migration
// logic; missing it leaves the fast path forwarding into a device, or to a
// peer, that is no longer the SA's. So the monitor reports both as Resync:
// the mirror closes the fast path at once and dumps, and the dump already
// holds the migrated state.

// xfrmMsgMigrateState is XFRM_MSG_MIGRATE_STATE (Linux 7.2; 0x29, the type
// after XFRM_MSG_GETDEFAULT in 7.3.4's uapi); nl does not have it. The
// kernel sends it on the MIGRATE group only (xfrm_send_migrate_state),
// after the new SA is installed.
const xfrmMsgMigrateState = xfrmMsgGetDefault + 1

// Message types the watch knows and deliberately ignores: none changes a
// policy or an SA. Their groups are not joined; should one arrive anyway,
// it is no reason to resync.
var ignoredTypes = map[uint16]string{
	nl.XFRM_MSG_ACQUIRE: "acquire", // the kernel asks for an SA; it adds none
	nl.XFRM_MSG_NEWAE:   "aevent",  // replay and lifetime counters
	nl.XFRM_MSG_REPORT:  "report",
	nl.XFRM_MSG_MAPPING: "mapping", // a NAT-T port moved; the IKE daemon updates the SA (UPDSA)
}

// Migration is one entry of XFRM_MSG_MIGRATE: the SAs and templates of
// Proto/Mode/Reqid between Old* now run between New*.
type Migration struct {
	OldSrc, OldDst netip.Addr
	NewSrc, NewDst netip.Addr
	Proto          Proto
	Mode           Mode
	Reqid          uint32
}

// migrateResync turns XFRM_MSG_MIGRATE into a Resync whose Err says what
// moved (for the log). A message it cannot read still resyncs.
func migrateResync(b []byte) Event {
	what := "an undecodable XFRM_MSG_MIGRATE"
	if dir, ms, err := parseMigrate(b); err == nil {
		parts := make([]string, len(ms))
		for i, m := range ms {
			parts[i] = fmt.Sprintf("%s -> %s (reqid %d) now %s -> %s", m.OldSrc, m.OldDst, m.Reqid, m.NewSrc, m.NewDst)
		}
		what = fmt.Sprintf("XFRM_MSG_MIGRATE of a %s policy: %s", dir, strings.Join(parts, ", "))
	} else {
		what += " (" + err.Error() + ")"
	}
	return Event{Kind: Resync, Err: fmt.Errorf("xfrm monitor: %s: the kernel moved SAs and rewrote policy templates without SA or policy events; resynchronising from a dump", what)}
}

// parseMigrate reads XFRM_MSG_MIGRATE: struct xfrm_userpolicy_id (the
// policy's selector and direction), then XFRMA_MIGRATE.
func parseMigrate(b []byte) (Dir, []Migration, error) {
	if len(b) < xfrmPolicyIDLen {
		return 0, nil, fmt.Errorf("xfrm_userpolicy_id: %d bytes, want %d", len(b), xfrmPolicyIDLen)
	}
	a, err := xfrmAttrs(b[xfrmPolicyIDLen:])
	if err != nil {
		return 0, nil, err
	}
	v, ok := a[nl.XFRMA_MIGRATE]
	if !ok || len(v) == 0 || len(v)%xfrmUserMigrateLen != 0 {
		return 0, nil, fmt.Errorf("XFRMA_MIGRATE: %d bytes, want a multiple of %d", len(v), xfrmUserMigrateLen)
	}
	var ms []Migration
	for ; len(v) > 0; v = v[xfrmUserMigrateLen:] {
		m := Migration{Proto: Proto(v[umProto]), Mode: Mode(v[umMode]), Reqid: ne.Uint32(v[umReqid:])}
		oldF, newF := ne.Uint16(v[umOldFamily:]), ne.Uint16(v[umNewFamily:])
		var errs [4]error
		m.OldDst, errs[0] = xfrmEndpoint(v[umOldDaddr:], oldF)
		m.OldSrc, errs[1] = xfrmEndpoint(v[umOldSaddr:], oldF)
		m.NewDst, errs[2] = xfrmEndpoint(v[umNewDaddr:], newF)
		m.NewSrc, errs[3] = xfrmEndpoint(v[umNewSaddr:], newF)
		for _, err := range errs {
			if err != nil {
				return 0, nil, fmt.Errorf("xfrm_user_migrate: %w", err)
			}
		}
		ms = append(ms, m)
	}
	return Dir(b[polIDDir]), ms, nil
}

// unknownResync is what the watch makes of a message type it does not
// know: a kernel newer than this code may have changed something the
// mirror cannot see, so the copy is no longer proven.
func unknownResync(typ uint16) Event {
	return Event{Kind: Resync, Err: fmt.Errorf("xfrm monitor: message type %#x is unknown to this sluice (newer than the kernels it knows); resynchronising from a dump", typ)}
}

// migrateStateResync turns XFRM_MSG_MIGRATE_STATE into a Resync naming the
// SA (struct xfrm_user_migrate_state starts with its xfrm_usersa_id; the
// rest of the struct changed between the patch's versions and is not read).
func migrateStateResync(b []byte) Event {
	sa := "an SA"
	if len(b) >= xfrmSAIDLen {
		if dst, err := xfrmEndpoint(b[saIDDaddr:], ne.Uint16(b[saIDFamily:])); err == nil {
			sa = fmt.Sprintf("SA spi %#x dst %s", be.Uint32(b[saIDSPI:]), dst)
		}
	}
	return Event{Kind: Resync, Err: fmt.Errorf("xfrm monitor: XFRM_MSG_MIGRATE_STATE replaced %s in place (new addresses, reqid or offload device); resynchronising from a dump", sa)}
}

// ipsecULProtoAny is IPSEC_ULPROTO_ANY: in a migration's selector it makes
// the kernel find the policy by addresses and prefix lengths alone
// (xfrm_migrate_selector_match).
const ipsecULProtoAny = 255

// Migrate sends XFRM_MSG_MIGRATE for the main-type policy of direction dir
// whose selector is src -> dst (any protocol and ports), as MOBIKE daemons
// do (libreswan; strongSwan does not). sluice itself never migrates; the
// tests use it to make the kernel move policies and SAs behind the
// mirror's back. The kernel needs CONFIG_XFRM_MIGRATE (ENOPROTOOPT
// without it) and CAP_NET_ADMIN.
func (x *Handle) Migrate(dir Dir, src, dst netip.Prefix, ms []Migration) error {
	if !src.IsValid() || !dst.IsValid() || src.Addr().Is4() != dst.Addr().Is4() {
		return fmt.Errorf("xfrm migrate: selector %s -> %s: want two prefixes of one family", src, dst)
	}
	b := make([]byte, xfrmPolicyIDLen)
	ne.PutUint16(b[selFamily:], familyOf(src.Addr()))
	copy(b[selDaddr:], dst.Masked().Addr().AsSlice())
	copy(b[selSaddr:], src.Masked().Addr().AsSlice())
	b[selPlenD], b[selPlenS], b[selProto] = uint8(dst.Bits()), uint8(src.Bits()), ipsecULProtoAny
	b[polIDDir] = byte(dir)
	v := make([]byte, 0, len(ms)*xfrmUserMigrateLen)
	for _, m := range ms {
		u := make([]byte, xfrmUserMigrateLen)
		copy(u[umOldDaddr:], m.OldDst.AsSlice())
		copy(u[umOldSaddr:], m.OldSrc.AsSlice())
		copy(u[umNewDaddr:], m.NewDst.AsSlice())
		copy(u[umNewSaddr:], m.NewSrc.AsSlice())
		u[umProto], u[umMode] = byte(m.Proto), byte(m.Mode)
		ne.PutUint32(u[umReqid:], m.Reqid)
		ne.PutUint16(u[umOldFamily:], familyOf(m.OldDst))
		ne.PutUint16(u[umNewFamily:], familyOf(m.NewDst))
		v = append(v, u...)
	}
	b = putAttr(b, nl.XFRMA_MIGRATE, v)
	if err := x.execute(xfrmRequest(nl.XFRM_MSG_MIGRATE, unix.NLM_F_ACK, b), 0, nil); err != nil {
		return fmt.Errorf("xfrm migrate %s policy %s -> %s: %w", dir, src, dst, err)
	}
	return nil
}

// familyOf is the AF_* of an address (AF_INET for IPv4-mapped ones too:
// the kernel stores those as IPv4).
func familyOf(a netip.Addr) uint16 {
	if a.Unmap().Is4() {
		return unix.AF_INET
	}
	return unix.AF_INET6
}

// struct xfrm_user_migrate_state (Linux 7.2; read in 7.3.4's
// include/uapi/linux/xfrm.h).
const (
	umsID                   = 0   // struct xfrm_usersa_id: the SA to move
	umsNewDaddr             = 24  // xfrm_address_t
	umsNewSaddr             = 40  // xfrm_address_t
	umsOldMark              = 56  // struct xfrm_mark
	umsNewSel               = 64  // struct xfrm_selector (AF_UNSPEC: left to the kernel)
	umsNewReqid             = 120 // __u32
	umsFlags                = 124 // __u32 XFRM_MIGRATE_STATE_*
	umsNewFamily            = 128 // __u16
	xfrmUserMigrateStateLen = 132
)

// MigrateState sends XFRM_MSG_MIGRATE_STATE (Linux 7.2): the unmarked ESP
// SA spi to dst becomes one from newSrc to newDst with reqid, keeping its
// sequence numbers and inheriting its offload device. Like Migrate, it is
// for the tests; a kernel before 7.2 refuses the type (EINVAL).
func (x *Handle) MigrateState(dst netip.Addr, spi uint32, newSrc, newDst netip.Addr, reqid uint32) error {
	b := make([]byte, xfrmUserMigrateStateLen)
	copy(b[umsID+saIDDaddr:], dst.AsSlice())
	be.PutUint32(b[umsID+saIDSPI:], spi)
	ne.PutUint16(b[umsID+saIDFamily:], familyOf(dst))
	b[umsID+saIDProto] = unix.IPPROTO_ESP
	copy(b[umsNewDaddr:], newDst.AsSlice())
	copy(b[umsNewSaddr:], newSrc.AsSlice())
	ne.PutUint32(b[umsNewReqid:], reqid)
	ne.PutUint16(b[umsNewFamily:], familyOf(newDst))
	if err := x.execute(xfrmRequest(xfrmMsgMigrateState, unix.NLM_F_ACK, b), 0, nil); err != nil {
		return fmt.Errorf("xfrm migrate state spi %#x to %s: %w", spi, dst, err)
	}
	return nil
}
