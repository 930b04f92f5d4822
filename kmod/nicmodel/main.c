// SPDX-License-Identifier: GPL-2.0
/*
 * nicmodel: ports, pairs and the module's life cycle.
 *
 * A pair is made by writing two names to the new_pair parameter, in the
 * network namespace that should own both ports:
 *
 *   echo "nm0 nm1" > /sys/module/nicmodel/parameters/new_pair
 *
 * (iproute2 only knows the "peer" syntax for veth, so "ip link add" cannot
 * name a peer for another kind.) "ip link del" of either port removes
 * both, as for veth; ports move between namespaces with "ip link set
 * ... netns". Unloading the module removes every pair.
 */
#include <linux/module.h>
#include <linux/etherdevice.h>
#include <linux/rtnetlink.h>
#include <net/rtnetlink.h>
#include <net/net_namespace.h>
#include "nicmodel.h"

unsigned int nm_sa_budget = 1024;
module_param_named(sa_budget, nm_sa_budget, uint, 0644);
MODULE_PARM_DESC(sa_budget, "SAs one port can offload (the flow-steering capacity a real NIC has)");

/*
 * A frame an offloaded OUT policy selects whose template has no SA: the
 * kernel never hands the device one (it has no SA either), but XDP and tc
 * can. mlx5 (en_accel/ipsec_fs.c, tx_create) gives its TX SA table a
 * miss rule only in switchdev mode (tx_esw): such a frame continues
 * unencrypted, which the profiles model. -1 follows the profile; 0 drops
 * (tx_ipsec_drop_no_state) and 1 sends in cleartext, whatever the profile.
 */
int nm_tx_miss_cleartext = -1;
module_param_named(tx_miss_cleartext, nm_tx_miss_cleartext, int, 0644);
MODULE_PARM_DESC(tx_miss_cleartext, "frames a policy selects but no SA serves: -1 as the profile (default), 0 drop, 1 cleartext");

/*
 * Ports registered and not yet freed: a port is freed only once every
 * reference to it is gone (netdev_run_todo), so a count that does not
 * return after its namespace was deleted is a leaked reference (tests read
 * it; "unregister_netdevice: waiting for ..." says the same, later).
 */
static atomic_t nm_live_ports = ATOMIC_INIT(0);

static int nm_param_ports_get(char *buf, const struct kernel_param *kp)
{
	return sysfs_emit(buf, "%d\n", atomic_read(&nm_live_ports));
}

static const struct kernel_param_ops nm_ports_ops = {
	.get = nm_param_ports_get,
};
module_param_cb(ports, &nm_ports_ops, NULL, 0444);
MODULE_PARM_DESC(ports, "ports registered and not yet freed (read-only)");

static struct rtnl_link_ops nm_link_ops;

bool nm_is_port(const struct net_device *dev)
{
	return dev->rtnl_link_ops == &nm_link_ops;
}

/*
 * nm_port_priv: the model's state of dev, or NULL if dev is not a model
 * port. The xfrm core hands a driver the device an SA was added on
 * (xso.dev), which is a bond when the SA goes through one: the port is
 * xso.real_dev, and netdev_priv of anything else is not ours.
 */
struct nm_priv *nm_port_priv(struct net_device *dev)
{
	if (!dev || !nm_is_port(dev))
		return NULL;
	return netdev_priv(dev);
}

static int nm_open(struct net_device *dev)
{
	struct nm_priv *priv = netdev_priv(dev);
	struct net_device *peer = rtnl_dereference(priv->peer);

	napi_enable(&priv->napi);
	if (peer && netif_running(peer)) {
		netif_carrier_on(dev);
		netif_carrier_on(peer);
	}
	netif_start_queue(dev);
	return 0;
}

static int nm_stop(struct net_device *dev)
{
	struct nm_priv *priv = netdev_priv(dev);
	struct net_device *peer = rtnl_dereference(priv->peer);

	netif_stop_queue(dev);
	netif_carrier_off(dev);
	if (peer)
		netif_carrier_off(peer);
	napi_disable(&priv->napi);
	skb_queue_purge(&priv->rxq);
	return 0;
}

static void nm_get_stats64(struct net_device *dev,
			   struct rtnl_link_stats64 *s)
{
	struct nm_priv *priv = netdev_priv(dev);

	s->tx_packets = atomic64_read(&priv->stats[NM_TX_PACKETS]);
	s->tx_bytes = atomic64_read(&priv->stats[NM_TX_BYTES]);
	s->rx_packets = atomic64_read(&priv->stats[NM_RX_PACKETS]);
	s->rx_bytes = atomic64_read(&priv->stats[NM_RX_BYTES]);
	s->tx_dropped = atomic64_read(&priv->stats[NM_TX_DROPPED]);
	s->rx_dropped = atomic64_read(&priv->stats[NM_RX_DROPPED]);
}

