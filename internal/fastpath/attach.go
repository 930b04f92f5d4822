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

// EnsureBPFFS mounts the BPF filesystem at /sys/fs/bpf when it is not.
func EnsureBPFFS() error {
	var st unix.Statfs_t
	if err := unix.Statfs("/sys/fs/bpf", &st); err == nil && st.Type == unix.BPF_FS_MAGIC {
		return nil
	}
	if err := unix.Mount("bpf", "/sys/fs/bpf", "bpf", 0, ""); err != nil {
		return fmt.Errorf("mounting bpffs at /sys/fs/bpf: %w", err)
	}
	return nil
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
