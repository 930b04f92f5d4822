// SPDX-License-Identifier: GPL-2.0
/*
 * nicmodel: hardware flower rules, parsed from the kernel's flow_offload
 * API (include/net/flow_offload.h) and executed on the port's receive
 * path, as a NIC's flow-steering tables execute skip_sw rules.
 *
 * What is accepted is what sluice's flower tier emits (internal/kernel's
 * tc flower encoder): chain 0; match on the filter's protocol, Ethernet
 * addresses, one VLAN tag (id, TPID, inner ethertype), IPv4/IPv6 addresses,
 * IP protocol, TCP/UDP/SCTP ports, TTL/hop limit, and "not a fragment";
 * actions gact pass/drop, police (mtu, packet rate), vlan pop/push, pedit
 * (set or add on the Ethernet, IPv4 and IPv6 headers), csum (IPv4 header)
 * and mirred egress redirect to a port of the model. Anything else is
 * refused with an extack message and EOPNOTSUPP, as mlx5 refuses what its
 * steering cannot do; the software rule then never runs either (skip_sw).
 *
 * Rules run in the order tc keeps them (preference, then the order they
 * were added); the first whose match holds runs its actions, and its
 * counters (FLOW_CLS_STATS: `tc -s filter show`, in_hw) count every frame
 * it matched. A redirect transmits the frame on the target port through
 * that port's IPsec TX stage: cleartext meets the target's offloaded OUT
 * policies, as hairpinned traffic meets mlx5's IPsec TX tables.
 */
#include <linux/etherdevice.h>
#include <linux/if_vlan.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <net/ip.h>
#include <net/flow_offload.h>
#include <net/pkt_cls.h>
#include <linux/tc_act/tc_csum.h>
#include "nicmodel.h"

#define NM_TC_MAX_ACT 12

enum nm_tc_act_id {
	NM_ACT_ACCEPT,		/* to the host: XDP, then the stack */
	NM_ACT_DROP,
	NM_ACT_REDIRECT,
	NM_ACT_VLAN_POP,
	NM_ACT_VLAN_PUSH,
	NM_ACT_MANGLE,		/* set under a mask */
	NM_ACT_ADD,		/* add under a mask */
	NM_ACT_CSUM_IP,
	NM_ACT_POLICE,
};

/* A police verdict: what to do next. */
enum nm_tc_verdict { NM_V_PIPE, NM_V_ACCEPT, NM_V_DROP };

struct nm_tc_act {
	enum nm_tc_act_id id;
	union {
		struct {
			struct net *net;
			int ifindex;
		} redirect;
		struct {
			u16 vid;
			__be16 proto;
			u8 prio;
		} vlan;
		struct {
			enum flow_action_mangle_base htype;
			u32 offset, mask, val;
		} mangle;
		struct {
			u32 mtu;
			u64 rate_pkt_ps, burst_pkt;
			enum nm_tc_verdict conform, exceed;
		} police;
	};
};

struct nm_tc_rule {
	struct list_head node;		/* priv->tc_rules, by prio */
	struct rcu_head rcu;
	unsigned long cookie;
	u32 prio;
	__be16 proto;			/* the filter's protocol */
	u64 keys;			/* dissector keys matched */

	struct flow_dissector_key_basic basic, basic_m;
	struct flow_dissector_key_eth_addrs eth, eth_m;
	struct flow_dissector_key_vlan vlan, vlan_m;
	struct flow_dissector_key_ipv4_addrs v4, v4_m;
	struct flow_dissector_key_ipv6_addrs v6, v6_m;
	struct flow_dissector_key_ports ports, ports_m;
	struct flow_dissector_key_ip ip, ip_m;
	u32 flags, flags_m;		/* control: fragment bits */

	unsigned int n_act;
	struct nm_tc_act act[NM_TC_MAX_ACT];

	/* The police bucket (one police action per rule is enough). */
	spinlock_t lock;
	u64 tokens_ns;			/* packets' worth of time, in ns */
	u64 last_ns;

	atomic64_t pkts, bytes;		/* since the rule was added */
	u64 rep_pkts, rep_bytes;	/* reported to tc so far */
	unsigned long lastused;		/* jiffies */
};

