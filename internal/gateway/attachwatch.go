// SPDX-License-Identifier: Apache-2.0

package gateway

import (
	"context"
	"log/slog"
	"time"

	"sluice/internal/fastpath"
	"sluice/internal/kernel"
)

// attachCheckEvery is how often the daemon checks its attachments without
// a link event: `bpftool link detach` announces nothing.
const attachCheckEvery = time.Second

// watchAttachments keeps the program on every configured interface: on
// each link event (RTM_NEWLINK: an interface re-created under a configured
// name, a driver reload, a VF re-created) and every attachCheckEvery, it
// checks the kernel's attachments and attaches again where the program is
// missing. Status reports the port closed, with the reason, until then.
func (rt *gatewayRuntime) watchAttachments(ctx context.Context, resolve func() ([]fastpath.Iface, error), log *slog.Logger) {
	ch, err := kernel.WatchLinks(ctx)
	if err != nil {
		log.Warn("not following link changes; attachments are checked every "+attachCheckEvery.String(), "err", err)
	}
	tick := time.NewTicker(attachCheckEvery)
	defer tick.Stop()
	reported := map[string]string{} // what was last logged per interface
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case _, ok := <-ch:
			if !ok {
				ch = nil
				continue
			}
		}
		rt.checkAttachments(resolve, reported, log)
	}
}

func (rt *gatewayRuntime) checkAttachments(resolve func() ([]fastpath.Iface, error), reported map[string]string, log *slog.Logger) {
	reattached := false
	for _, gi := range rt.opts.Ifaces {
		li, err := kernel.Link(gi.Name)
		if err != nil {
			const gone = "gone"
			if reported[gi.Name] != gone {
				log.Error("interface gone: the fast path is closed on it until it comes back", "iface", gi.Name)
				reported[gi.Name] = gone
			}
			continue
		}
		if li.ParentIfindex != 0 {
			continue // the parent carries the program
		}
		why := rt.dp.AttachedTo(gi.Name, li.Ifindex)
		if why == "" {
			delete(reported, gi.Name)
			continue
		}
		if err := rt.dp.Reattach(rt.opts.PinDir, gi.Name, li.Ifindex, gi.Mode); err != nil {
			if msg := why + ": " + err.Error(); reported[gi.Name] != msg {
				log.Error("the fast path is not attached and attaching again failed; retrying", "iface", gi.Name, "why", why, "err", err)
				reported[gi.Name] = msg
			}
			continue
		}
		log.Warn("the fast path was not attached; attached again", "iface", gi.Name, "ifindex", li.Ifindex, "why", why)
		delete(reported, gi.Name)
		reattached = true
	}
	if !reattached {
		return
	}
	// A re-created interface has a new ifindex: the program's interface
	// table follows it.
	if ifs, err := resolve(); err != nil {
		log.Warn("re-resolving interfaces after re-attaching", "err", err)
	} else if err := rt.dp.SetIfaces(ifs); err != nil {
		log.Error("updating interfaces", "err", err)
	}
	if r, ok := rt.opts.Hardware.(interface{ Rederive() }); ok {
		r.Rederive() // flower rules of a re-created device are gone with it
	}
}
