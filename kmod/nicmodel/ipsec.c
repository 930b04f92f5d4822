// SPDX-License-Identifier: GPL-2.0
/*
 * nicmodel: xfrmdev_ops, the contract between the xfrm core and a NIC
 * (Documentation/networking/xfrm_device.rst).
 *
 * The model takes packet and crypto offload. It refuses what mlx5
 * documents it refuses (each with an extack message), plus a per-port SA
 * budget, shared by both kinds, standing in for flow-steering capacity.
 * Crypto-offloaded SAs are only keys to the device: the stack builds and
 * parses ESP, counts, keeps sequence numbers and replay windows
 * (esp_tx.c/esp_rx.c do the AES-GCM in between).
 */
#include <linux/module.h>
#include <linux/udp.h>
#include <net/xfrm.h>
#include <net/addrconf.h>
#include "nicmodel.h"

static struct workqueue_struct *nm_wq;

/*
 * A NIC whose driver answers crypto offload with EOPNOTSUPP (no crypto
 * capability): the xfrm core then installs the SA in software and reports
 * success (xfrm_dev_state_add), which a probe must notice.
 */
static bool nm_crypto_offload = true;
module_param_named(crypto_offload, nm_crypto_offload, bool, 0644);
MODULE_PARM_DESC(crypto_offload, "accept crypto offload (0: answer EOPNOTSUPP, the kernel keeps such SAs in software)");

int nm_ipsec_module_init(void)
{
	nm_wq = alloc_workqueue("nicmodel", WQ_UNBOUND, 0);
	return nm_wq ? 0 : -ENOMEM;
}

void nm_ipsec_module_exit(void)
{
	/* Frees queued by state_free wait for a grace period first. */
	rcu_barrier();
	destroy_workqueue(nm_wq);
}

void nm_ipsec_init(struct nm_priv *priv)
{
	spin_lock_init(&priv->tbl_lock);
	hash_init(priv->sa_in);
	INIT_LIST_HEAD(&priv->sa_out);
	INIT_LIST_HEAD(&priv->pol_out);
	INIT_LIST_HEAD(&priv->pol_in);
	INIT_LIST_HEAD(&priv->tc_rules);
}


static bool nm_window_ok(u32 w)
{
	return w == 0 || w == 32 || w == 64 || w == 128 || w == 256;
}

static int nm_validate_state(struct xfrm_state *x,
			     struct netlink_ext_ack *extack)
{
	u32 window = x->replay_esn ? x->replay_esn->replay_window :
				     x->props.replay_window;