#define NM_TC_KEYS (BIT_ULL(FLOW_DISSECTOR_KEY_CONTROL) |		\
		    BIT_ULL(FLOW_DISSECTOR_KEY_BASIC) |			\
		    BIT_ULL(FLOW_DISSECTOR_KEY_ETH_ADDRS) |		\
		    BIT_ULL(FLOW_DISSECTOR_KEY_VLAN) |			\
		    BIT_ULL(FLOW_DISSECTOR_KEY_IPV4_ADDRS) |		\
		    BIT_ULL(FLOW_DISSECTOR_KEY_IPV6_ADDRS) |		\
		    BIT_ULL(FLOW_DISSECTOR_KEY_PORTS) |			\
		    BIT_ULL(FLOW_DISSECTOR_KEY_IP))

static int nm_tc_verdict_of(enum flow_action_id id, enum nm_tc_verdict *v,
			    struct netlink_ext_ack *extack)
{
	switch (id) {
	case FLOW_ACTION_PIPE:
		*v = NM_V_PIPE;
		return 0;
	case FLOW_ACTION_ACCEPT:
		*v = NM_V_ACCEPT;
		return 0;
	case FLOW_ACTION_DROP:
		*v = NM_V_DROP;
		return 0;
	default:
		NL_SET_ERR_MSG_MOD(extack, "police conform/exceed actions other than pipe, pass and drop are not supported");
		return -EOPNOTSUPP;
	}
}

static int nm_tc_parse_match(struct nm_tc_rule *r, struct flow_rule *rule,
			     struct netlink_ext_ack *extack)
{
	struct flow_dissector *d = rule->match.dissector;

	if (d->used_keys & ~NM_TC_KEYS) {
		NL_SET_ERR_MSG_MOD(extack, "Unsupported match key: the model matches MACs, one VLAN, IP addresses, protocol, ports, TTL and fragment flags");
		return -EOPNOTSUPP;
	}
	r->keys = d->used_keys;
	if (flow_rule_match_key(rule, FLOW_DISSECTOR_KEY_CONTROL)) {
		struct flow_match_control m;

		flow_rule_match_control(rule, &m);
		if (m.mask->flags & ~(FLOW_DIS_IS_FRAGMENT | FLOW_DIS_FIRST_FRAG)) {
			NL_SET_ERR_MSG_MOD(extack, "Unsupported match on control flags");
			return -EOPNOTSUPP;
		}
		r->flags = m.key->flags;
		r->flags_m = m.mask->flags;
	}
	if (flow_rule_match_key(rule, FLOW_DISSECTOR_KEY_BASIC)) {
		struct flow_match_basic m;

		flow_rule_match_basic(rule, &m);
		r->basic = *m.key;
		r->basic_m = *m.mask;
	}
	if (flow_rule_match_key(rule, FLOW_DISSECTOR_KEY_ETH_ADDRS)) {
		struct flow_match_eth_addrs m;

		flow_rule_match_eth_addrs(rule, &m);
		r->eth = *m.key;
		r->eth_m = *m.mask;
	}
	if (flow_rule_match_key(rule, FLOW_DISSECTOR_KEY_VLAN)) {
		struct flow_match_vlan m;

		flow_rule_match_vlan(rule, &m);
		if (m.mask->vlan_priority || m.mask->vlan_dei) {
			NL_SET_ERR_MSG_MOD(extack, "Unsupported match on VLAN priority or DEI");
			return -EOPNOTSUPP;
		}
		r->vlan = *m.key;
		r->vlan_m = *m.mask;
	}
	if (flow_rule_match_key(rule, FLOW_DISSECTOR_KEY_IPV4_ADDRS)) {
		struct flow_match_ipv4_addrs m;

		flow_rule_match_ipv4_addrs(rule, &m);
		r->v4 = *m.key;
		r->v4_m = *m.mask;
	}
	if (flow_rule_match_key(rule, FLOW_DISSECTOR_KEY_IPV6_ADDRS)) {
		struct flow_match_ipv6_addrs m;

		flow_rule_match_ipv6_addrs(rule, &m);
		r->v6 = *m.key;
		r->v6_m = *m.mask;
	}
	if (flow_rule_match_key(rule, FLOW_DISSECTOR_KEY_PORTS)) {
		struct flow_match_ports m;

		flow_rule_match_ports(rule, &m);
		r->ports = *m.key;
		r->ports_m = *m.mask;
	}
	if (flow_rule_match_key(rule, FLOW_DISSECTOR_KEY_IP)) {
		struct flow_match_ip m;

		flow_rule_match_ip(rule, &m);
		if (m.mask->tos) {
			NL_SET_ERR_MSG_MOD(extack, "Unsupported match on TOS");
			return -EOPNOTSUPP;
		}
		r->ip = *m.key;
		r->ip_m = *m.mask;
	}
	return 0;
}

