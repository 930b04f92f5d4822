// SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"fmt"
	"unsafe"

	"github.com/safchain/ethtool"
	"golang.org/x/sys/unix"
)

// ethtool access goes through github.com/safchain/ethtool: the SIOCETHTOOL
// ioctls (features with their "fixed" state, rings, coalescing, channels,
// private flags), kept up to date and used by cilium and containerd. The
// ioctl works on every kernel sluice supports; the ethtool netlink family
// would add nothing these checks need. Its RSS call uses a fixed 256-entry
// table, so the indirection table is read here instead.
//
// Calls act on the network namespace of the calling thread.

// EthFeature is one ethtool feature ("esp-hw-offload") of a device.
type EthFeature struct {
	// Available: the device can change it (not "[fixed]").
	Available bool `json:"available"`
	Active    bool `json:"active"`
	Requested bool `json:"requested"`
}

func withEthtool[T any](f func(e *ethtool.Ethtool) (T, error)) (T, error) {
	e, err := ethtool.NewEthtool()
	if err != nil {
		var zero T
		return zero, fmt.Errorf("ethtool socket: %w", err)
	}
	defer e.Close()
	return f(e)
}

// EthtoolFeatures returns every feature of ifname (`ethtool -k`).
func EthtoolFeatures(ifname string) (map[string]EthFeature, error) {
	return withEthtool(func(e *ethtool.Ethtool) (map[string]EthFeature, error) {
		fs, err := e.FeaturesWithState(ifname)
		if err != nil {
			return nil, fmt.Errorf("ethtool -k %s: %w", ifname, err)
		}
		out := make(map[string]EthFeature, len(fs))
		for n, s := range fs {
			out[n] = EthFeature{Available: s.Available, Active: s.Active, Requested: s.Requested}
		}
		return out, nil
	})
}

// EthtoolSetFeatures turns features on or off (`ethtool -K`).
func EthtoolSetFeatures(ifname string, want map[string]bool) error {
	_, err := withEthtool(func(e *ethtool.Ethtool) (struct{}, error) {
		if err := e.Change(ifname, want); err != nil {
			return struct{}{}, fmt.Errorf("ethtool -K %s: %w", ifname, err)
		}
		return struct{}{}, nil
	})
	return err
}

// EthtoolDriver returns the driver name and bus address (`ethtool -i`).
func EthtoolDriver(ifname string) (driver, bus string, err error) {
	info, err := withEthtool(func(e *ethtool.Ethtool) (ethtool.DrvInfo, error) { return e.DriverInfo(ifname) })
	if err != nil {
		return "", "", fmt.Errorf("ethtool -i %s: %w", ifname, err)
	}
	return info.Driver, info.BusInfo, nil
}

// Rings is `ethtool -g`: current and maximum ring sizes.
type Rings struct {
	RX, TX, RXMax, TXMax uint32
}

func EthtoolRings(ifname string) (Rings, error) {
	r, err := withEthtool(func(e *ethtool.Ethtool) (ethtool.Ring, error) { return e.GetRing(ifname) })
	if err != nil {
		return Rings{}, fmt.Errorf("ethtool -g %s: %w", ifname, err)
	}
	return Rings{RX: r.RxPending, TX: r.TxPending, RXMax: r.RxMaxPending, TXMax: r.TxMaxPending}, nil
}

// EthtoolSetRings sets ring sizes; 0 leaves one as it is (`ethtool -G`).
func EthtoolSetRings(ifname string, rx, tx uint32) error {
	_, err := withEthtool(func(e *ethtool.Ethtool) (struct{}, error) {
		r, err := e.GetRing(ifname)
		if err != nil {
			return struct{}{}, err
		}
		if rx != 0 {
			r.RxPending = rx
		}
		if tx != 0 {
			r.TxPending = tx
		}
		_, err = e.SetRing(ifname, r)
		return struct{}{}, err
	})
	if err != nil {
		return fmt.Errorf("ethtool -G %s rx %d tx %d: %w", ifname, rx, tx, err)
	}
	return nil
}

// Coalesce is the subset of `ethtool -c` the tuning profiles set.
type Coalesce struct {
	AdaptiveRX, AdaptiveTX bool
	RXUsecs, RXFrames      uint32
	TXUsecs, TXFrames      uint32
}

func EthtoolCoalesce(ifname string) (Coalesce, error) {
	c, err := withEthtool(func(e *ethtool.Ethtool) (ethtool.Coalesce, error) { return e.GetCoalesce(ifname) })
	if err != nil {
		return Coalesce{}, fmt.Errorf("ethtool -c %s: %w", ifname, err)
	}
	return Coalesce{AdaptiveRX: c.UseAdaptiveRxCoalesce != 0, AdaptiveTX: c.UseAdaptiveTxCoalesce != 0,
		RXUsecs: c.RxCoalesceUsecs, RXFrames: c.RxMaxCoalescedFrames, TXUsecs: c.TxCoalesceUsecs, TXFrames: c.TxMaxCoalescedFrames}, nil
}