	if (x->props.aalgo != SADB_AALG_NONE) {
		NL_SET_ERR_MSG_MOD(extack, "Cannot offload authenticated xfrm states");
		return -EINVAL;
	}
	if (x->props.calgo != SADB_X_CALG_NONE) {
		NL_SET_ERR_MSG_MOD(extack, "Cannot offload compressed xfrm states");
		return -EINVAL;
	}
	if (x->props.family != AF_INET && x->props.family != AF_INET6) {
		NL_SET_ERR_MSG_MOD(extack, "Only IPv4/6 xfrm states may be offloaded");
		return -EINVAL;
	}
	if (x->id.proto != IPPROTO_ESP) {
		NL_SET_ERR_MSG_MOD(extack, "Only ESP xfrm state may be offloaded");
		return -EINVAL;
	}
	/* Row 9: mlx5e_xfrm_validate_state (ipsec.c, 6.12 and 7.3) takes
	 * UDP_ENCAP_ESPINUDP with MLX5_IPSEC_CAP_ESPINUDP, in packet offload
	 * and transport mode only. The kernel-xfrm profile is the model
	 * before profiles, which had no UDP encapsulation.
	 */
	if (x->encap) {
		if (!nm_prof()->espinudp) {
			NL_SET_ERR_MSG_MOD(extack, "Encapsulation is not supported (nicmodel profile kernel-xfrm)");
			return -EINVAL;
		}
		if (x->encap->encap_type != UDP_ENCAP_ESPINUDP) {
			NL_SET_ERR_MSG_MOD(extack, "Encapsulation other than UDP is not supported");
			return -EINVAL;
		}
		if (x->xso.type != XFRM_DEV_OFFLOAD_PACKET) {
			NL_SET_ERR_MSG_MOD(extack, "Encapsulation is supported in packet offload mode only");
			return -EINVAL;
		}
		if (x->props.mode != XFRM_MODE_TRANSPORT) {
			NL_SET_ERR_MSG_MOD(extack, "Encapsulation is supported in transport mode only");
			return -EINVAL;
		}
	}
	if (!x->aead || strcmp(x->aead->alg_name, "rfc4106(gcm(aes))")) {
		NL_SET_ERR_MSG_MOD(extack, "Only AES-GCM-ICV16 xfrm state may be offloaded: use aead 'rfc4106(gcm(aes))' with a 128-bit ICV");
		return -EINVAL;
	}
	if (x->aead->alg_icv_len != 128) {
		NL_SET_ERR_MSG_MOD(extack, "Cannot offload xfrm states with AEAD ICV length other than 128bit");
		return -EINVAL;
	}
	if (x->aead->alg_key_len != 128 + 32 && x->aead->alg_key_len != 256 + 32) {
		NL_SET_ERR_MSG_MOD(extack, "Cannot offload xfrm states with AEAD key length other than 128/256 bit");
		return -EINVAL;
	}
	if (x->tfcpad) {
		NL_SET_ERR_MSG_MOD(extack, "Cannot offload xfrm states with tfc padding");
		return -EINVAL;
	}
	if (x->geniv && strcmp(x->geniv, "seqiv")) {
		NL_SET_ERR_MSG_MOD(extack, "Cannot offload xfrm states with geniv other than seqiv");
		return -EINVAL;
	}
	if (x->sel.proto != IPPROTO_IP && x->sel.proto != IPPROTO_UDP &&
	    x->sel.proto != IPPROTO_TCP) {
		NL_SET_ERR_MSG_MOD(extack, "Device does not support upper protocol other than TCP/UDP");
		return -EINVAL;
	}
	if (x->props.mode != XFRM_MODE_TRANSPORT && x->props.mode != XFRM_MODE_TUNNEL) {
		NL_SET_ERR_MSG_MOD(extack, "Only transport and tunnel xfrm states may be offloaded");
		return -EINVAL;
	}
	/* Crypto offload: the stack keeps sequence numbers, replay windows
	 * and lifetimes; the device only needs the key (mlx5 checks nothing
	 * more for it either).
	 */
	if (x->xso.type == XFRM_DEV_OFFLOAD_CRYPTO) {
		if (READ_ONCE(nm_crypto_offload))
			return 0;
		NL_SET_ERR_MSG_MOD(extack, "crypto offload switched off (nicmodel crypto_offload=0); the SA stays in software");
		return -EOPNOTSUPP;
	}
	if (x->xso.dir == XFRM_DEV_OFFLOAD_IN && !nm_window_ok(window)) {
		NL_SET_ERR_MSG_MOD(extack, "Unsupported replay window size (32, 64, 128 or 256)");
		return -EINVAL;
	}
	if (!x->props.reqid) {
		NL_SET_ERR_MSG_MOD(extack, "Cannot offload without reqid");
		return -EINVAL;
	}
	if (x->lft.soft_byte_limit >= x->lft.hard_byte_limit &&
	    x->lft.hard_byte_limit != XFRM_INF) {
		NL_SET_ERR_MSG_MOD(extack, "Hard byte limit must be greater than soft one");
		return -EINVAL;
	}
	if (!x->lft.soft_byte_limit || !x->lft.hard_byte_limit) {
		NL_SET_ERR_MSG_MOD(extack, "Soft/hard byte limits can't be 0");
		return -EINVAL;
	}
	if (x->lft.soft_packet_limit >= x->lft.hard_packet_limit &&
	    x->lft.hard_packet_limit != XFRM_INF) {
		NL_SET_ERR_MSG_MOD(extack, "Hard packet limit must be greater than soft one");
		return -EINVAL;
	}
	if (!x->lft.soft_packet_limit || !x->lft.hard_packet_limit) {
		NL_SET_ERR_MSG_MOD(extack, "Soft/hard packet limits can't be 0");
		return -EINVAL;
	}
	return 0;
}