static int nm_tc_parse_actions(struct nm_tc_rule *r, struct flow_rule *rule,
			       struct netlink_ext_ack *extack)
{
	const struct flow_action_entry *e;
	int i, err;

	if (!flow_action_has_entries(&rule->action)) {
		NL_SET_ERR_MSG_MOD(extack, "A rule needs at least one action");
		return -EOPNOTSUPP;
	}
	if (rule->action.num_entries > NM_TC_MAX_ACT) {
		NL_SET_ERR_MSG_MOD(extack, "Too many actions for the model's rule");
		return -EOPNOTSUPP;
	}
	flow_action_for_each(i, e, &rule->action) {
		struct nm_tc_act *a = &r->act[r->n_act];

		switch (e->id) {
		case FLOW_ACTION_ACCEPT:
			a->id = NM_ACT_ACCEPT;
			break;
		case FLOW_ACTION_DROP:
			a->id = NM_ACT_DROP;
			break;
		case FLOW_ACTION_REDIRECT:
			if (!e->dev || !nm_is_port(e->dev)) {
				NL_SET_ERR_MSG_MOD(extack, "Redirect only to a port of the model (the NIC forwards between its own ports)");
				return -EOPNOTSUPP;
			}
			a->id = NM_ACT_REDIRECT;
			a->redirect.net = dev_net(e->dev);
			a->redirect.ifindex = e->dev->ifindex;
			break;
		case FLOW_ACTION_VLAN_POP:
			a->id = NM_ACT_VLAN_POP;
			break;
		case FLOW_ACTION_VLAN_PUSH:
			if (e->vlan.proto != htons(ETH_P_8021Q)) {
				NL_SET_ERR_MSG_MOD(extack, "Only 802.1Q VLAN push is supported");
				return -EOPNOTSUPP;
			}
			a->id = NM_ACT_VLAN_PUSH;
			a->vlan.vid = e->vlan.vid;
			a->vlan.proto = e->vlan.proto;
			a->vlan.prio = e->vlan.prio;
			break;
		case FLOW_ACTION_MANGLE:
		case FLOW_ACTION_ADD:
			if (e->mangle.htype != FLOW_ACT_MANGLE_HDR_TYPE_ETH &&
			    e->mangle.htype != FLOW_ACT_MANGLE_HDR_TYPE_IP4 &&
			    e->mangle.htype != FLOW_ACT_MANGLE_HDR_TYPE_IP6) {
				NL_SET_ERR_MSG_MOD(extack, "pedit only of the Ethernet, IPv4 and IPv6 headers");
				return -EOPNOTSUPP;
			}
			if (e->mangle.offset & 3 || e->mangle.offset > 36) {
				NL_SET_ERR_MSG_MOD(extack, "pedit offset outside the header");
				return -EOPNOTSUPP;
			}
			a->id = e->id == FLOW_ACTION_ADD ? NM_ACT_ADD : NM_ACT_MANGLE;
			a->mangle.htype = e->mangle.htype;
			a->mangle.offset = e->mangle.offset;
			a->mangle.mask = e->mangle.mask;
			a->mangle.val = e->mangle.val;
			break;
		case FLOW_ACTION_CSUM:
			if (e->csum_flags != TCA_CSUM_UPDATE_FLAG_IPV4HDR) {
				NL_SET_ERR_MSG_MOD(extack, "csum only of the IPv4 header");
				return -EOPNOTSUPP;
			}
			a->id = NM_ACT_CSUM_IP;
			break;
		case FLOW_ACTION_POLICE:
			if (e->police.rate_bytes_ps || e->police.peakrate_bytes_ps ||
			    e->police.avrate || e->police.overhead) {
				NL_SET_ERR_MSG_MOD(extack, "police: only mtu and a packet rate are modelled");
				return -EOPNOTSUPP;
			}
			if (e->police.rate_pkt_ps && !e->police.burst_pkt) {
				NL_SET_ERR_MSG_MOD(extack, "police: a packet rate needs a burst");
				return -EOPNOTSUPP;
			}
			a->id = NM_ACT_POLICE;
			a->police.mtu = e->police.mtu;
			a->police.rate_pkt_ps = e->police.rate_pkt_ps;
			a->police.burst_pkt = e->police.burst_pkt;
			err = nm_tc_verdict_of(e->police.notexceed.act_id, &a->police.conform, extack);
			if (!err)
				err = nm_tc_verdict_of(e->police.exceed.act_id, &a->police.exceed, extack);
			if (err)
				return err;
			break;
		default:
			NL_SET_ERR_MSG_MOD(extack, "Unsupported action: the model does pass, drop, police, vlan, pedit, csum and redirect");
			return -EOPNOTSUPP;
		}
		r->n_act++;
	}
	return 0;
}