// EthtoolSetCoalesce changes the fields set applies to, keeping the rest.
func EthtoolSetCoalesce(ifname string, set func(*Coalesce)) error {
	_, err := withEthtool(func(e *ethtool.Ethtool) (struct{}, error) {
		c, err := e.GetCoalesce(ifname)
		if err != nil {
			return struct{}{}, err
		}
		v := Coalesce{AdaptiveRX: c.UseAdaptiveRxCoalesce != 0, AdaptiveTX: c.UseAdaptiveTxCoalesce != 0,
			RXUsecs: c.RxCoalesceUsecs, RXFrames: c.RxMaxCoalescedFrames, TXUsecs: c.TxCoalesceUsecs, TXFrames: c.TxMaxCoalescedFrames}
		set(&v)
		c.UseAdaptiveRxCoalesce, c.UseAdaptiveTxCoalesce = b2u(v.AdaptiveRX), b2u(v.AdaptiveTX)
		c.RxCoalesceUsecs, c.RxMaxCoalescedFrames, c.TxCoalesceUsecs, c.TxMaxCoalescedFrames = v.RXUsecs, v.RXFrames, v.TXUsecs, v.TXFrames
		_, err = e.SetCoalesce(ifname, c)
		return struct{}{}, err
	})
	if err != nil {
		return fmt.Errorf("ethtool -C %s: %w", ifname, err)
	}
	return nil
}

func b2u(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

// Channels is `ethtool -l`.
type Channels struct {
	Combined, RX, TX, MaxCombined uint32
}

func EthtoolChannels(ifname string) (Channels, error) {
	c, err := withEthtool(func(e *ethtool.Ethtool) (ethtool.Channels, error) { return e.GetChannels(ifname) })
	if err != nil {
		return Channels{}, fmt.Errorf("ethtool -l %s: %w", ifname, err)
	}
	return Channels{Combined: c.CombinedCount, RX: c.RxCount, TX: c.TxCount, MaxCombined: c.MaxCombined}, nil
}

// EthtoolSetCombined sets the number of combined channels (`ethtool -L
// IF combined N`).
func EthtoolSetCombined(ifname string, n uint32) error {
	_, err := withEthtool(func(e *ethtool.Ethtool) (struct{}, error) {
		c, err := e.GetChannels(ifname)
		if err != nil {
			return struct{}{}, err
		}
		c.CombinedCount = n
		_, err = e.SetChannels(ifname, c)
		return struct{}{}, err
	})
	if err != nil {
		return fmt.Errorf("ethtool -L %s combined %d: %w", ifname, n, err)
	}
	return nil
}

// EthtoolPrivFlags is `ethtool --show-priv-flags`.
func EthtoolPrivFlags(ifname string) (map[string]bool, error) {
	f, err := withEthtool(func(e *ethtool.Ethtool) (map[string]bool, error) { return e.PrivFlags(ifname) })
	if err != nil {
		return nil, fmt.Errorf("ethtool --show-priv-flags %s: %w", ifname, err)
	}
	return f, nil
}

// EthtoolSetPrivFlags is `ethtool --set-priv-flags`.
func EthtoolSetPrivFlags(ifname string, want map[string]bool) error {
	_, err := withEthtool(func(e *ethtool.Ethtool) (struct{}, error) { return struct{}{}, e.UpdatePrivFlags(ifname, want) })
	if err != nil {
		return fmt.Errorf("ethtool --set-priv-flags %s: %w", ifname, err)
	}
	return nil
}

const (
	ethtoolGRXFHINDIR = 0x38
	ethtoolSRXFHINDIR = 0x39
)

// rxfhIndir is struct ethtool_rxfh_indir with room for size entries.
func rxfhIndir(ifname string, cmd uint32, table []uint32) ([]uint32, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	do := func(buf []uint32) error {
		var ifr [unix.IFNAMSIZ + 24]byte
		copy(ifr[:unix.IFNAMSIZ-1], ifname)
		*(*uintptr)(unsafe.Pointer(&ifr[unix.IFNAMSIZ])) = uintptr(unsafe.Pointer(&buf[0]))
		_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr[0])))
		if e != 0 {
			return e
		}
		return nil
	}
	if cmd == ethtoolSRXFHINDIR {
		buf := append([]uint32{cmd, uint32(len(table))}, table...)
		return table, do(buf)
	}
	head := []uint32{cmd, 0}
	if err := do(head); err != nil {
		return nil, err
	}
	buf := make([]uint32, 2+head[1])
	buf[0], buf[1] = cmd, head[1]
	if err := do(buf); err != nil {
		return nil, err
	}
	return buf[2:], nil
}

// EthtoolRSS returns the RSS indirection table (`ethtool -x`): entry i is
// the RX queue of hash bucket i.
func EthtoolRSS(ifname string) ([]uint32, error) {
	t, err := rxfhIndir(ifname, ethtoolGRXFHINDIR, nil)
	if err != nil {
		return nil, fmt.Errorf("ethtool -x %s: %w", ifname, err)
	}
	return t, nil
}

// EthtoolSetRSSEqual spreads the hash buckets over the first n queues
// (`ethtool -X IF equal N`).
func EthtoolSetRSSEqual(ifname string, n int) error {
	t, err := EthtoolRSS(ifname)
	if err != nil {
		return err
	}
	if n <= 0 || len(t) == 0 {
		return fmt.Errorf("ethtool -X %s equal %d: table of %d entries", ifname, n, len(t))
	}
	for i := range t {
		t[i] = uint32(i % n)
	}
	if _, err := rxfhIndir(ifname, ethtoolSRXFHINDIR, t); err != nil {
		return fmt.Errorf("ethtool -X %s equal %d: %w", ifname, n, err)
	}
	return nil
}
