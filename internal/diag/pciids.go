// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"bufio"
	"bytes"
	"strings"

	"sluice/internal/fileread"
)

// pciIDPaths are where Debian (pciutils), Fedora/RHEL (hwdata) and others
// keep pci.ids.
var pciIDPaths = []string{"/usr/share/misc/pci.ids", "/usr/share/hwdata/pci.ids", "/usr/share/pci.ids"}

// pciNames resolves vendor and device IDs to names from the system's
// pci.ids, read once, only for the IDs asked for.
type pciNames struct {
	vendors map[string]string // "15b3" -> "Mellanox Technologies"
	devices map[string]string // "15b3:1021" -> "MT2910 Family [ConnectX-7]"
	source  string
}

// loadPCINames reads the first pci.ids found under fs, keeping only the
// vendors in want (lower-case hex IDs). No file is not an error: names are
// then empty and the IDs are still shown.
func loadPCINames(fs FS, want map[string]bool) *pciNames {
	n := &pciNames{vendors: map[string]string{}, devices: map[string]string{}}
	for _, p := range pciIDPaths {
		data, err := fileread.ReadKernel(fs.path(p), fileread.ProcLimit)
		if err != nil {
			continue
		}
		n.source = p
		sc := bufio.NewScanner(bytes.NewReader(data))
		vendor := ""
		for sc.Scan() {
			line := sc.Text()
			if line == "" || line[0] == '#' {
				continue
			}
			switch {
			case line[0] != '\t':
				// A vendor line, or the start of the device class section
				// ("C 02  Network controller"), which ends the vendors.
				if strings.HasPrefix(line, "C ") {
					return n
				}
				id, name, ok := strings.Cut(line, "  ")
				vendor = ""
				if ok && want[strings.ToLower(id)] {
					vendor = strings.ToLower(id)
					n.vendors[vendor] = strings.TrimSpace(name)
				}
			case vendor != "" && len(line) > 1 && line[1] != '\t':
				id, name, ok := strings.Cut(line[1:], "  ")
				if ok {
					n.devices[vendor+":"+strings.ToLower(id)] = strings.TrimSpace(name)
				}
			}
		}
		return n
	}
	return n
}

func (n *pciNames) vendor(id string) string { return n.vendors[id] }

func (n *pciNames) device(vendor, id string) string { return n.devices[vendor+":"+id] }
