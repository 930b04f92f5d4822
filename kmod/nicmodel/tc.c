// SPDX-License-Identifier: GPL-2.0
/*
 * nicmodel: tc flower offload, only as far as IPsec cares.
 *
 * mlx5 keeps tc offload and IPsec packet offload apart on one netdev
 * (6.12: en_tc.c mlx5e_tc_block_ipsec_offload, en_accel/ipsec_fs.c
 * mlx5e_ipsec_block_tc_offload; rules on VF representors are exempt):
 * while flower rules are offloaded, adding a packet-offloaded SA or
 * policy fails with EBUSY, and while such SAs or policies exist, adding a
 * flower rule fails with EBUSY. Whichever comes first wins. mlx5 says
 * nothing more; the model's extack says why. nm_flower (tc_flower.c)
 * checks it before it parses the rule, so a port with IPsec offload
 * answers EBUSY to any rule; the rules a port accepts are executed on its
 * receive path (tc_flower.c; ethtool -S tc_rule_count counts them).
 */
#include <net/flow_offload.h>
#include <net/pkt_cls.h>
#include "nicmodel.h"

static LIST_HEAD(nm_block_cb_list);

static int nm_block_cb(enum tc_setup_type type, void *type_data,
		       void *cb_priv)
{
	struct nm_priv *priv = cb_priv;

	if (type != TC_SETUP_CLSFLOWER)
		return -EOPNOTSUPP;
	return nm_flower(priv, type_data);
}

int nm_setup_tc(struct net_device *dev, enum tc_setup_type type,
		void *type_data)
{
	struct nm_priv *priv = netdev_priv(dev);

	switch (type) {
	case TC_SETUP_BLOCK:
		return flow_block_cb_setup_simple(type_data, &nm_block_cb_list,
						  nm_block_cb, priv, priv, true);
	default:
		return -EOPNOTSUPP;
	}
}
