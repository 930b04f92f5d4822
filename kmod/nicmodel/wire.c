// SPDX-License-Identifier: GPL-2.0
/*
 * nicmodel: the wire between two ports.
 *
 * Transmit runs the port's IPsec TX stage (policy table, then ESP) and
 * queues the resulting frame on the peer; the peer's NAPI poll runs its
 * IPsec RX stage (ESP of offloaded IN SAs), then its XDP program, then
 * hands the frame to the stack. This is the order of a NIC with inline
 * IPsec: the XDP program sees decrypted frames and cannot tell them from
 * cleartext ones.
 */
#include <linux/etherdevice.h>
#include <linux/if_vlan.h>
#include <net/ipv6.h>
#include "nicmodel.h"

/*
 * nm_tx_miss_send_clear: what a frame an OUT policy selects but no SA
 * serves does. The tx_miss_cleartext parameter overrides the profile
 * (-1, the default, follows it).
 */
static bool nm_tx_miss_send_clear(void)
{
	int force = READ_ONCE(nm_tx_miss_cleartext);

	if (force >= 0)
		return force;
	return nm_prof()->tx_sa_miss_cleartext;
}

/*
 * nm_l2_unwritten tells a frame the stack handed with room for an
 * Ethernet header it never wrote: xfrm_dev_direct_output
 * (net/xfrm/xfrm_output.c) sends a packet of a packet-offloaded
 * tunnel-mode SA that way, leaving the header to the hardware (neigh.c).
 * The skb's protocol is then IP or IPv6 while the bytes where the type
 * should be hold what the buffer held before. A frame with a VLAN tag
 * (in the skb or in the frame) is never taken for one: a tag's insertion
 * sets the skb's protocol to the tag's. A frame whose stale bytes happen
 * to carry the right type is parsed as it always was.
 */
static bool nm_l2_unwritten(const struct sk_buff *skb)
{
	__be16 type;

	if (skb->len < ETH_HLEN || skb_vlan_tag_present(skb) ||
	    skb_network_offset(skb) != ETH_HLEN)
		return false;
	if (skb->protocol != htons(ETH_P_IP) &&
	    skb->protocol != htons(ETH_P_IPV6))
		return false;
	type = ((const struct ethhdr *)skb->data)->h_proto;
	return type != skb->protocol && !eth_type_vlan(type);
}

/*
 * The IPsec TX stage: NULL if the frame was dropped (counted). from_stack
 * is set for frames of ndo_start_xmit, the only ones that may come
 * without their L2 header (XDP and tc frames always carry theirs).
 */
