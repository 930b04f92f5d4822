// SPDX-License-Identifier: Apache-2.0

package hwcheck

import (
	"context"

	"sluice/internal/driverquirk"
)

// Bond failover: with packet offload at both ends of an active-backup
// bond, 6.12 accepts cleartext that matches a packet-offloaded IN policy
// (0a4524bc6988), so the leak after a failover is silent. Measuring it
// takes a bond of two ports on each end, cabled port to port; a run has
// one pair, so the row says what it needs, and is never counted as
// passed.
var bondScenario = scenario{
	name:      "bond-failover",
	behaviour: driverquirk.CleartextAcceptedOnOffloadedIN,
	outcomes: outcomes{
		yes: "cleartext accepted after a failover (offloaded IN policy)",
		no:  "cleartext dropped after a failover",
	},
	run: func(context.Context, *lab, int) measurement {
		return measurement{notRun: "needs two port pairs (an active-backup bond of two ports on each end, cabled port to port); " +
			"this run has one pair (--port, --peer). test/vm's TestOverlayPacketOffloadBond measures it on the model"}
	},
}