static int nm_change_mtu(struct net_device *dev, int mtu)
{
	struct nm_priv *priv = netdev_priv(dev);

	/* A frame must fit one page next to XDP's headroom (xdp.c). */
	if (rtnl_dereference(priv->xdp_prog) &&
	    mtu + ETH_HLEN > PAGE_SIZE - XDP_PACKET_HEADROOM -
			     SKB_DATA_ALIGN(sizeof(struct skb_shared_info)))
		return -EINVAL;
	WRITE_ONCE(dev->mtu, mtu);
	return 0;
}

static int nm_init(struct net_device *dev)
{
	struct nm_priv *priv = netdev_priv(dev);
	int err;

	err = xdp_rxq_info_reg(&priv->xdp_rxq, dev, 0, 0);
	if (err)
		return err;
	err = xdp_rxq_info_reg_mem_model(&priv->xdp_rxq, MEM_TYPE_PAGE_SHARED,
					 NULL);
	if (err)
		xdp_rxq_info_unreg(&priv->xdp_rxq);
	else
		atomic_inc(&nm_live_ports);
	return err;
}

/* Runs when the last reference is gone (netdev_run_todo). */
static void nm_destructor(struct net_device *dev)
{
	atomic_dec(&nm_live_ports);
}

static void nm_uninit(struct net_device *dev)
{
	struct nm_priv *priv = netdev_priv(dev);
	struct bpf_prog *prog = rtnl_dereference(priv->xdp_prog);

	if (prog) {
		RCU_INIT_POINTER(priv->xdp_prog, NULL);
		bpf_prog_put(prog);
	}
	xdp_rxq_info_unreg(&priv->xdp_rxq);
	skb_queue_purge(&priv->rxq);
}

static const struct net_device_ops nm_netdev_ops = {
	.ndo_init = nm_init,
	.ndo_uninit = nm_uninit,
	.ndo_open = nm_open,
	.ndo_stop = nm_stop,
	.ndo_start_xmit = nm_start_xmit,
	.ndo_get_stats64 = nm_get_stats64,
	.ndo_change_mtu = nm_change_mtu,
	.ndo_set_mac_address = eth_mac_addr,
	.ndo_validate_addr = eth_validate_addr,
	.ndo_bpf = nm_bpf,
	.ndo_xdp_xmit = nm_xdp_xmit,
	.ndo_setup_tc = nm_setup_tc,
};

static void nm_setup(struct net_device *dev)
{
	struct nm_priv *priv = netdev_priv(dev);

	ether_setup(dev);
	dev->netdev_ops = &nm_netdev_ops;
	dev->ethtool_ops = &nm_ethtool_ops;
	dev->xfrmdev_ops = &nm_xfrmdev_ops;
	dev->rtnl_link_ops = &nm_link_ops;
	dev->needs_free_netdev = true;
	dev->priv_destructor = nm_destructor;
	dev->lltx = true;
	dev->priv_flags &= ~IFF_TX_SKB_SHARING;
	dev->min_mtu = ETH_MIN_MTU;
	dev->max_mtu = 9000;
	/*
	 * NETIF_F_HW_ESP: the xfrm core flushes offloaded SAs and policies
	 * when the port goes down only if it is set. No checksum, SG or TSO
	 * offload: the stack hands the port complete, linear-enough frames,
	 * which keeps the model's ESP code simple.
	 */
	dev->features |= NETIF_F_HW_ESP | NETIF_F_HW_TC;
	dev->hw_features |= NETIF_F_HW_ESP | NETIF_F_HW_TC;
	/*
	 * Crypto offload: xfrm_output marks the skb encapsulated, so
	 * netif_skb_features keeps only hw_enc_features; without HW_ESP
	 * there, esp_xmit falls back to software (CRYPTO_FALLBACK).
	 */
	dev->hw_enc_features |= NETIF_F_HW_ESP;
	dev->xdp_features = NETDEV_XDP_ACT_BASIC | NETDEV_XDP_ACT_REDIRECT |
			    NETDEV_XDP_ACT_NDO_XMIT;

	priv->dev = dev;
	skb_queue_head_init(&priv->rxq);
	netif_napi_add(dev, &priv->napi, nm_poll);
	nm_ipsec_init(priv);
}

/* Linux 6.15 passes the netlink arguments in struct rtnl_newlink_params. */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 15, 0)
static int nm_newlink(struct net_device *dev,
		      struct rtnl_newlink_params *params,
		      struct netlink_ext_ack *extack)
#else
static int nm_newlink(struct net *net, struct net_device *dev,
		      struct nlattr *tb[], struct nlattr *data[],
		      struct netlink_ext_ack *extack)
#endif
{
	NL_SET_ERR_MSG(extack, "nicmodel ports come in pairs: echo \"NAME PEERNAME\" > /sys/module/nicmodel/parameters/new_pair");
	return -EOPNOTSUPP;
}