static struct sk_buff *nm_tx_ipsec(struct nm_priv *priv, struct sk_buff *skb,
				   bool from_stack)
{
	bool no_l2 = from_stack && nm_l2_unwritten(skb);
	u8 dmac[ETH_ALEN];
	struct nm_flow fl;
	struct nm_pol *pol;
	struct nm_sa *sa;
	struct sk_buff *out;
	int err;

	if (no_l2 ? nm_parse_flow_as(skb, &fl, skb->protocol) :
		    nm_parse_flow(skb, &fl)) {
		nm_inc(priv, NM_TX_NON_IP_PACKETS);
		return skb;
	}
	/* The host's own link-local control traffic (IGMP and other
	 * 224.0.0.0/24, IPv6 link-local: router solicitation, ND, MLD) goes
	 * out in clear on any NIC and is never forwarded data: counted apart,
	 * so that tx_cleartext_packets counts only what could be a leak.
	 */
	if (list_empty(&priv->pol_out) || !nm_pol_lookup(&priv->pol_out, &fl)) {
		bool ll = fl.family == AF_INET ?
			(ntohl(fl.daddr.a4) & 0xffffff00) == 0xe0000000 :
			ipv6_addr_type((struct in6_addr *)&fl.daddr.a6) & IPV6_ADDR_LINKLOCAL ||
			(ipv6_addr_is_multicast((struct in6_addr *)&fl.daddr.a6) &&
			 IPV6_ADDR_MC_SCOPE((struct in6_addr *)&fl.daddr.a6) <= IPV6_ADDR_SCOPE_LINKLOCAL) ||
			ipv6_addr_type((struct in6_addr *)&fl.saddr.a6) & IPV6_ADDR_LINKLOCAL;
		if (ll) {
			nm_inc(priv, NM_TX_LINK_LOCAL_PACKETS);
			return skb;
		}
	}
	if (list_empty(&priv->pol_out)) {
		if (fl.proto != IPPROTO_ESP)
			nm_inc(priv, NM_TX_CLEARTEXT_PACKETS);
		return skb;
	}
	pol = nm_pol_lookup(&priv->pol_out, &fl);
	if (!pol) {
		/* No OUT policy selects it: out it goes as it is, like on
		 * a real NIC. Tests count these to see leaks (ESP the stack
		 * encrypted in software is not cleartext). Under mlx5-6.12
		 * that includes a subnet selector's non-network addresses
		 * (row 1) and fragments (row 3): the policy table's miss goes
		 * to the SA table, which matches no reqid and has no miss
		 * rule either (row 2).
		 */
		if (fl.proto != IPPROTO_ESP)
			nm_inc(priv, NM_TX_CLEARTEXT_PACKETS);
		return skb;
	}
	if (pol->action == XFRM_POLICY_BLOCK) {
		nm_inc(priv, NM_TX_DROP_POLICY_BLOCK);
		goto drop;
	}
	/* An ALLOW policy without a template (tmpl.id.proto 0; a template's
	 * is ESP) is a bypass: out as it is, as the kernel's software XFRM
	 * sends it and mlx5 forwards it past its SA table (reqid 0, no SA,
	 * no miss rule). charon 6 offloads such policies for IKE (UDP
	 * 500/4500) to every packet-offload port; dropping them (the model
	 * did) kept every IKE_SA_INIT off the wire.
	 */
	if (!pol->tmpl.id.proto) {
		if (fl.proto != IPPROTO_ESP)
			nm_inc(priv, NM_TX_CLEARTEXT_PACKETS);
		return skb;
	}
	sa = nm_sa_for_tmpl(priv, pol, &fl);
	if (!sa) {
		nm_inc(priv, NM_TX_DROP_NO_STATE);
		if (nm_tx_miss_send_clear()) {
			nm_inc(priv, NM_TX_CLEARTEXT_PACKETS);
			return skb;
		}
		goto drop;
	}
	if (nm_sa_hard_expired(sa)) {
		nm_inc(priv, NM_TX_DROP_HARD_LIMIT);
		goto drop;
	}
	/* Transport mode writes ESP into the fixed IPv6 header's next
	 * header: an extension header chain is not rewritten (README.md).
	 */
	if (!sa->tunnel && fl.family == AF_INET6 && fl.ip_opts) {
		nm_inc(priv, NM_TX_DROP_ERROR);
		goto drop;
	}
	/* Without an L2 header in tunnel mode, the device writes one to the
	 * SA's outer destination, as mlx5's reformat does (neigh.c); until
	 * the neighbour resolves, mlx5's SA rule drops.
	 */
	if (no_l2 && sa->tunnel) {
		err = nm_neigh_dmac(priv, sa, dmac);
		if (err) {
			nm_inc(priv, NM_TX_DROP_NO_NEIGH);
			goto drop;
		}
	}
	out = nm_esp_encrypt(priv, sa, skb, &fl,
			     no_l2 && sa->tunnel ? dmac : NULL);
	consume_skb(skb);
	return out;
drop:
	kfree_skb(skb);
	return NULL;
}

/* nm_tx sends a frame (skb->data at the Ethernet header) on the wire.
 * Called with BH disabled (xmit, XDP_TX, ndo_xdp_xmit).
 */
static void nm_wire(struct nm_priv *priv, struct sk_buff *skb);

static void nm_tx_from(struct nm_priv *priv, struct sk_buff *skb,
		       bool from_stack)
{
	rcu_read_lock();
	skb = nm_tx_ipsec(priv, skb, from_stack);
	rcu_read_unlock();
	if (!skb) {
		nm_inc(priv, NM_TX_DROPPED);
		return;
	}
	nm_wire(priv, skb);
}

void nm_tx(struct nm_priv *priv, struct sk_buff *skb)
{
	nm_tx_from(priv, skb, false);
}