/*
 * nm_sa_expire_work runs with a reference on the state, taken when the
 * work was queued (nm_sa_count); whoever dequeues it puts that reference:
 * this work, or nm_state_delete when it cancels the work.
 */
static void nm_sa_expire_work(struct work_struct *w)
{
	struct nm_sa *sa = container_of(w, struct nm_sa, expire_work);
	struct xfrm_state *x = sa->x;

	/* As a driver does on a hardware lifetime event: the core reads
	 * the counters through update_stats, then raises soft/hard expire.
	 * Only on a state still valid: a deleted (DEAD) one would be set
	 * EXPIRED again and its timer armed to delete it a second time
	 * (mlx5e_ipsec_handle_limits checks the same under x->lock).
	 */
	spin_lock_bh(&x->lock);
	if (x->km.state == XFRM_STATE_VALID)
		xfrm_state_check_expire(x);
	spin_unlock_bh(&x->lock);
	xfrm_state_put(x);
}

static void nm_sa_free_work(struct work_struct *w)
{
	struct nm_sa *sa = container_of(to_rcu_work(w), struct nm_sa, free_work);

	/* The state's last reference is gone, so no expire work holds one:
	 * none is queued (nm_state_delete cancelled it or it ran). This
	 * only waits for one still finishing its xfrm_state_put.
	 */
	flush_work(&sa->expire_work);
	crypto_free_aead(sa->tfm);
	kfree_sensitive(sa);
}

static int nm_sa_crypto(struct nm_sa *sa, struct xfrm_state *x,
			struct netlink_ext_ack *extack)
{
	unsigned int keylen = x->aead->alg_key_len / 8;
	int err;

	/* A synchronous implementation: the "engine" runs in the data path. */
	sa->tfm = crypto_alloc_aead("rfc4106(gcm(aes))", 0, CRYPTO_ALG_ASYNC);
	if (IS_ERR(sa->tfm)) {
		err = PTR_ERR(sa->tfm);
		sa->tfm = NULL;
		NL_SET_ERR_MSG_MOD(extack, "rfc4106(gcm(aes)) unavailable in the kernel crypto API");
		return err;
	}
	err = crypto_aead_setkey(sa->tfm, x->aead->alg_key, keylen);
	if (!err)
		err = crypto_aead_setauthsize(sa->tfm, NM_ICV_LEN);
	if (err) {
		NL_SET_ERR_MSG_MOD(extack, "the crypto API refused the key");
		crypto_free_aead(sa->tfm);
		sa->tfm = NULL;
	}
	return err;
}

/*
 * nm_reqid_dup_full: under reqid_only_sa, mlx5's TX SA rule matches
 * reg_c_4 == reqid only (tx_add_rule, setup_fte_reg_c4 in ipsec_fs.c), so
 * a second OUT SA of a reqid is a duplicate rule that flow steering keeps
 * pending, and a third is refused (add_rule_dup_match_fte in fs_core.c).
 * Under priv->tbl_lock.
 */
static bool nm_reqid_dup_full(struct nm_priv *priv, u32 reqid)
{
	struct nm_sa *sa;
	int n = 0;

	list_for_each_entry(sa, &priv->sa_out, node) {
		if (sa->reqid == reqid)
			n++;
	}
	return n >= 2;
}

static int nm_state_add(struct net_device *dev, struct xfrm_state *x,
			struct netlink_ext_ack *extack)
{
	struct nm_priv *priv = nm_port_priv(dev);
	const struct nm_profile *prof = nm_prof();
	struct nm_sa *sa;
	int err;

