// SPDX-License-Identifier: GPL-2.0
/*
 * nicmodel: wire taps, for an oracle that is not the model's counters.
 *
 *   echo "nm1 nm1tap" > /sys/module/nicmodel/parameters/new_tap
 *
 * makes nm1tap, in the writer's network namespace, a receive-only device
 * that gets a copy of every frame the port nm1 receives from the wire,
 * as it was on the wire: before nm1's flower rules, ESP decryption and
 * XDP. A capture (AF_PACKET) on the tap then sees ESP as ESP even when
 * nm1 holds the SA and hands its stack the decrypted packet, and the
 * test classifies the frames itself. A tap goes with its port; it
 * transmits nothing. One tap per port.
 */
#include <linux/module.h>
#include <linux/etherdevice.h>
#include <linux/rtnetlink.h>
#include "nicmodel.h"

static netdev_tx_t nm_tap_xmit(struct sk_buff *skb, struct net_device *dev)
{
	/* Receive-only: the host's own frames (IPv6 ND) go nowhere. */
	dev_core_stats_tx_dropped_inc(dev);
	kfree_skb(skb);
	return NETDEV_TX_OK;
}

static const struct net_device_ops nm_tap_ops = {
	.ndo_start_xmit = nm_tap_xmit,
};

static void nm_tap_setup(struct net_device *dev)
{
	ether_setup(dev);
	dev->netdev_ops = &nm_tap_ops;
	dev->needs_free_netdev = true;
	dev->flags |= IFF_NOARP;
	dev->max_mtu = 9000 + VLAN_HLEN;
	dev->mtu = 9000;
}

/* nm_tap_rx: called from the port's NAPI poll, under RCU. */
void nm_tap_rx(struct nm_priv *priv, const struct sk_buff *skb)
{
	struct net_device *tap = rcu_dereference(priv->tap);
	struct sk_buff *copy;

	if (!tap || !netif_running(tap))
		return;
	/* A copy, not a clone: the port's RX stage writes in place. */
	copy = skb_copy(skb, GFP_ATOMIC);
	if (!copy) {
		dev_core_stats_rx_dropped_inc(tap);
		return;
	}
	copy->dev = tap;
	copy->protocol = eth_type_trans(copy, tap);
	/* Frames for the port are not the tap's: its stack ignores them. */
	if (copy->pkt_type == PACKET_HOST)
		copy->pkt_type = PACKET_OTHERHOST;
	dev_sw_netstats_rx_add(tap, copy->len + ETH_HLEN);
	netif_rx(copy);
}

/* nm_tap_detach queues priv's tap, if any, for unregistering on head
 * (with its port). Under RTNL.
 */
void nm_tap_detach(struct nm_priv *priv, struct list_head *head)
{
	struct net_device *tap = rtnl_dereference(priv->tap);

	if (!tap)
		return;
	RCU_INIT_POINTER(priv->tap, NULL);
	unregister_netdevice_queue(tap, head);
}

static int nm_new_tap(const char *port, const char *name)
{
	struct net *net = current->nsproxy->net_ns;
	struct net_device *dev, *tap;
	struct nm_priv *priv;
	int err;

	if (!ns_capable(net->user_ns, CAP_NET_ADMIN))
		return -EPERM;
	tap = alloc_netdev(0, name, NET_NAME_USER, nm_tap_setup);
	if (!tap)
		return -ENOMEM;
	dev_net_set(tap, net);
	eth_hw_addr_random(tap);
	tap->pcpu_stat_type = NETDEV_PCPU_STAT_TSTATS;
	rtnl_lock();
	dev = __dev_get_by_name(net, port);
	priv = nm_port_priv(dev);
	if (!priv) {
		pr_warn("nicmodel: new_tap: %s is not a nicmodel port in this namespace\n", port);
		err = -ENODEV;
		goto fail;
	}
	if (rtnl_dereference(priv->tap)) {
		pr_warn("nicmodel: new_tap: %s has a tap already\n", port);
		err = -EBUSY;
		goto fail;
	}
	err = register_netdevice(tap);
	if (err)
		goto fail;
	rcu_assign_pointer(priv->tap, tap);
	rtnl_unlock();
	return 0;
fail:
	rtnl_unlock();
	free_netdev(tap);
	return err;
}

static int nm_param_new_tap(const char *val, const struct kernel_param *kp)
{
	char a[IFNAMSIZ], b[IFNAMSIZ];

	if (sscanf(val, "%15s %15s", a, b) != 2 || !strcmp(a, b) ||
	    !dev_valid_name(b)) {
		pr_warn("nicmodel: new_tap wants a port and a new name: \"PORT TAPNAME\"\n");
		return -EINVAL;
	}
	return nm_new_tap(a, b);
}

static const struct kernel_param_ops nm_new_tap_ops = {
	.set = nm_param_new_tap,
};
module_param_cb(new_tap, &nm_new_tap_ops, NULL, 0200);
MODULE_PARM_DESC(new_tap, "write \"PORT TAPNAME\": TAPNAME receives a copy of every frame PORT receives from the wire");
