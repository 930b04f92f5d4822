// SPDX-License-Identifier: Apache-2.0

package gateway

import (
	"context"
	"log/slog"
	"time"

	"sluice/internal/api"
)

// socketCheckEvery is how often the daemon checks its API socket's name.
const socketCheckEvery = time.Second

// watchSocket checks that the API socket's published name is still this
// daemon's: a removed name is published again, and a name that now is
// someone else's file is reported (once per change), since `sluice show
// gateway` there would read whatever that file's owner serves.
func watchSocket(ctx context.Context, l *api.SocketListener, log *slog.Logger) {
	tick := time.NewTicker(socketCheckEvery)
	defer tick.Stop()
	last := ""
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		republished, err := l.Verify()
		switch {
		case republished:
			log.Error("the API socket was removed under the daemon; published it again", "socket", l.Addr().String())
			last = ""
		case err != nil && err.Error() != last:
			log.Error("the API socket is not this daemon's any more", "err", err)
			last = err.Error()
		case err == nil && last != "":
			log.Info("the API socket is this daemon's again", "socket", l.Addr().String())
			last = ""
		}
	}
}