	/* A larval SA from an acquire: nothing for the hardware yet. */
	if (x->xso.flags & XFRM_DEV_OFFLOAD_FLAG_ACQ)
		return 0;
	/*
	 * Through a bond, 6.12's bond_ipsec_add_sa (bond_main.c) calls the
	 * port's xdo_dev_state_add while xso.real_dev is still the bond (it
	 * sets the port after the call): the model cannot tell which port the
	 * bond chose, and the bond's private data is not a port's. It declines
	 * (crypto offload: the kernel keeps the SA in software).
	 */
	if (!priv) {
		NL_SET_ERR_MSG_MOD(extack, "nicmodel: the SA's device is not a nicmodel port (through a bond, 6.12 names the port only after the add)");
		return -EOPNOTSUPP;
	}
	err = nm_validate_state(x, extack);
	if (err)
		return err;

	sa = kzalloc(sizeof(*sa), GFP_KERNEL);
	if (!sa)
		return -ENOMEM;
	err = nm_sa_crypto(sa, x, extack);
	if (err) {
		kfree(sa);
		return err;
	}
	sa->x = x;
	sa->priv = priv;
	sa->out = x->xso.dir == XFRM_DEV_OFFLOAD_OUT;
	sa->crypto = x->xso.type == XFRM_DEV_OFFLOAD_CRYPTO;
	sa->esn = x->props.flags & XFRM_STATE_ESN;
	sa->tunnel = x->props.mode == XFRM_MODE_TUNNEL;
	sa->family = x->props.family;
	sa->reqid = x->props.reqid;
	sa->spi = x->id.spi;
	sa->saddr = x->props.saddr;
	sa->daddr = x->id.daddr;
	if (x->encap) {
		sa->encap = true;
		sa->encap_sport = x->encap->encap_sport;
		sa->encap_dport = x->encap->encap_dport;
	}
	spin_lock_init(&sa->lock);
	INIT_WORK(&sa->expire_work, nm_sa_expire_work);
	INIT_RCU_WORK(&sa->free_work, nm_sa_free_work);
	if (x->replay_esn) {
		sa->seq = (u64)x->replay_esn->oseq_hi << 32 | x->replay_esn->oseq;
		sa->window = x->replay_esn->replay_window;
		sa->top = (u64)x->replay_esn->seq_hi << 32 | x->replay_esn->seq;
	} else {
		sa->top = x->replay.seq;
		sa->seq = x->replay.oseq;
		sa->window = x->props.replay_window;
	}
	if (!sa->esn && !sa->crypto) {
		/* mlx5e_xfrm_add_state: esn_state.esn = 1 without ESN; the
		 * hardware numbers from 1 whatever oseq the SA carries.
		 */
		if (prof->seq_restart)
			sa->seq = 0;
		/* mlx5e_ipsec_build_accel_xfrm_attrs programs the replay
		 * window only under replay_esn.trigger (ESN).
		 */
		if (prof->replay_esn_only)
			sa->window = 0;
	}

	spin_lock_bh(&priv->tbl_lock);
	/* mlx5 blocks tc against packet offload only (ipsec_fs.c). */
	if (priv->n_tc && !sa->crypto) {
		err = -EBUSY;
		NL_SET_ERR_MSG_MOD(extack, "Cannot offload IPsec while tc rules are offloaded to the device");
	} else if (priv->n_sa + priv->n_crypto >= nm_sa_budget) {
		err = -ENOSPC;
		NL_SET_ERR_MSG_FMT_MOD(extack, "Device SA table is full (%u SAs; nicmodel sa_budget)", nm_sa_budget);
	} else if (sa->out && !sa->crypto && prof->reqid_only_sa &&
		   nm_reqid_dup_full(priv, sa->reqid)) {
		err = -EEXIST;
		NL_SET_ERR_MSG_MOD(extack, "Can have only a single duplicate rule (a third OUT SA of one reqid, mlx5 flow steering)");
	} else {
		sa->add_seq = ++priv->sa_seq;
		/* Crypto OUT SAs are found through the skb's secpath, never
		 * by a policy template: they stay out of sa_out.
		 */
		if (!sa->out)
			hash_add_rcu(priv->sa_in, &sa->hnode, (__force u32)sa->spi);
		else if (!sa->crypto)
			list_add_tail_rcu(&sa->node, &priv->sa_out);
		sa->linked = true;
		if (sa->crypto)
			WRITE_ONCE(priv->n_crypto, priv->n_crypto + 1);
		else
			WRITE_ONCE(priv->n_sa, priv->n_sa + 1);
	}
	spin_unlock_bh(&priv->tbl_lock);
	if (err) {
		crypto_free_aead(sa->tfm);
		kfree_sensitive(sa);
		return err;
	}
	x->xso.offload_handle = (unsigned long)sa;
	nm_neigh_prime(priv, sa);
	return 0;
}

