// SPDX-License-Identifier: Apache-2.0

package fastpath

import "fmt"

// Open reports whether packets can be forwarded in XDP right now: the
// mirror marked the tables ready and the lease, if one was ever armed, has
// not run out. Status reads it so that it never claims a sync the program
// does not act on (another process closed it, the lease lapsed while the
// daemon was stopped).
func (dp *Datapath) Open() (bool, error) {
	cfg, err := dp.config()
	if err != nil {
		return false, err
	}
	expired, err := dp.LeaseExpired()
	return cfg.Ready != 0 && !expired, err
}

// LeaseExpired reports whether the lease timer fired: the daemon did not
// renew in time (it was stopped, or starved), so the program has been
// passing everything to the kernel.
func (dp *Datapath) LeaseExpired() (bool, error) {
	var l fastpathFpLease
	if err := dp.objs.Lease.Lookup(uint32(0), &l); err != nil {
		return false, fmt.Errorf("fastpath: reading the lease: %w", err)
	}
	return l.Expired != 0, nil
}
