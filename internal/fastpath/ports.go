// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"errors"
	"fmt"
	"slices"

	"github.com/cilium/ebpf"
)

// maxPorts mirrors FP_MAX_PORTS: the size of tx_ports, the redirect
// ports' DEVMAP array. Number 0 is never given out (an entry holding 0
// points nowhere).
const maxPorts = 4096

// setPorts gives every device in want (by ifindex) a redirect port number
// and takes the numbers of the others back, in tx_ports (number ->
// device) and port_of (ifindex -> number), and returns each wanted
// device's number. Devmap values are ifindexes resolved in the caller's
// network namespace, as for SetIfaces.
//
// A cached flow and an interface entry hold a number, not an ifindex, and
// the program redirects by it without asking whose it is. So a number is
// emptied before anything else changes (whoever still holds it misses, and
// the packet is decided again or passed to the kernel), and a freed number
// is given out again only after every other one was: numbering goes round
// tx_ports from config.port_next. A device keeps its number while its entry
// still names it; one the kernel emptied (the device went away, perhaps to
// come back under the same ifindex) gets a new one.
func (dp *Datapath) setPorts(want map[uint32]bool) (map[uint32]uint32, error) {
	have := map[uint32]uint32{}
	var ifindex, port uint32
	it := dp.objs.PortOf.Iterate()
	for it.Next(&ifindex, &port) {
		have[ifindex] = port
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("fastpath: reading the redirect ports: %w", err)
	}
	inUse := map[uint32]bool{}
	for ifindex, port := range have {
		var dev uint32
		err := dp.objs.TxPorts.Lookup(port, &dev)
		if want[ifindex] && err == nil && dev == ifindex {
			inUse[port] = true
			continue
		}
		if err := dp.objs.TxPorts.Delete(port); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil, fmt.Errorf("fastpath: emptying redirect port %d (ifindex %d): %w", port, ifindex, err)
		}
		if err := dp.objs.PortOf.Delete(ifindex); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil, fmt.Errorf("fastpath: forgetting the redirect port of ifindex %d: %w", ifindex, err)
		}
		delete(have, ifindex)
	}
	cfg, err := dp.config()
	if err != nil {
		return nil, err
	}
	next := cfg.PortNext
	var add []uint32
	for ifindex := range want {
		if _, ok := have[ifindex]; !ok {
			add = append(add, ifindex)
		}
	}
	slices.Sort(add) // the same numbers for the same devices, run after run
	for _, ifindex := range add {
		port, next = nextFreePort(next, inUse)
		if port == 0 {
			return nil, fmt.Errorf("fastpath: %d redirect ports in use, no number left for ifindex %d", len(inUse), ifindex)
		}
		if err := dp.objs.TxPorts.Put(port, ifindex); err != nil {
			return nil, fmt.Errorf("fastpath: redirect port %d for ifindex %d: %w", port, ifindex, err)
		}
		if err := dp.objs.PortOf.Put(ifindex, port); err != nil {
			return nil, fmt.Errorf("fastpath: recording redirect port %d of ifindex %d: %w", port, ifindex, err)
		}
		have[ifindex] = port
		inUse[port] = true
	}
	if next != cfg.PortNext {
		err = dp.updateConfig(func(cfg *fastpathFpConfig) bool {
			cfg.PortNext = next
			return true
		})
	}
	return have, err
}

// nextFreePort is the first number from from on, round tx_ports, that is
// neither 0 nor in use, and the number to start from next time; 0 when
// all are in use.
func nextFreePort(from uint32, inUse map[uint32]bool) (port, next uint32) {
	for i := range uint32(maxPorts) {
		p := (from + i) % maxPorts
		if p != 0 && !inUse[p] {
			return p, (p + 1) % maxPorts
		}
	}
	return 0, from
}

// PortOf is the redirect port number of the device with this ifindex (0:
// none): what tx_ports, interface entries and cached flows hold for it.
func (dp *Datapath) PortOf(ifindex int) (uint32, error) {
	var port uint32
	err := dp.objs.PortOf.Lookup(uint32(ifindex), &port)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return 0, nil
	}
	return port, err
}