static void nm_sa_unlink(struct nm_sa *sa)
{
	struct nm_priv *priv = sa->priv;

	spin_lock_bh(&priv->tbl_lock);
	if (sa->linked) {
		if (!sa->out)
			hash_del_rcu(&sa->hnode);
		else if (!sa->crypto)
			list_del_rcu(&sa->node);
		sa->linked = false;
		if (sa->crypto)
			WRITE_ONCE(priv->n_crypto, priv->n_crypto - 1);
		else
			WRITE_ONCE(priv->n_sa, priv->n_sa - 1);
	}
	spin_unlock_bh(&priv->tbl_lock);
}

static void nm_state_delete(struct xfrm_state *x)
{
	struct nm_sa *sa = (struct nm_sa *)x->xso.offload_handle;

	if (!sa)
		return;
	nm_sa_unlink(sa);
	/* A queued expire holds a reference (nm_sa_count): dequeued here,
	 * the reference is ours to put, or the state never reaches free.
	 * The caller holds its own reference, so this put does not free.
	 */
	if (cancel_work(&sa->expire_work))
		xfrm_state_put(x);
}

static void nm_state_free(struct xfrm_state *x)
{
	struct nm_sa *sa = (struct nm_sa *)x->xso.offload_handle;

	if (!sa)
		return;
	nm_sa_unlink(sa);
	x->xso.offload_handle = 0;
	queue_rcu_work(nm_wq, &sa->free_work);
}

/*
 * nm_offload_ok refuses what mlx5e_ipsec_offload_ok (ipsec.c, 6.12 and
 * upstream) refuses: IPv4 options and IPv6 extension headers. The kernel
 * then drops the packet (packet offload) or encrypts in software
 * (crypto offload).
 */
static bool nm_offload_ok(struct sk_buff *skb, struct xfrm_state *x)
{
	if (x->props.family == AF_INET)
		return ip_hdr(skb)->ihl <= 5;
	return !ipv6_ext_hdr(ipv6_hdr(skb)->nexthdr);
}

/*
 * nm_state_advance_esn: the xfrm core moved a crypto-offloaded IN SA's
 * replay window (xfrm_replay_advance_esn). The "hardware" keeps the top
 * of the window to infer the high half of the next sequence numbers for
 * the AAD, as mlx5 reprograms its ESN state here. Packet-offload SAs keep
 * their own window; TX takes the high half from the skb (xo->seq.hi).
 */
static void nm_state_advance_esn(struct xfrm_state *x)
{
	struct nm_sa *sa = (struct nm_sa *)x->xso.offload_handle;

	if (!sa || !sa->crypto || sa->out || !x->replay_esn)
		return;
	spin_lock_bh(&sa->lock);
	sa->top = (u64)x->replay_esn->seq_hi << 32 | x->replay_esn->seq;
	spin_unlock_bh(&sa->lock);
}

/*
 * nm_state_update_stats gives the xfrm core what the "hardware" counted.
 * Crypto offload: the stack counts its own packets; the failures the
 * device dropped (row 8) are added as mlx5e_xfrm_update_stats adds its
 * auth and trailer flow counters for an IN SA of either kind (ipsec.c):
 * integrity_failed and XfrmInStateProtoError, XfrmInHdrError. Only when
 * the core asks (`ip -s xfrm state`, an SA dump): until then the kernel's
 * counters lag the wire, as on mlx5.
 */