/* nm_tc_rule_new parses a REPLACE request into a rule (or refuses it). */
static struct nm_tc_rule *nm_tc_rule_new(struct flow_cls_offload *f)
{
	struct netlink_ext_ack *extack = f->common.extack;
	struct flow_rule *rule = flow_cls_offload_flow_rule(f);
	struct nm_tc_rule *r;
	int err;

	if (f->common.chain_index) {
		NL_SET_ERR_MSG_MOD(extack, "Only chain 0: the post-decrypt chain needs the mlx5 changes seed 004 describes, which the model does not model");
		return ERR_PTR(-EOPNOTSUPP);
	}
	r = kzalloc(sizeof(*r), GFP_KERNEL);
	if (!r)
		return ERR_PTR(-ENOMEM);
	r->cookie = f->cookie;
	r->prio = f->common.prio;
	r->proto = f->common.protocol;
	spin_lock_init(&r->lock);
	err = nm_tc_parse_match(r, rule, extack);
	if (!err)
		err = nm_tc_parse_actions(r, rule, extack);
	if (err) {
		kfree(r);
		return ERR_PTR(err);
	}
	r->last_ns = ktime_get_ns();
	/* A full bucket, as act_police starts. */
	r->tokens_ns = 0;
	for (err = 0; err < r->n_act; err++)
		if (r->act[err].id == NM_ACT_POLICE && r->act[err].police.rate_pkt_ps)
			r->tokens_ns = div64_u64(r->act[err].police.burst_pkt * NSEC_PER_SEC,
						 r->act[err].police.rate_pkt_ps);
	return r;
}

static void nm_tc_rule_free(struct nm_tc_rule *r)
{
	kfree_rcu(r, rcu);
}

/* nm_tc_rule_stats reports what the rule counted since the last report. */
static void nm_tc_rule_stats(struct nm_tc_rule *r, struct flow_cls_offload *f)
{
	u64 pkts = atomic64_read(&r->pkts), bytes = atomic64_read(&r->bytes);

	flow_stats_update(&f->stats, bytes - r->rep_bytes, pkts - r->rep_pkts, 0,
			  READ_ONCE(r->lastused), FLOW_ACTION_HW_STATS_DELAYED);
	r->rep_pkts = pkts;
	r->rep_bytes = bytes;
}

/* nm_tc_find returns the port's rule with the cookie (tbl_lock held). */
static struct nm_tc_rule *nm_tc_find(struct nm_priv *priv, unsigned long cookie)
{
	struct nm_tc_rule *r;

	list_for_each_entry(r, &priv->tc_rules, node)
		if (r->cookie == cookie)
			return r;
	return NULL;
}

