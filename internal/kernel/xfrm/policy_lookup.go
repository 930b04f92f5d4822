// SPDX-License-Identifier: Apache-2.0

package xfrm

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// Why every NEW/UPD policy notification is followed by a lookup:
//
// The kernel's policy notifications leave out the security context. In
// net/xfrm/xfrm_user.c, xfrm_notify_policy copies the policy, templates,
// type, mark, if_id and offload, but never calls copy_to_user_sec_ctx; the
// dump (dump_one_policy) and the answer to XFRM_MSG_GETPOLICY (the same
// function, via xfrm_policy_netlink) do. A labelled policy (SELinux IPsec)
// added or replaced at runtime would otherwise reach the fast path as an
// ordinary one, and XDP would decide packets the kernel decides by label.
//
// Asking only when an LSM with xfrm hooks is active was considered and not
// taken: /sys/kernel/security/lsm needs securityfs mounted (it is not on
// every host, nor in every container: this 6.18 test host has none), which
// LSMs implement xfrm_policy_alloc_security may change between kernels
// (today SELinux), and a wrong guess fails open. One GETPOLICY by index is a
// hash lookup in the kernel, on a socket kept open for the watch: ~7 µs
// (docs/benchmarks.md, BenchmarkPolicyLookup), ~0.3 s per 48,000 events.

// lookupPolicyEvent completes a NEW/UPD policy notification with what the
// kernel's own copy says. The notification's policy stays what the event
// reports (the order of events is the notifications'); only the security
// context, which the notification cannot carry, comes from the answer.
//
// Fail-closed: a policy already gone (ENOENT: its deletion is queued behind)
// is marked Unconfirmed, which the fast path treats as uncertain until the
// deletion removes it. Any other failure means the lookups cannot be trusted
// and becomes a Resync, so the mirror closes and dumps (the dump carries
// contexts).
func lookupPolicyEvent(ev Event, lookup func(*Policy) (Policy, error)) Event {
	if (ev.Kind != PolicyNew && ev.Kind != PolicyUpd) || ev.Policy == nil {
		return ev
	}
	p := *ev.Policy
	got, err := lookup(&p)
	switch {
	case err == nil:
		p.SecCtx = p.SecCtx || got.SecCtx
	case errors.Is(err, unix.ENOENT):
		p.Unconfirmed = true
	default:
		return Event{Kind: Resync, Err: fmt.Errorf("xfrm monitor: looking up policy %d (%s): %w", p.Index, p.Dir, err)}
	}
	ev.Policy = &p
	return ev
}

// policyByIndexRequest builds XFRM_MSG_GETPOLICY for p's index. The kernel
// (xfrm_policy_byid) matches the index, direction, type, if_id and the mark
// value and mask exactly, so all of them are sent as the notification gave
// them.
func policyByIndexRequest(p *Policy) *nl.NetlinkRequest {
	id := make([]byte, xfrmPolicyIDLen) // struct xfrm_userpolicy_id: selector unused
	ne.PutUint32(id[polIDIndex:], p.Index)
	id[polIDDir] = byte(p.Dir)
	if p.Mark != 0 || p.MarkMask != 0 {
		id = putAttr(id, nl.XFRMA_MARK, marshalMark(p.Mark, p.MarkMask))
	}
	if p.IfID != 0 {
		v := make([]byte, 4)
		ne.PutUint32(v, p.IfID)
		id = putAttr(id, nl.XFRMA_IF_ID, v)
	}
	if p.Sub {
		t := make([]byte, xfrmPolicyTypeLen)
		t[policyTypeType] = xfrmPolicyTypeSub
		id = putAttr(id, nl.XFRMA_POLICY_TYPE, t)
	}
	return xfrmRequest(nl.XFRM_MSG_GETPOLICY, 0, id)
}

// lookupPolicyOn asks the kernel, on s, for the policy p names.
func lookupPolicyOn(s *nl.NetlinkSocket, p *Policy) (Policy, error) {
	req := policyByIndexRequest(p)
	req.Sockets = map[int]*nl.SocketHandle{unix.NETLINK_XFRM: {Socket: s}}
	var got Policy
	var perr error
	answered := false
	err := req.ExecuteIter(unix.NETLINK_XFRM, nl.XFRM_MSG_NEWPOLICY, func(b []byte) bool {
		got, perr = parsePolicyMsg(b)
		answered = true
		return false
	})
	switch {
	case err != nil:
		return got, err
	case perr != nil:
		return got, perr
	case !answered:
		return got, errors.New("the kernel acknowledged without the policy")
	}
	return got, nil
}
