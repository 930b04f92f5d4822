// SPDX-License-Identifier: Apache-2.0

package xfrm

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Handle is the IPsec database (policies and SAs) of one network namespace.
// The zero value, and the package-level functions, use the namespace of the
// calling thread.
type Handle struct {
	ns    netns.NsHandle
	hasNS bool
	// RcvBuf is the monitor socket's receive buffer in bytes (0: 32 MiB).
	// Tests shrink it to provoke an overrun.
	RcvBuf int
}

// HandleAt returns the XFRM database of ns. Sockets are opened inside ns
// (thread locked, setns, socket, setns back) and stay bound to it, so the
// caller's thread never lingers in ns. The caller keeps ns open while using
// the result.
func HandleAt(ns netns.NsHandle) *Handle { return &Handle{ns: ns, hasNS: true} }

// Netns is the namespace x reads (netns.None(): the calling thread's).
func (x *Handle) Netns() netns.NsHandle { return x.target() }

func (x *Handle) target() netns.NsHandle {
	if x == nil || !x.hasNS {
		return netns.None()
	}
	return x.ns
}

// xfrmMsgGetDefault is XFRM_MSG_GETDEFAULT (Linux 5.16+), absent from nl.
const xfrmMsgGetDefault = 0x28

// xfrmRequest builds one XFRM request (NLM_F_REQUEST is implied).
func xfrmRequest(typ, flags int, body []byte) *nl.NetlinkRequest {
	req := nl.NewNetlinkRequest(typ, flags)
	if body != nil {
		req.AddRawData(body)
	}
	return req
}

// execute sends req and hands every reply of type resType to f. A fresh
// socket per request keeps this safe for concurrent callers.
func (x *Handle) execute(req *nl.NetlinkRequest, resType uint16, f func([]byte) bool) error {
	s, err := nl.GetNetlinkSocketAt(x.target(), netns.None(), unix.NETLINK_XFRM)
	if err != nil {
		return fmt.Errorf("xfrm netlink socket: %w", err)
	}
	defer s.Close()
	// Extended acks turn EINVAL into the kernel's own reason.
	_ = s.SetExtAck(true)
	req.Sockets = map[int]*nl.SocketHandle{unix.NETLINK_XFRM: {Socket: s}}
	if f == nil {
		f = func([]byte) bool { return true }
	}
	return req.ExecuteIter(unix.NETLINK_XFRM, resType, f)
}

// xfrmDump runs an NLM_F_DUMP request and decodes each reply with parse.
func xfrmDump[T any](x *Handle, typ int, resType uint16, parse func([]byte) (T, error)) ([]T, error) {
	var out []T
	var perr error
	err := x.execute(xfrmRequest(typ, unix.NLM_F_DUMP, nil), resType, func(b []byte) bool {
		v, err := parse(b)
		if err != nil {
			perr = fmt.Errorf("entry %d: %w", len(out)+1, err)
			return false
		}
		out = append(out, v)
		return true
	})
	if err == nil {
		err = perr
	}
	return out, err
}

// DumpPolicies lists every XFRM policy (main and sub type, all directions;
// per-socket policies are not included by the kernel).
func (x *Handle) DumpPolicies() ([]Policy, error) {
	ps, err := xfrmDump(x, nl.XFRM_MSG_GETPOLICY, nl.XFRM_MSG_NEWPOLICY, parsePolicyMsg)
	if err != nil {
		return nil, fmt.Errorf("dump xfrm policies: %w", err)
	}
	return ps, nil
}

// DumpStates lists every XFRM SA, without key material.
func (x *Handle) DumpStates() ([]State, error) {
	ss, err := xfrmDump(x, nl.XFRM_MSG_GETSA, nl.XFRM_MSG_NEWSA, parseStateMsg)
	if err != nil {
		return nil, fmt.Errorf("dump xfrm states: %w", err)
	}
	return ss, nil
}

// PolicyDefaults is what the kernel does with traffic that matches no
// policy, per direction (`ip xfrm policy getdefault`).
type PolicyDefaults struct{ In, Fwd, Out Action }

// ErrNoPolicyDefaults means the kernel predates XFRM_MSG_GETDEFAULT (Linux
// 5.16): it accepts whatever no policy matches.
var ErrNoPolicyDefaults = errors.New("the kernel has no XFRM policy defaults (before Linux 5.16): unmatched traffic is accepted")

// PolicyDefaults asks the kernel for its default actions. Only a kernel
// that does not know the message (it answers EINVAL to any type above
// XFRM_MSG_MAX, see xfrm_user_rcv_msg) gives ErrNoPolicyDefaults; any other
// failure (EPERM, ENOBUFS, a short reply) is an error, since "accept" would
// then be a guess.
func (x *Handle) PolicyDefaults() (PolicyDefaults, error) {
	var got []byte
	// The kernel wants a struct xfrm_userpolicy_default body even here
	// (its 3 bytes padded to 4, as netlink aligns them).
	err := x.execute(xfrmRequest(xfrmMsgGetDefault, 0, make([]byte, 4)), xfrmMsgGetDefault, func(b []byte) bool {
		got = b
		return false
	})
	switch {
	case errors.Is(err, unix.EINVAL):
		return PolicyDefaults{In: ActionAllow, Fwd: ActionAllow, Out: ActionAllow}, ErrNoPolicyDefaults
	case err != nil:
		return PolicyDefaults{}, fmt.Errorf("xfrm policy defaults: %w", err)
	case got == nil:
		return PolicyDefaults{}, errors.New("xfrm policy defaults: the kernel acknowledged without an answer")
	}
	d, err := parsePolicyDefaults(got)
	if err != nil {
		return d, fmt.Errorf("xfrm policy defaults: %w", err)
	}
	return d, nil
}

// parsePolicyDefaults reads struct xfrm_userpolicy_default {u8 in, fwd, out}.
func parsePolicyDefaults(b []byte) (PolicyDefaults, error) {
	if len(b) < xfrmPolicyDefLen {
		return PolicyDefaults{}, fmt.Errorf("xfrm_userpolicy_default: %d bytes, want %d", len(b), xfrmPolicyDefLen)
	}
	var acts [3]Action
	for i, v := range b[:xfrmPolicyDefLen] {
		switch v {
		case 0, 2: // XFRM_USERPOLICY_UNSPEC (never set: accept), _ACCEPT
			acts[i] = ActionAllow
		case 1: // XFRM_USERPOLICY_BLOCK
			acts[i] = ActionBlock
		default:
			return PolicyDefaults{}, fmt.Errorf("xfrm_userpolicy_default: unknown action %d", v)
		}
	}
	return PolicyDefaults{In: acts[0], Fwd: acts[1], Out: acts[2]}, nil
}

// DumpPolicies lists the current namespace's XFRM policies.
func DumpPolicies() ([]Policy, error) { return (&Handle{}).DumpPolicies() }

// DumpStates lists the current namespace's XFRM SAs, without keys.
func DumpStates() ([]State, error) { return (&Handle{}).DumpStates() }
