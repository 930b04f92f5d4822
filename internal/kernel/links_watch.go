// SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"context"
	"sync"

	"github.com/vishvananda/netlink"
)

// WatchLinks signals (coalesced) when a link of the calling thread's
// namespace is created, changed or deleted (RTM_NEWLINK, RTM_DELLINK): an
// interface re-created under a configured name (a driver reload, a VF
// re-created) has no XDP program until the daemon attaches again. The
// channel closes when ctx ends or the subscription fails; callers keep a
// periodic check for events lost meanwhile.
func WatchLinks(ctx context.Context) (<-chan struct{}, error) {
	out := make(chan struct{}, 1)
	updates := make(chan netlink.LinkUpdate, 64)
	done := make(chan struct{})
	var once sync.Once
	stop := func() { once.Do(func() { close(done) }) }
	err := netlink.LinkSubscribeWithOptions(updates, done, netlink.LinkSubscribeOptions{
		ErrorCallback: func(error) { stop() },
	})
	if err != nil {
		return nil, err
	}
	go func() {
		defer close(out)
		defer stop()
		for {
			select {
			case <-ctx.Done():
				return
			case _, ok := <-updates:
				if !ok {
					return
				}
				select {
				case out <- struct{}{}:
				default:
				}
			}
		}
	}()
	return out, nil
}