/* nm_flower handles one TC_SETUP_CLSFLOWER request for the port. */
int nm_flower(struct nm_priv *priv, struct flow_cls_offload *f)
{
	struct nm_tc_rule *r, *old, *pos;
	int err = 0;

	switch (f->command) {
	case FLOW_CLS_REPLACE:
		/* mlx5's order: a port with IPsec offload takes no tc rule
		 * (checked first, so the refusal is EBUSY whatever the rule).
		 */
		spin_lock_bh(&priv->tbl_lock);
		if (priv->n_sa || priv->n_pol)
			err = -EBUSY;
		spin_unlock_bh(&priv->tbl_lock);
		if (err) {
			NL_SET_ERR_MSG_MOD(f->common.extack,
					   "Cannot offload tc rules while IPsec offload is active on the device");
			return err;
		}
		r = nm_tc_rule_new(f);
		if (IS_ERR(r))
			return PTR_ERR(r);
		spin_lock_bh(&priv->tbl_lock);
		if (priv->n_sa || priv->n_pol) {
			err = -EBUSY;
			NL_SET_ERR_MSG_MOD(f->common.extack,
					   "Cannot offload tc rules while IPsec offload is active on the device");
		} else {
			old = nm_tc_find(priv, f->cookie);
			/* tc's order: by preference, then as added. */
			list_for_each_entry(pos, &priv->tc_rules, node)
				if (pos->prio > r->prio)
					break;
			list_add_tail_rcu(&r->node, &pos->node);
			if (old) {
				list_del_rcu(&old->node);
				nm_tc_rule_free(old);
			} else {
				WRITE_ONCE(priv->n_tc, priv->n_tc + 1);
			}
		}
		spin_unlock_bh(&priv->tbl_lock);
		if (err)
			nm_tc_rule_free(r);
		return err;
	case FLOW_CLS_DESTROY:
		spin_lock_bh(&priv->tbl_lock);
		r = nm_tc_find(priv, f->cookie);
		if (r) {
			list_del_rcu(&r->node);
			WRITE_ONCE(priv->n_tc, priv->n_tc - 1);
			nm_tc_rule_free(r);
		}
		spin_unlock_bh(&priv->tbl_lock);
		return 0;
	case FLOW_CLS_STATS:
		spin_lock_bh(&priv->tbl_lock);
		r = nm_tc_find(priv, f->cookie);
		if (r)
			nm_tc_rule_stats(r, f);
		spin_unlock_bh(&priv->tbl_lock);
		return 0;
	default:
		return -EOPNOTSUPP;
	}
}

/* What a frame offers to the match. */
struct nm_tc_frame {
	const struct ethhdr *eth;
	bool tagged;
	__be16 tpid, inner;		/* outer TPID if tagged; the ethertype after it */
	u16 vid;
	unsigned int l3off;		/* from skb->data */
	u8 proto, ttl;
	u32 frag;			/* FLOW_DIS_* */
	__be32 s4, d4;
	struct in6_addr s6, d6;
	__be16 sport, dport;
	bool ports;
};

