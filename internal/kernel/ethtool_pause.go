// SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"errors"
	"fmt"

	"github.com/safchain/ethtool"
	"golang.org/x/sys/unix"
)

// Pause is `ethtool -a`: Ethernet flow control (802.3x pause frames).
type Pause struct {
	Autoneg, RX, TX bool
}

// EthtoolPause reads the flow control settings (`ethtool -a`).
func EthtoolPause(ifname string) (Pause, error) {
	p, err := withEthtool(func(e *ethtool.Ethtool) (ethtool.Pause, error) { return e.GetPause(ifname) })
	if err != nil {
		return Pause{}, fmt.Errorf("ethtool -a %s: %w", ifname, err)
	}
	return Pause{Autoneg: p.Autoneg != 0, RX: p.RxPause != 0, TX: p.TxPause != 0}, nil
}

// EthtoolSetPause sets rx and tx flow control, autonegotiation as it is
// (`ethtool -A IF rx off tx off`, the VM single-flow guide's and the ConnectX-7 benchmark's setting).
func EthtoolSetPause(ifname string, rx, tx bool) error {
	_, err := withEthtool(func(e *ethtool.Ethtool) (struct{}, error) {
		p, err := e.GetPause(ifname)
		if err != nil {
			return struct{}{}, err
		}
		p.RxPause, p.TxPause = b2u(rx), b2u(tx)
		_, err = e.SetPause(ifname, p)
		return struct{}{}, err
	})
	if err != nil {
		return fmt.Errorf("ethtool -A %s rx %s tx %s: %w", ifname, onOff(rx), onOff(tx), err)
	}
	return nil
}

// IsNotSupported reports whether err says the device's driver does not
// implement the request (EOPNOTSUPP: the driver lacks the ethtool op): a setting that does not apply to this
// device, not a failure.
func IsNotSupported(err error) bool {
	return errors.Is(err, unix.EOPNOTSUPP)
}
