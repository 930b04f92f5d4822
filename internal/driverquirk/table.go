// SPDX-License-Identifier: Apache-2.0

package driverquirk

// Entry is one row of the table: Driver (as `ethtool -i` names it; ""
// for the kernel's own XFRM core, whatever the driver) shows Behaviour on
// kernels From (inclusive) up to Until (exclusive; zero: no fix known).
type Entry struct {
	Driver      string
	From, Until Version
	Behaviour   Behaviour
	// Leaks is true when the behaviour puts cleartext on the wire or
	// accepts it: plan and apply refuse it unless the file accepts it.
	Leaks bool
	// Source is where it was read: file:function and version, or the
	// upstream commit that changed it.
	Source string
	// Fix is what the user does about it.
	Fix string
}

// Drivers named in the table.
const (
	MLX5    = "mlx5_core"
	Bonding = "bonding"
	// AnyDriver marks rows of the kernel's XFRM core.
	AnyDriver = ""
)

// mlx5Packet is the first kernel with mlx5 IPsec packet offload.
var mlx5Packet = V(6, 2, 0)

const mlx5Dir = "drivers/net/ethernet/mellanox/mlx5/core/en_accel/"

// Table is what sluice knows. Rows for mlx5_core were read in Linux
// 6.12.95 (the Debian source the test VM runs, /usr/src/linux-source-6.12);
// an Until of zero means no upstream fix is known to sluice, not that
// none exists: `sluice verify --traffic` proves the behaviours it can on
// the live device. docs/testing.md ("Driver behaviour: model vs hardware")
// has the same table for people.
var Table = []Entry{
	{
		Driver: MLX5, From: mlx5Packet, Until: V(6, 15, 0), Behaviour: ExactSelectorMatch, Leaks: true,
		Source: mlx5Dir + "ipsec_fs.c:setup_fte_addr4/setup_fte_addr6 (6.12.95: all-ones mask on any non-zero selector address, prefix length unused); " +
			`fixed by ca7992f52c2c "net/mlx5e: Properly match IPsec subnet addresses" (net-next, March 2025: 6.15, by its merge date; vendor kernels may carry it earlier)`,
		Fix: "one policy per host (/32 or /128 selectors), or a kernel with the subnet fix (6.15 or later); `sluice verify --traffic` proves which the live device does",
	},
	{
		Driver: MLX5, From: mlx5Packet, Behaviour: NoTXMissRule, Leaks: true,
		Source: mlx5Dir + "ipsec_fs.c:tx_create (6.12.95: no miss rule for the TX SA table in legacy mode; in switchdev, tx == ipsec->tx_esw, ipsec_miss_create forwards the miss to MLX5_VPORT_UPLINK)",
		Fix:    "never leave an offloaded OUT policy without its SA: delete the policy before the SA (sluice's teardown order), and let the gateway check the SA before it redirects",
	},
	{
		Driver: MLX5, From: mlx5Packet, Behaviour: FragmentsCleartext, Leaks: true,
		Source: mlx5Dir + "ipsec_fs.c:tx_add_rule/tx_add_policy (6.12.95: setup_fte_no_frags on every TX rule)",
		Fix:    "keep inner packets below the tunnel MTU so nothing is fragmented before ESP (sluice's MTU headroom; DF set), and pass fragments to the kernel",
	},
	{
		Driver: MLX5, From: mlx5Packet, Behaviour: IPOptionsRefused,
		Source: mlx5Dir + "ipsec.c:mlx5e_ipsec_offload_ok (6.12.95: false for IPv4 ihl > 5 and any IPv6 extension header)",
		Fix:    "none needed: the kernel drops such packets rather than send them in cleartext; expect them to be lost",
	},
	{
		Driver: MLX5, From: mlx5Packet, Behaviour: SecondSAPending,
		Source: mlx5Dir + "ipsec_fs.c:tx_add_rule (6.12.95: packet offload matches only reg_c_4 == reqid, setup_fte_reg_c4)",
		Fix:    "rekey make-before-break and delete the old OUT SA right after the new one is installed; never hold three OUT SAs of one reqid",
	},
	{
		Driver: MLX5, From: mlx5Packet, Behaviour: Reqid0Cleartext, Leaks: true,
		Source: mlx5Dir + "ipsec_fs.c:tx_add_policy (6.12.95: reqid 0 sets no reg_c_4 modify header); ipsec.c:mlx5e_xfrm_validate_policy refuses reqid 0 only without addresses or protocol",
		Fix:    "give every offloaded policy template a non-zero reqid (sluice derives one per peer)",
	},
	{
		Driver: MLX5, From: mlx5Packet, Behaviour: NoReplayWithoutESN,
		Source: mlx5Dir + "ipsec.c:mlx5e_ipsec_build_accel_xfrm_attrs (6.12.95: replay_esn.trigger and the window only under XFRM_STATE_ESN; unchanged upstream as of 2025-10)",
		Fix:    "esn: true on packet-offloaded peers (both ends)",
	},
	{
		// Leaks: the same key and salt from sequence 1 again repeat
		// AES-GCM nonces, which gives away the XOR of two plaintexts and
		// the authentication key.
		Driver: MLX5, From: mlx5Packet, Behaviour: SeqRestartsAtOne, Leaks: true,
		Source: mlx5Dir + "ipsec.c:mlx5e_xfrm_add_state (6.12.95: a non-ESN SA gets esn_state.esn = 1 whatever oseq says; unchanged upstream as of 2025-10)",
		Fix:    "esn: true (an ESN SA starts where oseq says), or a new SPI and key instead of moving the SA",
	},
	// The kernel's XFRM core: commit 0a4524bc6988 accepts cleartext that
	// matches a packet-offloaded IN policy (facts: "in 6.12.y, 6.6.128+,
	// 7.0"). The first 6.12.y with it was not checked: from 6.12.0.
	{Driver: AnyDriver, From: V(6, 6, 128), Until: V(6, 7, 0), Behaviour: CleartextAcceptedOnOffloadedIN, Leaks: true, Source: xfrmCoreSource, Fix: xfrmCoreFix},
	{Driver: AnyDriver, From: V(6, 12, 0), Until: V(6, 13, 0), Behaviour: CleartextAcceptedOnOffloadedIN, Leaks: true, Source: xfrmCoreSource, Fix: xfrmCoreFix},
	{Driver: AnyDriver, From: V(7, 0, 0), Behaviour: CleartextAcceptedOnOffloadedIN, Leaks: true, Source: xfrmCoreSource, Fix: xfrmCoreFix},
	{
		Driver: Bonding, From: mlx5Packet, Behaviour: NoBondPacketOffloadPolicy, Leaks: true,
		Source: "drivers/net/bonding/bond_main.c:bond_xfrmdev_ops (6.12.95: xdo_dev_state_add, no xdo_dev_policy_add)",
		Fix:    "run `sluice apply` after every failover (it moves SAs and policies to the new active port), or offload: crypto or none on a bond",
	},
}

const (
	xfrmCoreSource = "include/net/xfrm.h:__xfrm_policy_check2 and net/xfrm/xfrm_policy.c (commit 0a4524bc6988; read in 6.12.95): cleartext matching a packet-offloaded IN policy is accepted for local delivery"
	xfrmCoreFix    = "do not rely on the IN policy to drop cleartext: keep both ends' packet-offloaded SAs on the active port (`sluice apply` after a failover), or use crypto offload, where the kernel checks every packet"
)
