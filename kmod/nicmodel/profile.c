// SPDX-License-Identifier: GPL-2.0
/*
 * nicmodel: driver profiles. A profile is a set of named behaviour
 * switches, each read from one version of the mlx5 driver (README.md
 * cites file and function for each). The module parameter "profile"
 * selects one at load time and may be changed at run time (tests switch
 * it to prove a row under both); switches read when an SA is added (the
 * TX sequence start, the replay window) apply to SAs added afterwards.
 */
#include <linux/module.h>
#include "nicmodel.h"

static const struct nm_profile nm_profiles[] = {
	{
		/* Linux 6.12 (Debian 13, RHEL 10): the oldest kernel users
		 * run with packet offload.
		 */
		.name = "mlx5-6.12",
		.exact_addr_match = true,
		.tx_sa_miss_cleartext = true,
		.no_frags = true,
		.reqid0_sa_miss = true,
		.reqid_only_sa = true,
		.replay_esn_only = true,
		.seq_restart = true,
		.crypto_rx_hw_drop = true,
		.espinudp = true,
	},
	{
		/* Upstream after "net/mlx5e: Properly match IPsec subnet
		 * addresses" (mlx5e_ipsec_policy_mask in ipsec.c): selectors
		 * match by prefix. The other rows are unchanged there as far
		 * as read (README.md).
		 */
		.name = "mlx5-upstream",
		.exact_addr_match = false,
		.tx_sa_miss_cleartext = true,
		.no_frags = true,
		.reqid0_sa_miss = true,
		.reqid_only_sa = true,
		.replay_esn_only = true,
		.seq_restart = true,
		.crypto_rx_hw_drop = true,
		.espinudp = true,
	},
	{
		/* No driver quirk: the kernel's software XFRM semantics (prefix
		 * selectors, a miss drops, fragments and every SA served). The
		 * reference the end-to-end VM tests were written against; they
		 * run under it until each handles the mlx5 rows (docs/testing.md,
		 * "Existing tests under each profile"). Not a driver.
		 */
		.name = "kernel-xfrm",
	},
};

const struct nm_profile *nm_profile = &nm_profiles[0];

static int nm_param_profile_set(const char *val, const struct kernel_param *kp)
{
	size_t n = strcspn(val, "\n");
	int i;

	for (i = 0; i < ARRAY_SIZE(nm_profiles); i++) {
		if (strlen(nm_profiles[i].name) == n &&
		    !strncmp(nm_profiles[i].name, val, n)) {
			WRITE_ONCE(nm_profile, &nm_profiles[i]);
			return 0;
		}
	}
	pr_warn("nicmodel: unknown profile \"%.*s\": use mlx5-6.12, mlx5-upstream or kernel-xfrm\n",
		(int)min_t(size_t, n, 32), val);
	return -EINVAL;
}

static int nm_param_profile_get(char *buf, const struct kernel_param *kp)
{
	return sysfs_emit(buf, "%s\n", READ_ONCE(nm_profile)->name);
}

static const struct kernel_param_ops nm_profile_ops = {
	.set = nm_param_profile_set,
	.get = nm_param_profile_get,
};
module_param_cb(profile, &nm_profile_ops, NULL, 0644);
MODULE_PARM_DESC(profile, "driver whose behaviour the model follows: mlx5-6.12 (default), mlx5-upstream, or kernel-xfrm (no driver quirk)");