static void nm_state_update_stats(struct xfrm_state *x)
{
	struct nm_sa *sa = (struct nm_sa *)x->xso.offload_handle;
	struct net *net;
	u64 auth, trailer;

	if (!sa)
		return;
	if (sa->crypto) {
		auth = atomic64_xchg(&sa->auth_fail, 0);
		trailer = atomic64_xchg(&sa->trailer_fail, 0);
		net = dev_net(sa->priv->dev);
		x->stats.integrity_failed += auth;
		XFRM_ADD_STATS(net, LINUX_MIB_XFRMINSTATEPROTOERROR, auth);
		XFRM_ADD_STATS(net, LINUX_MIB_XFRMINHDRERROR, trailer);
		return;
	}
	x->curlft.packets = atomic64_read(&sa->packets);
	x->curlft.bytes = atomic64_read(&sa->bytes);
	if (READ_ONCE(sa->last_used))
		x->lastused = READ_ONCE(sa->last_used);
}

/* nm_sa_count accounts one packet; crossing a limit raises the kernel's
 * expire handling from process context, as a driver's event handler does.
 */
void nm_sa_count(struct nm_sa *sa, unsigned int bytes)
{
	struct xfrm_state *x = sa->x;
	u64 p = atomic64_inc_return(&sa->packets);
	u64 b = atomic64_add_return(bytes, &sa->bytes);
	bool fire = false;

	WRITE_ONCE(sa->last_used, ktime_get_real_seconds());
	if (p >= x->lft.hard_packet_limit || b >= x->lft.hard_byte_limit) {
		if (!test_and_set_bit(NM_SA_HARD, &sa->flags))
			fire = true;
	} else if (p >= x->lft.soft_packet_limit || b >= x->lft.soft_byte_limit) {
		if (!test_and_set_bit(NM_SA_SOFT, &sa->flags))
			fire = true;
	}
	if (fire && refcount_inc_not_zero(&x->refcnt)) {
		if (!queue_work(nm_wq, &sa->expire_work))
			xfrm_state_put(x);
	}
}

bool nm_sa_hard_expired(struct nm_sa *sa)
{
	return test_bit(NM_SA_HARD, &sa->flags);
}

struct nm_sa *nm_sa_in_lookup(struct nm_priv *priv, u16 family,
			      const xfrm_address_t *daddr, __be32 spi)
{
	struct nm_sa *sa;

	hash_for_each_possible_rcu(priv->sa_in, sa, hnode, (__force u32)spi) {
		if (sa->spi == spi && sa->family == family &&
		    xfrm_addr_equal(&sa->daddr, daddr, family))
			return sa;
	}
	return NULL;
}

static bool nm_addr_any(const xfrm_address_t *a, u16 family)
{
	return xfrm_addr_any(a, family);
}

/*
 * nm_sa_for_tmpl resolves an OUT policy's template to an SA, as the
 * kernel resolves it (xfrm_state_find): same reqid (if set), mode and
 * tunnel endpoints; in transport mode the destination is the packet's.
 * Among candidates the newest not past its hard limit wins, so a rekey
 * moves traffic to the new SA as soon as it is added.
 */
/*
 * nm_sa_for_reqid: mlx5's TX SA table (tx_add_rule) matches reg_c_4, which
 * the policy rule set to its template's reqid (tx_add_policy, only if it is
 * not 0), and nothing else of the SA for packet offload. A template with
 * reqid 0 leaves reg_c_4 0 and meets no SA (an SA needs a reqid). Of two
 * SAs of one reqid the first added is in hardware, the second pending
 * until the first is deleted (add_rule_dup_match_fte, fs_core.c).
 */
static struct nm_sa *nm_sa_for_reqid(struct nm_priv *priv,
				     const struct xfrm_tmpl *t)
{
	struct nm_sa *sa, *best = NULL;

	if (!t->reqid)
		return NULL;
	list_for_each_entry_rcu(sa, &priv->sa_out, node) {
		if (sa->reqid == t->reqid && (!best || sa->add_seq < best->add_seq))
			best = sa;
	}
	return best;
}