/* nm_wire puts a finished frame on the wire to the peer. */
static void nm_wire(struct nm_priv *priv, struct sk_buff *skb)
{
	struct net_device *peer;
	struct nm_priv *pp;
	unsigned int len;

	len = skb->len;
	if (len > priv->dev->mtu + ETH_HLEN + VLAN_HLEN) {
		/* The MAC would not send a frame above the port's MTU. */
		nm_inc(priv, NM_TX_DROP_OVERSIZE);
		goto drop;
	}
	rcu_read_lock();
	peer = rcu_dereference(priv->peer);
	if (!peer || !netif_running(peer)) {
		rcu_read_unlock();
		goto drop;
	}
	pp = netdev_priv(peer);
	skb_orphan(skb);
	skb_scrub_packet(skb, !net_eq(dev_net(priv->dev), dev_net(peer)));
	skb->dev = peer;
	skb->ip_summed = CHECKSUM_NONE;
	if (skb_queue_len(&pp->rxq) >= NM_RXQ_LIMIT) {
		rcu_read_unlock();
		nm_inc(pp, NM_RX_DROP_QUEUE_FULL);
		nm_inc(pp, NM_RX_DROPPED);
		goto drop;
	}
	skb_queue_tail(&pp->rxq, skb);
	napi_schedule(&pp->napi);
	rcu_read_unlock();
	nm_inc(priv, NM_TX_PACKETS);
	nm_add(priv, NM_TX_BYTES, len);
	return;
drop:
	nm_inc(priv, NM_TX_DROPPED);
	kfree_skb(skb);
}

netdev_tx_t nm_start_xmit(struct sk_buff *skb, struct net_device *dev)
{
	struct nm_priv *priv = netdev_priv(dev);

	/* The model's ESP and parsers read linear data. */
	if (skb_linearize(skb)) {
		nm_inc(priv, NM_TX_DROP_ERROR);
		nm_inc(priv, NM_TX_DROPPED);
		kfree_skb(skb);
		return NETDEV_TX_OK;
	}
	/* ESP the stack built for a crypto-offloaded SA: encrypted here,
	 * then straight to the wire (it is not the policy table's).
	 */
	switch (nm_crypto_tx(priv, skb)) {
	case 0:
		nm_tx_from(priv, skb, true);
		break;
	case 1:
		nm_wire(priv, skb);
		break;
	default:
		nm_inc(priv, NM_TX_DROPPED);
		kfree_skb(skb);
	}
	return NETDEV_TX_OK;
}

/* One received frame: IPsec RX, XDP, then the stack. */
static void nm_rx_one(struct nm_priv *priv, struct sk_buff *skb,
		      bool *redirected)
{
	struct xfrm_state *x = NULL;
	struct bpf_prog *prog;
	unsigned int len;
	u8 status = 0;

	if (skb->len > priv->dev->mtu + ETH_HLEN + VLAN_HLEN) {
		nm_inc(priv, NM_RX_DROP_OVERSIZE);
		goto drop;
	}
	/* The wire as it is, before this port's RX stage touches it. */
	nm_tap_rx(priv, skb);
	/* Hardware flower rules first. A port holds them only without IPsec
	 * packet offload (tc.c); beside crypto offload, which mlx5 allows,
	 * running them before decryption is the model's choice, not an order
	 * read from mlx5 (sluice's tier puts no rule on an ESP port).
	 */
	skb = nm_tc_rx(priv, skb);
	if (!skb)
		return;
	skb = nm_esp_rx(priv, skb, &x, &status);
	if (!skb)
		goto dropped;

	prog = rcu_dereference(priv->xdp_prog);
	if (prog) {
		skb = nm_xdp_rx(priv, prog, skb, redirected);
		if (!skb) {
			/* XDP took it (TX, REDIRECT) or dropped it; the
			 * decryption's secpath does not follow the frame.
			 */
			if (x)
				xfrm_state_put(x);
			return;
		}
	}
	len = skb->len;
	skb->protocol = eth_type_trans(skb, priv->dev);
	if (x)
		nm_mark_offloaded(skb, x, status);
	nm_inc(priv, NM_RX_PACKETS);
	nm_add(priv, NM_RX_BYTES, len);
	netif_receive_skb(skb);
	return;
drop:
	kfree_skb(skb);
dropped:
	nm_inc(priv, NM_RX_DROPPED);
}

int nm_poll(struct napi_struct *napi, int budget)
{
	struct nm_priv *priv = container_of(napi, struct nm_priv, napi);
	bool redirected = false;
	struct sk_buff *skb;
	int done = 0;

	rcu_read_lock();
	while (done < budget && (skb = skb_dequeue(&priv->rxq))) {
		nm_rx_one(priv, skb, &redirected);
		done++;
	}
	rcu_read_unlock();
	if (redirected)
		xdp_do_flush();
	if (done < budget && napi_complete_done(napi, done) &&
	    !skb_queue_empty(&priv->rxq))
		napi_schedule(napi);
	return done;
}