static int nm_tc_parse_frame(const struct sk_buff *skb, struct nm_tc_frame *fr)
{
	const u8 *d = skb->data;
	unsigned int off = ETH_HLEN, l4 = 0;

	memset(fr, 0, sizeof(*fr));
	if (skb->len < ETH_HLEN)
		return -EINVAL;
	fr->eth = (const struct ethhdr *)d;
	fr->inner = fr->eth->h_proto;
	if (eth_type_vlan(fr->inner)) {
		const struct vlan_hdr *vh = (const void *)(d + ETH_HLEN);

		if (skb->len < ETH_HLEN + VLAN_HLEN)
			return -EINVAL;
		fr->tagged = true;
		fr->tpid = fr->inner;
		fr->vid = ntohs(vh->h_vlan_TCI) & VLAN_VID_MASK;
		fr->inner = vh->h_vlan_encapsulated_proto;
		off += VLAN_HLEN;
	}
	fr->l3off = off;
	if (fr->inner == htons(ETH_P_IP)) {
		const struct iphdr *ip = (const void *)(d + off);

		if (skb->len < off + sizeof(*ip) || ip->ihl < 5 ||
		    skb->len < off + ip->ihl * 4)
			return 0;
		fr->proto = ip->protocol;
		fr->ttl = ip->ttl;
		fr->s4 = ip->saddr;
		fr->d4 = ip->daddr;
		if (ip_is_fragment(ip)) {
			fr->frag = FLOW_DIS_IS_FRAGMENT;
			if (!(ip->frag_off & htons(IP_OFFSET)))
				fr->frag |= FLOW_DIS_FIRST_FRAG;
		}
		if (!(ip->frag_off & htons(IP_OFFSET)))
			l4 = off + ip->ihl * 4;
	} else if (fr->inner == htons(ETH_P_IPV6)) {
		const struct ipv6hdr *ip6 = (const void *)(d + off);

		if (skb->len < off + sizeof(*ip6))
			return 0;
		/* Extension headers are not walked (the model's README). */
		fr->proto = ip6->nexthdr;
		fr->ttl = ip6->hop_limit;
		fr->s6 = ip6->saddr;
		fr->d6 = ip6->daddr;
		l4 = off + sizeof(*ip6);
	}
	if (l4 && skb->len >= l4 + 4 &&
	    (fr->proto == IPPROTO_TCP || fr->proto == IPPROTO_UDP ||
	     fr->proto == IPPROTO_SCTP)) {
		fr->sport = *(const __be16 *)(d + l4);
		fr->dport = *(const __be16 *)(d + l4 + 2);
		fr->ports = true;
	}
	return 0;
}

#define NM_MASKED_NE(k, m, v) ((((k) ^ (v)) & (m)) != 0)

static bool nm_tc_match(const struct nm_tc_rule *r, const struct nm_tc_frame *fr)
{
	__be16 outer = fr->tagged ? fr->tpid : fr->inner;
	int i;

	/* The filter's protocol is the frame's outer type, as tc compares
	 * it with skb_protocol(skb, false) at ingress.
	 */
	if (r->proto != htons(ETH_P_ALL) && r->proto != outer)
		return false;
	if (r->keys & BIT_ULL(FLOW_DISSECTOR_KEY_VLAN)) {
		if (!fr->tagged ||
		    NM_MASKED_NE(r->vlan.vlan_tpid, r->vlan_m.vlan_tpid, fr->tpid) ||
		    NM_MASKED_NE(r->vlan.vlan_id, r->vlan_m.vlan_id, fr->vid))
			return false;
	}
	if (NM_MASKED_NE(r->basic.n_proto, r->basic_m.n_proto, fr->inner) ||
	    NM_MASKED_NE(r->basic.ip_proto, r->basic_m.ip_proto, fr->proto))
		return false;
	for (i = 0; i < ETH_ALEN; i++)
		if (NM_MASKED_NE(r->eth.dst[i], r->eth_m.dst[i], fr->eth->h_dest[i]) ||
		    NM_MASKED_NE(r->eth.src[i], r->eth_m.src[i], fr->eth->h_source[i]))
			return false;
	if (fr->inner == htons(ETH_P_IP)) {
		if (NM_MASKED_NE(r->v4.src, r->v4_m.src, fr->s4) ||
		    NM_MASKED_NE(r->v4.dst, r->v4_m.dst, fr->d4))
			return false;
	} else if (fr->inner == htons(ETH_P_IPV6)) {
		for (i = 0; i < 4; i++)
			if (NM_MASKED_NE(r->v6.src.s6_addr32[i], r->v6_m.src.s6_addr32[i], fr->s6.s6_addr32[i]) ||
			    NM_MASKED_NE(r->v6.dst.s6_addr32[i], r->v6_m.dst.s6_addr32[i], fr->d6.s6_addr32[i]))
				return false;
	} else if (r->keys & (BIT_ULL(FLOW_DISSECTOR_KEY_IPV4_ADDRS) |
			      BIT_ULL(FLOW_DISSECTOR_KEY_IPV6_ADDRS) |
			      BIT_ULL(FLOW_DISSECTOR_KEY_IP) |
			      BIT_ULL(FLOW_DISSECTOR_KEY_PORTS))) {
		return false;
	}
	if (r->ports_m.src || r->ports_m.dst) {
		if (!fr->ports ||
		    NM_MASKED_NE(r->ports.src, r->ports_m.src, fr->sport) ||
		    NM_MASKED_NE(r->ports.dst, r->ports_m.dst, fr->dport))
			return false;
	}
	if (NM_MASKED_NE(r->ip.ttl, r->ip_m.ttl, fr->ttl))
		return false;
	if (NM_MASKED_NE(r->flags, r->flags_m, fr->frag))
		return false;
	return true;
}