/*
 * nm_dellink: "ip link del" of either port removes both, as for veth. When
 * the port goes because its namespace is dismantled, the peer stays (as a
 * NIC port stays when the host at the other end of its cable goes), with
 * no carrier and no peer, until its own namespace goes or it is deleted.
 * Removing it from a live namespace in the dying one's batch unregistered
 * it while that namespace still held references to it: a tunnel's cached
 * XFRM bundle keeps a deleted packet-offloaded policy, and the policy its
 * device (xfrm_dev_policy_free runs only when the policy is freed), until
 * the tunnel sends again or goes. The batch then waited for that namespace,
 * whose own dismantling queues behind it on the netns workqueue: "waiting
 * for a0 to become free" forever (TestOverlayPacketOffloadBondBothEnds).
 * That holds for a peer whose namespace is already dying too, but in a
 * later batch: check_net cannot tell, so a dying port never takes a peer
 * from another namespace.
 */
static void nm_dellink(struct net_device *dev, struct list_head *head)
{
	struct nm_priv *priv = netdev_priv(dev);
	struct net_device *peer = rtnl_dereference(priv->peer);

	nm_tap_detach(priv, head);
	unregister_netdevice_queue(dev, head);
	if (peer) {
		struct nm_priv *pp = netdev_priv(peer);

		RCU_INIT_POINTER(priv->peer, NULL);
		RCU_INIT_POINTER(pp->peer, NULL);
		netif_carrier_off(peer);
		/* Dismantling: the peer goes with its own namespace (this
		 * batch or a later one) or stays.
		 */
		if (!check_net(dev_net(dev)) && !net_eq(dev_net(dev), dev_net(peer)))
			return;
		nm_tap_detach(pp, head);
		unregister_netdevice_queue(peer, head);
	}
}

static struct net *nm_get_link_net(const struct net_device *dev)
{
	struct nm_priv *priv = netdev_priv(dev);
	struct net_device *peer = rtnl_dereference(priv->peer);

	return peer ? dev_net(peer) : dev_net(dev);
}

static struct rtnl_link_ops nm_link_ops = {
	.kind = NM_DRV_NAME,
	.priv_size = sizeof(struct nm_priv),
	.setup = nm_setup,
	.newlink = nm_newlink,
	.dellink = nm_dellink,
	.get_link_net = nm_get_link_net,
};

static struct net_device *nm_alloc(struct net *net, const char *name)
{
	struct net_device *dev;

	dev = alloc_netdev(sizeof(struct nm_priv), name, NET_NAME_USER,
			   nm_setup);
	if (!dev)
		return ERR_PTR(-ENOMEM);
	dev_net_set(dev, net);
	eth_hw_addr_random(dev);
	return dev;
}

static int nm_new_pair(const char *a, const char *b)
{
	struct net *net = current->nsproxy->net_ns;
	struct net_device *da, *db;
	int err;

	if (!ns_capable(net->user_ns, CAP_NET_ADMIN))
		return -EPERM;
	da = nm_alloc(net, a);
	if (IS_ERR(da))
		return PTR_ERR(da);
	db = nm_alloc(net, b);
	if (IS_ERR(db)) {
		free_netdev(da);
		return PTR_ERR(db);
	}
	rtnl_lock();
	err = register_netdevice(da);
	if (err) {
		rtnl_unlock();
		free_netdev(da);
		free_netdev(db);
		return err;
	}
	err = register_netdevice(db);
	if (err) {
		unregister_netdevice(da);
		rtnl_unlock();
		free_netdev(db);
		return err;
	}
	netif_carrier_off(da);
	netif_carrier_off(db);
	rcu_assign_pointer(((struct nm_priv *)netdev_priv(da))->peer, db);
	rcu_assign_pointer(((struct nm_priv *)netdev_priv(db))->peer, da);
	rtnl_unlock();
	return 0;
}

static int nm_param_new_pair(const char *val, const struct kernel_param *kp)
{
	char a[IFNAMSIZ], b[IFNAMSIZ];

	if (sscanf(val, "%15s %15s", a, b) != 2 || !strcmp(a, b)) {
		pr_warn("nicmodel: new_pair wants two different names: \"NAME PEERNAME\"\n");
		return -EINVAL;
	}
	if (!dev_valid_name(a) || !dev_valid_name(b))
		return -EINVAL;
	return nm_new_pair(a, b);
}

static const struct kernel_param_ops nm_new_pair_ops = {
	.set = nm_param_new_pair,
};
module_param_cb(new_pair, &nm_new_pair_ops, NULL, 0200);
MODULE_PARM_DESC(new_pair, "write \"NAME PEERNAME\" to create a pair of ports joined by a wire");

static int __init nm_module_init(void)
{
	int err = nm_ipsec_module_init();

	if (err)
		return err;
	err = rtnl_link_register(&nm_link_ops);
	if (err)
		nm_ipsec_module_exit();
	return err;
}

static void __exit nm_module_exit(void)
{
	/* Removes every port in every namespace through nm_dellink. */
	rtnl_link_unregister(&nm_link_ops);
	nm_ipsec_module_exit();
}

module_init(nm_module_init);
module_exit(nm_module_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("NIC model with IPsec packet offload, for tests");
MODULE_ALIAS_RTNL_LINK(NM_DRV_NAME);
