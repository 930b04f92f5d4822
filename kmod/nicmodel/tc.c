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
 * nothing more; the model's extack says why. The model accepts and counts flower
 * rules (ethtool -S tc_rule_count) but does not execute them: a skip_sw
 * rule on the model forwards nothing.
 */
#include <net/flow_offload.h>
#include <net/pkt_cls.h>
#include "nicmodel.h"

static LIST_HEAD(nm_block_cb_list);

struct nm_tc_rule {
	struct list_head node;
	unsigned long cookie;
};

static int nm_flower(struct nm_priv *priv, struct flow_cls_offload *f)
{
	struct nm_tc_rule *r, *tmp;
	int err = 0;

	switch (f->command) {
	case FLOW_CLS_REPLACE:
		r = kzalloc(sizeof(*r), GFP_KERNEL);
		if (!r)
			return -ENOMEM;
		r->cookie = f->cookie;
		spin_lock_bh(&priv->tbl_lock);
		if (priv->n_sa || priv->n_pol) {
			err = -EBUSY;
			NL_SET_ERR_MSG_MOD(f->common.extack,
					   "Cannot offload tc rules while IPsec offload is active on the device");
		} else {
			list_add(&r->node, &priv->tc_rules);
			WRITE_ONCE(priv->n_tc, priv->n_tc + 1);
		}
		spin_unlock_bh(&priv->tbl_lock);
		if (err)
			kfree(r);
		return err;
	case FLOW_CLS_DESTROY:
		spin_lock_bh(&priv->tbl_lock);
		list_for_each_entry_safe(r, tmp, &priv->tc_rules, node) {
			if (r->cookie != f->cookie)
				continue;
			list_del(&r->node);
			WRITE_ONCE(priv->n_tc, priv->n_tc - 1);
			kfree(r);
			break;
		}
		spin_unlock_bh(&priv->tbl_lock);
		return 0;
	case FLOW_CLS_STATS:
		return 0;
	default:
		return -EOPNOTSUPP;
	}
}

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
