// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"sluice/internal/kernel"
)

// XDPMode is how the program is attached.
type XDPMode int

const (
	// XDPNative runs in the driver, before an skb exists: the fast path.
	XDPNative XDPMode = iota
	// XDPGeneric runs after the skb is built: works everywhere, and is
	// barely faster than the kernel's own forwarding.
	XDPGeneric
)

func (m XDPMode) String() string { return [...]string{"native", "generic"}[m] }

const linkPinPrefix = "link_"

// EnsureBPFFS makes sure pinDir lives on a BPF filesystem. It mounts the
// standard /sys/fs/bpf when missing; any other location must already be a
// bpffs mount. Note that `ip netns exec` remounts /sys, hiding /sys/fs/bpf:
// processes started that way each get a private bpffs there, so a gateway
// run in a namespace that way needs a pin-dir on a bpffs mounted outside
// /sys to be seen by `gateway explain|stop`.
func EnsureBPFFS(pinDir string) error {
	const std = "/sys/fs/bpf"
	if isBPFFS(pinDir) {
		return nil
	}
	if pinDir == std || strings.HasPrefix(pinDir, std+"/") {
		if isBPFFS(std) {
			return nil
		}
		// mode=0700: the default 1777 lets any user create a pin dir
		// there before the daemon does.
		if err := unix.Mount("bpf", std, "bpf", 0, "mode=0700"); err != nil {
			return fmt.Errorf("mounting bpffs at %s: %w", std, err)
		}
		return nil
	}
	return fmt.Errorf("pin-dir %s is not on a BPF filesystem: mount one (mount -t bpf bpf DIR) or use a directory under /sys/fs/bpf", pinDir)
}

// isBPFFS reports whether path, or its nearest existing parent, is on bpffs.
func isBPFFS(path string) bool {
	for p := filepath.Clean(path); ; p = filepath.Dir(p) {
		var st unix.Statfs_t
		if err := unix.Statfs(p, &st); err == nil {
			return st.Type == unix.BPF_FS_MAGIC
		}
		if p == "/" {
			return false
		}
	}
}

// Attach attaches the program to an interface and pins the link under
// pinDir, so it outlives the daemon. A link already pinned there is
// switched to this program in place, without a gap in forwarding, but
// only when it is attached to this interface in this namespace: a pin is
// never followed through a symlink, a link left by a deleted interface is
// replaced, and one attached elsewhere is refused. fresh says whether the
// interface had no link of ours before (then Detach of that interface
// undoes this).
func (dp *Datapath) Attach(pinDir, ifname string, ifindex int, mode XDPMode) (fresh bool, err error) {
	pin := filepath.Join(pinDir, linkPinPrefix+ifname)
	if err := notSymlink(pin); err != nil {
		return false, err
	}
	if old, err := link.LoadPinnedLink(pin, nil); err == nil {
		switch where := LinkTarget(old, ifname, ifindex); where {
		case "":
			if err := old.Update(dp.objs.XdpFastpath); err == nil {
				dp.keepLink(ifname, old)
				return false, nil
			}
			// A link of another kind or mode: replace it.
			old.Unpin()
			old.Close()
		case targetDetached:
			// Its interface went away (deleted, re-created): the link
			// is empty, and ours to replace.
			old.Unpin()
			old.Close()
		default:
			old.Close()
			return false, fmt.Errorf("%s is attached to %s, not to %s (ifindex %d) in this namespace: refusing to take it over; 'sluice gateway stop --pin-dir %s' removes it",
				pin, where, ifname, ifindex, pinDir)
		}
	}
	flags := link.XDPDriverMode
	if mode == XDPGeneric {
		flags = link.XDPGenericMode
	}
	l, err := link.AttachXDP(link.XDPOptions{Program: dp.objs.XdpFastpath, Interface: ifindex, Flags: flags})
	if err != nil {
		if mode == XDPNative && errors.Is(err, unix.EOPNOTSUPP) {
			return false, fmt.Errorf("attaching XDP to %s in native mode: the driver does not support it (%w); set xdp-mode: generic to run anyway, slowly", ifname, err)
		}
		return false, fmt.Errorf("attaching XDP to %s (%s): %w", ifname, mode, err)
	}
	if err := l.Pin(pin); err != nil {
		l.Close()
		return false, fmt.Errorf("pinning the XDP link of %s at %s: %w", ifname, pin, err)
	}
	dp.keepLink(ifname, l)
	return true, nil
}

