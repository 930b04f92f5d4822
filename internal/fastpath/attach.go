package fastpath

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
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
		if err := unix.Mount("bpf", std, "bpf", 0, ""); err != nil {
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
// switched to this program in place, without a gap in forwarding. fresh
// says whether the interface had no link of ours before (then Detach of
// that interface undoes this).
func (dp *Datapath) Attach(pinDir, ifname string, ifindex int, mode XDPMode) (fresh bool, err error) {
	pin := filepath.Join(pinDir, linkPinPrefix+ifname)
	if old, err := link.LoadPinnedLink(pin, nil); err == nil {
		if err := old.Update(dp.objs.XdpFastpath); err == nil {
			dp.keepLink(ifname, old)
			return false, nil
		}
		// A link of another kind or mode: replace it.
		old.Unpin()
		old.Close()
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

func (dp *Datapath) keepLink(ifname string, l link.Link) {
	if dp.links == nil {
		dp.links = map[string]link.Link{}
	}
	dp.links[ifname] = l
}

// Unattach detaches the program from an interface it was attached to by
// Attach (unpins and drops the link): undoing a start that failed.
func (dp *Datapath) Unattach(ifname string) error {
	l, ok := dp.links[ifname]
	if !ok {
		return nil
	}
	delete(dp.links, ifname)
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