struct nm_sa *nm_sa_for_tmpl(struct nm_priv *priv, const struct nm_pol *pol,
			     const struct nm_flow *fl)
{
	const struct nm_profile *prof = nm_prof();
	const struct xfrm_tmpl *t = &pol->tmpl;
	struct nm_sa *sa, *best = NULL;

	if (prof->reqid_only_sa)
		return nm_sa_for_reqid(priv, t);
	if (prof->reqid0_sa_miss && !t->reqid)
		return NULL;

	list_for_each_entry_rcu(sa, &priv->sa_out, node) {
		if (t->reqid && sa->reqid != t->reqid)
			continue;
		if (t->id.spi && sa->spi != t->id.spi)
			continue;
		if ((t->mode == XFRM_MODE_TUNNEL) != sa->tunnel)
			continue;
		if (sa->tunnel) {
			if (t->encap_family != sa->family)
				continue;
			if (!nm_addr_any(&t->id.daddr, sa->family) &&
			    !xfrm_addr_equal(&t->id.daddr, &sa->daddr, sa->family))
				continue;
			if (!nm_addr_any(&t->saddr, sa->family) &&
			    !xfrm_addr_equal(&t->saddr, &sa->saddr, sa->family))
				continue;
		} else {
			if (sa->family != fl->family ||
			    !xfrm_addr_equal(&sa->daddr, &fl->daddr, fl->family))
				continue;
		}
		if (!best ||
		    (nm_sa_hard_expired(best) && !nm_sa_hard_expired(sa)) ||
		    (nm_sa_hard_expired(best) == nm_sa_hard_expired(sa) &&
		     sa->add_seq > best->add_seq))
			best = sa;
	}
	return best;
}

static int nm_validate_policy(struct xfrm_policy *xp,
			      struct netlink_ext_ack *extack)
{
	struct xfrm_selector *sel = &xp->selector;

	if (xp->type != XFRM_POLICY_TYPE_MAIN) {
		NL_SET_ERR_MSG_MOD(extack, "Cannot offload non-main policy types");
		return -EINVAL;
	}
	if (xp->xfrm_nr > 1) {
		NL_SET_ERR_MSG_MOD(extack, "Cannot offload more than one template");
		return -EINVAL;
	}
	if (xp->xdo.dir != XFRM_DEV_OFFLOAD_IN && xp->xdo.dir != XFRM_DEV_OFFLOAD_OUT) {
		NL_SET_ERR_MSG_MOD(extack, "Cannot offload forward policy");
		return -EINVAL;
	}
	if (xp->xfrm_nr && !xp->xfrm_vec[0].reqid && sel->proto == IPPROTO_IP &&
	    ipv6_addr_any(&sel->saddr.in6) && ipv6_addr_any(&sel->daddr.in6)) {
		NL_SET_ERR_MSG_MOD(extack, "Unsupported policy with reqid 0 without at least one of upper protocol or ip addr(s) different than 0");
		return -EINVAL;
	}
	if (sel->proto != IPPROTO_IP && sel->proto != IPPROTO_UDP &&
	    sel->proto != IPPROTO_TCP) {
		NL_SET_ERR_MSG_MOD(extack, "Device does not support upper protocol other than TCP/UDP");
		return -EINVAL;
	}
	if (xp->priority == U32_MAX) {
		NL_SET_ERR_MSG_MOD(extack, "Device does not support requested policy priority");
		return -EINVAL;
	}
	return 0;
}