// AttachedTo says why this daemon's program is not attached to ifname
// (ifindex) in the calling thread's namespace, or "" when it is: what
// status reports, checked against the kernel each time rather than
// remembered from the attach (`bpftool link detach`, or an interface
// deleted and re-created under the same name, leave no program there).
func (dp *Datapath) AttachedTo(ifname string, ifindex int) string {
	dp.linksMu.Lock()
	l, ok := dp.links[ifname]
	dp.linksMu.Unlock()
	if !ok {
		return "not attached by this daemon"
	}
	switch where := LinkTarget(l, ifname, ifindex); where {
	case "":
		return ""
	case targetDetached:
		return "its XDP link was detached (the interface was deleted or re-created, or the link detached by hand)"
	default:
		return "its XDP link is attached to " + where
	}
}

// Reattach attaches afresh to ifname after AttachedTo found it detached:
// the empty link is dropped (unpinned, closed) and a new one pinned.
func (dp *Datapath) Reattach(pinDir, ifname string, ifindex int, mode XDPMode) error {
	dp.Unattach(ifname) // a detached link: nothing leaves any interface
	_, err := dp.Attach(pinDir, ifname, ifindex, mode)
	return err
}

// targetDetached is LinkTarget's answer for a link whose interface is gone.
const targetDetached = "no interface (detached)"

// LinkTarget says where an XDP link is attached when that is not ifname
// (ifindex) in the calling thread's namespace, or "" when it is. The
// link's info names an ifindex only, so the namespace is checked through
// the interface: the program attached to ifname must be the link's.
func LinkTarget(l link.Link, ifname string, ifindex int) string {
	info, err := l.Info()
	if err != nil {
		return fmt.Sprintf("an unknown interface (%v)", err)
	}
	x := info.XDP()
	if x == nil {
		return fmt.Sprintf("something else (a %v link)", info.Type)
	}
	switch {
	case x.Ifindex == 0:
		return targetDetached
	case int(x.Ifindex) != ifindex:
		return fmt.Sprintf("ifindex %d", x.Ifindex)
	}
	li, err := kernel.Link(ifname)
	if err != nil || li.Ifindex != ifindex || li.XDPProgID != uint32(info.Program) {
		return fmt.Sprintf("ifindex %d of another network namespace", x.Ifindex)
	}
	return ""
}

// notSymlink refuses a symlink at path: the daemon acts on what its pin
// dir holds, never on what a name there points at.
func notSymlink(path string) error {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		return fmt.Errorf("%s is a symlink: sluice never follows symlinks in its pin dir (one could point at another gateway's link or map); remove it", path)
	}
	return nil
}

func (dp *Datapath) keepLink(ifname string, l link.Link) {
	dp.linksMu.Lock()
	defer dp.linksMu.Unlock()
	if dp.links == nil {
		dp.links = map[string]link.Link{}
	}
	dp.links[ifname] = l
}

// Unattach detaches the program from an interface it was attached to by
// Attach (unpins and drops the link): undoing a start that failed.
func (dp *Datapath) Unattach(ifname string) error {
	dp.linksMu.Lock()
	l, ok := dp.links[ifname]
	delete(dp.links, ifname)
	dp.linksMu.Unlock()
	if !ok {
		return nil
	}
	err := l.Unpin()
	return errors.Join(err, l.Close())
}

// Detach removes every XDP link pinned under pinDir, then the pinned maps
// and the directory. It is what `sluice gateway stop` does.
func Detach(pinDir string) ([]string, error) {
	entries, err := os.ReadDir(pinDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var detached []string
	var errs []error
	for _, e := range entries {
		path := filepath.Join(pinDir, e.Name())
		if e.Type()&os.ModeSymlink != 0 {
			errs = append(errs, notSymlink(path))
			continue
		}
		if strings.HasPrefix(e.Name(), linkPinPrefix) {
			l, err := link.LoadPinnedLink(path, nil)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", path, err))
				continue
			}
			if err := l.Unpin(); err != nil {
				errs = append(errs, err)
			}
			l.Close() // last reference: the program leaves the interface
			detached = append(detached, strings.TrimPrefix(e.Name(), linkPinPrefix))
			continue
		}
		if err := os.Remove(path); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.Remove(pinDir); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	return detached, errors.Join(errs...)
}
