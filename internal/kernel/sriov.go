// SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
)

// SR-IOV through sysfs (the VF count) and rtnetlink (per-VF MAC, VLAN,
// trust, spoof check: IFLA_VF_*). sysfs paths are this namespace's view
// (`ip netns exec` remounts /sys for the namespace).

func numVFsPath(pf string) string {
	return filepath.Join("/sys/class/net", pf, "device", "sriov_numvfs")
}

// SRIOVNumVFs reads a PF's VF count; ok is false when the device has no
// SR-IOV (no sriov_numvfs file).
func SRIOVNumVFs(pf string) (n int, ok bool, err error) {
	b, err := os.ReadFile(numVFsPath(pf))
	if os.IsNotExist(err) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	n, err = strconv.Atoi(strings.TrimSpace(string(b)))
	return n, true, err
}

// SRIOVSetNumVFs writes a PF's VF count (`echo N >
// /sys/class/net/PF/device/sriov_numvfs`). The kernel refuses to change a
// non-zero count to another non-zero one: go through 0.
func SRIOVSetNumVFs(pf string, n int) error {
	f, err := os.OpenFile(numVFsPath(pf), os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("echo %d > %s: %w", n, numVFsPath(pf), err)
	}
	defer f.Close()
	if _, err := f.WriteString(strconv.Itoa(n)); err != nil {
		return fmt.Errorf("echo %d > %s: %w", n, numVFsPath(pf), err)
	}
	return nil
}

// VFSettings are the per-VF attributes sluice sets; nil leaves one as it
// is.
type VFSettings struct {
	MAC      *string
	VLAN     *int
	Trust    *bool
	SpoofChk *bool
}

// SRIOVSetVF applies settings to VF vf of pf (`ip link set PF vf N mac M
// vlan V trust on|off spoofchk on|off`).
func SRIOVSetVF(pf string, vf int, s VFSettings) error {
	l, err := linkByName(pf)
	if err != nil {
		return err
	}
	wrap := func(what string, err error) error {
		if err != nil {
			return fmt.Errorf("ip link set %s vf %d %s: %w", pf, vf, what, err)
		}
		return nil
	}
	if s.MAC != nil {
		hw, err := net.ParseMAC(*s.MAC)
		if err != nil {
			return err
		}
		if err := wrap("mac "+*s.MAC, netlink.LinkSetVfHardwareAddr(l, vf, hw)); err != nil {
			return err
		}
	}
	if s.VLAN != nil {
		if err := wrap(fmt.Sprintf("vlan %d", *s.VLAN), netlink.LinkSetVfVlan(l, vf, *s.VLAN)); err != nil {
			return err
		}
	}
	if s.Trust != nil {
		if err := wrap("trust "+onOff(*s.Trust), netlink.LinkSetVfTrust(l, vf, *s.Trust)); err != nil {
			return err
		}
	}
	if s.SpoofChk != nil {
		if err := wrap("spoofchk "+onOff(*s.SpoofChk), netlink.LinkSetVfSpoofchk(l, vf, *s.SpoofChk)); err != nil {
			return err
		}
	}
	return nil
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}