static int nm_policy_add(struct xfrm_policy *xp, struct netlink_ext_ack *extack)
{
	/* Policies are offloaded to the device named (6.12 sets no
	 * xdo.real_dev); bonding offers no policy offload.
	 */
	struct nm_priv *priv = nm_port_priv(xp->xdo.dev);
	struct list_head *head;
	struct nm_pol *pol, *pos;
	int err;

	if (!priv) {
		NL_SET_ERR_MSG_MOD(extack, "nicmodel: the policy's device is not a nicmodel port");
		return -EOPNOTSUPP;
	}

	err = nm_validate_policy(xp, extack);
	if (err)
		return err;
	pol = kzalloc(sizeof(*pol), GFP_KERNEL);
	if (!pol)
		return -ENOMEM;
	pol->xp = xp;
	pol->priv = priv;
	pol->sel = xp->selector;
	pol->priority = xp->priority;
	pol->dir = xp->xdo.dir;
	/* ALLOW without a template is a bypass (nm_tx_ipsec): charon 6
	 * offloads its IKE port bypass policies to packet-offload ports.
	 */
	pol->action = xp->action;
	if (xp->xfrm_nr)
		pol->tmpl = xp->xfrm_vec[0];

	head = pol->dir == XFRM_DEV_OFFLOAD_OUT ? &priv->pol_out : &priv->pol_in;
	spin_lock_bh(&priv->tbl_lock);
	if (priv->n_tc) {
		spin_unlock_bh(&priv->tbl_lock);
		kfree(pol);
		NL_SET_ERR_MSG_MOD(extack, "Cannot offload IPsec while tc rules are offloaded to the device");
		return -EBUSY;
	}
	/* Sorted by priority; equal priorities keep insertion order. */
	list_for_each_entry(pos, head, node) {
		if (pos->priority > pol->priority)
			break;
	}
	list_add_tail_rcu(&pol->node, &pos->node);
	WRITE_ONCE(priv->n_pol, priv->n_pol + 1);
	spin_unlock_bh(&priv->tbl_lock);
	xp->xdo.offload_handle = (unsigned long)pol;
	return 0;
}

static void nm_pol_unlink(struct nm_priv *priv, struct nm_pol *pol)
{
	spin_lock_bh(&priv->tbl_lock);
	if (pol->xp) {
		list_del_rcu(&pol->node);
		pol->xp = NULL;
		WRITE_ONCE(priv->n_pol, priv->n_pol - 1);
	}
	spin_unlock_bh(&priv->tbl_lock);
}

static void nm_policy_delete(struct xfrm_policy *xp)
{
	struct nm_pol *pol = (struct nm_pol *)xp->xdo.offload_handle;

	if (pol)
		nm_pol_unlink(pol->priv, pol);
}

static void nm_policy_free(struct xfrm_policy *xp)
{
	struct nm_pol *pol = (struct nm_pol *)xp->xdo.offload_handle;

	if (!pol)
		return;
	nm_pol_unlink(pol->priv, pol);
	xp->xdo.offload_handle = 0;
	kfree_rcu(pol, rcu);
}

/*
 * Since Linux 6.16 the xfrm core passes the device to add, delete and
 * free (the port itself, through a bond too) and sets xso.real_dev only
 * under a bond; before, the port was xso.real_dev (nm_xso_port).
 */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 16, 0)
static void nm_state_delete_dev(struct net_device *dev, struct xfrm_state *x)
{
	nm_state_delete(x);
}

static void nm_state_free_dev(struct net_device *dev, struct xfrm_state *x)
{
	nm_state_free(x);
}
#else
static int nm_state_add_real_dev(struct xfrm_state *x,
				 struct netlink_ext_ack *extack)
{
	return nm_state_add(x->xso.real_dev, x, extack);
}
#endif

const struct xfrmdev_ops nm_xfrmdev_ops = {
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 16, 0)
	.xdo_dev_state_add = nm_state_add,
	.xdo_dev_state_delete = nm_state_delete_dev,
	.xdo_dev_state_free = nm_state_free_dev,
#else
	.xdo_dev_state_add = nm_state_add_real_dev,
	.xdo_dev_state_delete = nm_state_delete,
	.xdo_dev_state_free = nm_state_free,
#endif
	.xdo_dev_offload_ok = nm_offload_ok,
	.xdo_dev_state_advance_esn = nm_state_advance_esn,
	.xdo_dev_state_update_stats = nm_state_update_stats,
	.xdo_dev_policy_add = nm_policy_add,
	.xdo_dev_policy_delete = nm_policy_delete,
	.xdo_dev_policy_free = nm_policy_free,
};