/* nm_tc_police: the conform or exceed verdict for one frame. */
static enum nm_tc_verdict nm_tc_police(struct nm_tc_rule *r,
				       const struct nm_tc_act *a,
				       const struct sk_buff *skb,
				       const struct nm_tc_frame *fr)
{
	u64 now, cost, cap;
	bool conform = true;

	/* act_police at tc ingress compares the frame with one Ethernet
	 * header (the VLAN tag is in the skb's metadata by then).
	 */
	if (skb->len - (fr->tagged ? VLAN_HLEN : 0) > a->police.mtu)
		return a->police.exceed;
	if (!a->police.rate_pkt_ps)
		return a->police.conform;
	cost = div64_u64(NSEC_PER_SEC, a->police.rate_pkt_ps);
	cap = cost * a->police.burst_pkt;
	spin_lock(&r->lock);
	now = ktime_get_ns();
	r->tokens_ns = min(cap, r->tokens_ns + (now - r->last_ns));
	r->last_ns = now;
	if (r->tokens_ns >= cost)
		r->tokens_ns -= cost;
	else
		conform = false;
	spin_unlock(&r->lock);
	return conform ? a->police.conform : a->police.exceed;
}

static int nm_tc_vlan_pop(struct sk_buff *skb)
{
	if (skb->len < ETH_HLEN + VLAN_HLEN || skb_ensure_writable(skb, ETH_HLEN + VLAN_HLEN))
		return -EINVAL;
	memmove(skb->data + VLAN_HLEN, skb->data, 2 * ETH_ALEN);
	skb_pull(skb, VLAN_HLEN);
	return 0;
}

static int nm_tc_vlan_push(struct sk_buff *skb, const struct nm_tc_act *a)
{
	struct vlan_ethhdr *veth;

	if (skb_cow_head(skb, VLAN_HLEN))
		return -ENOMEM;
	skb_push(skb, VLAN_HLEN);
	memmove(skb->data, skb->data + VLAN_HLEN, 2 * ETH_ALEN);
	veth = (struct vlan_ethhdr *)skb->data;
	veth->h_vlan_proto = a->vlan.proto;
	veth->h_vlan_TCI = htons(a->vlan.vid | (a->vlan.prio << VLAN_PRIO_SHIFT));
	return 0;
}

/* pedit's semantics (act_pedit): keep the bits under mask, then set or
 * add val in the rest.
 */
static int nm_tc_mangle(struct sk_buff *skb, const struct nm_tc_act *a)
{
	unsigned int base = 0, l3 = ETH_HLEN;
	__be16 type = ((const struct ethhdr *)skb->data)->h_proto;
	u32 *p, v;

	if (eth_type_vlan(type)) {
		if (skb->len < ETH_HLEN + VLAN_HLEN)
			return -EINVAL;
		type = ((const struct vlan_hdr *)(skb->data + ETH_HLEN))->h_vlan_encapsulated_proto;
		l3 += VLAN_HLEN;
	}
	switch (a->mangle.htype) {
	case FLOW_ACT_MANGLE_HDR_TYPE_ETH:
		base = 0;
		break;
	case FLOW_ACT_MANGLE_HDR_TYPE_IP4:
		if (type != htons(ETH_P_IP))
			return 0;	/* pedit leaves a frame without the header alone */
		base = l3;
		break;
	case FLOW_ACT_MANGLE_HDR_TYPE_IP6:
		if (type != htons(ETH_P_IPV6))
			return 0;
		base = l3;
		break;
	default:
		return -EINVAL;
	}
	if (skb->len < base + a->mangle.offset + 4 ||
	    skb_ensure_writable(skb, base + a->mangle.offset + 4))
		return -EINVAL;
	p = (u32 *)(skb->data + base + a->mangle.offset);
	v = get_unaligned(p);
	if (a->id == NM_ACT_ADD)
		v = (v & a->mangle.mask) ^ ((v + a->mangle.val) & ~a->mangle.mask);
	else
		v = (v & a->mangle.mask) ^ a->mangle.val;
	put_unaligned(v, p);
	return 0;
}

