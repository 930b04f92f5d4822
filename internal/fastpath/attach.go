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
// switched to this program in place, without a gap in forwarding.
func (dp *Datapath) Attach(pinDir, ifname string, ifindex int, mode XDPMode) error {
	pin := filepath.Join(pinDir, linkPinPrefix+ifname)
	if old, err := link.LoadPinnedLink(pin, nil); err == nil {
		defer old.Close()
		if err := old.Update(dp.objs.XdpFastpath); err == nil {
			return nil
		}
		// A link of another kind or mode: replace it.
		old.Unpin()
	}
	flags := link.XDPDriverMode
	if mode == XDPGeneric {
		flags = link.XDPGenericMode
	}
	l, err := link.AttachXDP(link.XDPOptions{Program: dp.objs.XdpFastpath, Interface: ifindex, Flags: flags})
	if err != nil {
		if mode == XDPNative && errors.Is(err, unix.EOPNOTSUPP) {
			return fmt.Errorf("attaching XDP to %s in native mode: the driver does not support it (%w); set xdp-mode: generic to run anyway, slowly", ifname, err)
		}
		return fmt.Errorf("attaching XDP to %s (%s): %w", ifname, mode, err)
	}
	defer l.Close()
	if err := l.Pin(pin); err != nil {
		return fmt.Errorf("pinning the XDP link of %s at %s: %w", ifname, pin, err)
	}
	return nil
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
