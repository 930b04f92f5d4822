// SPDX-License-Identifier: Apache-2.0

package gateway

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"sluice/internal/kernel"
)

// The kernel package says what is missing; what to type about it is said
// here, where the name or address came from gateway.yaml.

// link is kernel.Link for an interface gateway.yaml names.
func link(name string) (*kernel.LinkInfo, error) {
	li, err := kernel.Link(name)
	if err != nil {
		return nil, fmt.Errorf("%w (check the name with `ip link`)", err)
	}
	return li, nil
}

// resolveNextHop is kernel.ResolveNextHop for a hairpin-to-nexthop, with
// the command that adds what the kernel lacks.
func resolveNextHop(ip netip.Addr) (int, net.HardwareAddr, error) {
	idx, mac, err := kernel.ResolveNextHop(ip)
	var noRoute *kernel.NoRouteError
	var noNeigh *kernel.NoNeighbourError
	switch {
	case errors.As(err, &noNeigh):
		err = fmt.Errorf("%w; ping it or add a permanent neighbour (`ip neigh replace %s lladdr MAC dev %s nud permanent`)", err, noNeigh.NextHop, noNeigh.Dev)
	case errors.As(err, &noRoute):
		err = fmt.Errorf("%w: add one, e.g. `ip route add %s via GATEWAY`", err, noRoute.Addr)
	}
	return idx, mac, err
}