static int nm_tc_csum_ip(struct sk_buff *skb)
{
	unsigned int l3 = ETH_HLEN;
	__be16 type = ((const struct ethhdr *)skb->data)->h_proto;
	struct iphdr *ip;

	if (eth_type_vlan(type)) {
		type = ((const struct vlan_hdr *)(skb->data + ETH_HLEN))->h_vlan_encapsulated_proto;
		l3 += VLAN_HLEN;
	}
	if (type != htons(ETH_P_IP))
		return 0;
	if (skb->len < l3 + sizeof(*ip) || skb_ensure_writable(skb, l3 + sizeof(*ip)))
		return -EINVAL;
	ip = (struct iphdr *)(skb->data + l3);
	if (ip->ihl < 5 || skb->len < l3 + ip->ihl * 4)
		return -EINVAL;
	ip_send_check(ip);
	return 0;
}

/*
 * nm_tc_rx runs the port's hardware rules on a received frame (skb->data
 * at the Ethernet header). It returns the frame to hand on (no rule
 * matched, or the rule passed it to the host) or NULL when a rule took it
 * (redirected or dropped, counted).
 */
struct sk_buff *nm_tc_rx(struct nm_priv *priv, struct sk_buff *skb)
{
	struct nm_tc_frame fr;
	struct nm_tc_rule *r;
	struct net_device *to;
	unsigned int i;

	if (list_empty(&priv->tc_rules) || nm_tc_parse_frame(skb, &fr))
		return skb;
	list_for_each_entry_rcu(r, &priv->tc_rules, node) {
		if (nm_tc_match(r, &fr))
			goto matched;
	}
	return skb;
matched:
	atomic64_inc(&r->pkts);
	atomic64_add(skb->len, &r->bytes);
	WRITE_ONCE(r->lastused, jiffies);
	nm_inc(priv, NM_RX_TC_HITS);
	for (i = 0; i < r->n_act; i++) {
		const struct nm_tc_act *a = &r->act[i];
		int err = 0;

		switch (a->id) {
		case NM_ACT_ACCEPT:
			return skb;
		case NM_ACT_DROP:
			nm_inc(priv, NM_RX_TC_DROP);
			kfree_skb(skb);
			return NULL;
		case NM_ACT_POLICE:
			switch (nm_tc_police(r, a, skb, &fr)) {
			case NM_V_PIPE:
				break;
			case NM_V_ACCEPT:
				return skb;
			case NM_V_DROP:
				nm_inc(priv, NM_RX_TC_DROP);
				kfree_skb(skb);
				return NULL;
			}
			break;
		case NM_ACT_VLAN_POP:
			err = nm_tc_vlan_pop(skb);
			break;
		case NM_ACT_VLAN_PUSH:
			err = nm_tc_vlan_push(skb, a);
			break;
		case NM_ACT_MANGLE:
		case NM_ACT_ADD:
			err = nm_tc_mangle(skb, a);
			break;
		case NM_ACT_CSUM_IP:
			err = nm_tc_csum_ip(skb);
			break;
		case NM_ACT_REDIRECT:
			to = dev_get_by_index_rcu(a->redirect.net, a->redirect.ifindex);
			if (!to || !nm_is_port(to) || !netif_running(to)) {
				/* mirred's target is gone or down: dropped */
				nm_inc(priv, NM_RX_TC_DROP);
				kfree_skb(skb);
				return NULL;
			}
			nm_inc(priv, NM_RX_TC_REDIRECT);
			nm_tx(netdev_priv(to), skb);
			return NULL;
		}
		if (err) {
			nm_inc(priv, NM_RX_TC_DROP);
			kfree_skb(skb);
			return NULL;
		}
	}
	/* The actions ran out without a verdict: the host gets it. */
	return skb;
}
