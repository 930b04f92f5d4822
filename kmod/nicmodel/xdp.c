// SPDX-License-Identifier: GPL-2.0
/*
 * nicmodel: native XDP.
 *
 * Each received frame is copied into a page of its own with XDP's
 * headroom, the way a driver's RX ring presents it; XDP_PASS and XDP_TX
 * build an skb around that page. ndo_xdp_xmit (devmap redirects into the
 * port) sends frames through the same TX stage as the stack's packets,
 * so a redirected frame meets the port's IPsec policy table: that is the
 * path sluice's fast path relies on.
 */
#include <linux/bpf.h>
#include <linux/filter.h>
#include <linux/etherdevice.h>
#include <linux/if_vlan.h>
#include <trace/events/xdp.h>
#include "nicmodel.h"

#define NM_XDP_MAX_FRAME (PAGE_SIZE - XDP_PACKET_HEADROOM - \
			  SKB_DATA_ALIGN(sizeof(struct skb_shared_info)))

int nm_bpf(struct net_device *dev, struct netdev_bpf *bpf)
{
	struct nm_priv *priv = netdev_priv(dev);
	struct bpf_prog *old;

	switch (bpf->command) {
	case XDP_SETUP_PROG:
		if (bpf->prog && dev->mtu + ETH_HLEN + VLAN_HLEN > NM_XDP_MAX_FRAME) {
			NL_SET_ERR_MSG_MOD(bpf->extack, "MTU too large for XDP: a frame must fit one page");
			return -EINVAL;
		}
		old = rtnl_dereference(priv->xdp_prog);
		rcu_assign_pointer(priv->xdp_prog, bpf->prog);
		if (old)
			bpf_prog_put(old);
		return 0;
	default:
		return -EINVAL;
	}
}

static struct sk_buff *nm_page_skb(struct xdp_buff *xdp)
{
	struct sk_buff *skb;
	unsigned int meta = xdp->data - xdp->data_meta;

	skb = build_skb(xdp->data_hard_start, PAGE_SIZE);
	if (!skb)
		return NULL;
	skb_reserve(skb, xdp->data - xdp->data_hard_start);
	__skb_put(skb, xdp->data_end - xdp->data);
	if (meta && xdp->data_meta <= xdp->data)
		skb_metadata_set(skb, meta);
	return skb;
}

/*
 * nm_xdp_rx runs the program on a received frame. It returns the frame to
 * pass to the stack, or NULL when the program dropped, bounced or
 * redirected it (counted).
 */
struct sk_buff *nm_xdp_rx(struct nm_priv *priv, struct bpf_prog *prog,
			  struct sk_buff *skb, bool *redirected)
{
	struct xdp_buff xdp;
	struct page *page;
	struct sk_buff *nskb;
	unsigned int len = skb->len;
	u32 act;
	int err;

	if (len > NM_XDP_MAX_FRAME)
		goto drop_skb;
	page = dev_alloc_page();
	if (!page)
		goto drop_skb;
	if (skb_copy_bits(skb, 0, page_address(page) + XDP_PACKET_HEADROOM, len)) {
		put_page(page);
		goto drop_skb;
	}
	consume_skb(skb);

	xdp_init_buff(&xdp, PAGE_SIZE, &priv->xdp_rxq);
	xdp_prepare_buff(&xdp, page_address(page), XDP_PACKET_HEADROOM, len, true);
	act = bpf_prog_run_xdp(prog, &xdp);
	switch (act) {
	case XDP_PASS:
		nm_inc(priv, NM_XDP_PASS);
		nskb = nm_page_skb(&xdp);
		if (!nskb)
			goto drop_page;
		return nskb;
	case XDP_TX:
		nskb = nm_page_skb(&xdp);
		if (!nskb)
			goto drop_page;
		nm_inc(priv, NM_XDP_TX);
		nm_tx(priv, nskb);
		return NULL;
	case XDP_REDIRECT:
		err = xdp_do_redirect(priv->dev, &xdp, prog);
		if (err)
			goto drop_page;
		nm_inc(priv, NM_XDP_REDIRECT);
		*redirected = true;
		return NULL;
	default:
		bpf_warn_invalid_xdp_action(priv->dev, prog, act);
		fallthrough;
	case XDP_ABORTED:
		trace_xdp_exception(priv->dev, prog, act);
		nm_inc(priv, NM_XDP_ABORTED);
		put_page(page);
		return NULL;
	case XDP_DROP:
		nm_inc(priv, NM_XDP_DROP);
		put_page(page);
		return NULL;
	}
drop_page:
	put_page(page);
	nm_inc(priv, NM_RX_DROPPED);
	return NULL;
drop_skb:
	kfree_skb(skb);
	nm_inc(priv, NM_RX_DROPPED);
	return NULL;
}

int nm_xdp_xmit(struct net_device *dev, int n, struct xdp_frame **frames,
		u32 flags)
{
	struct nm_priv *priv = netdev_priv(dev);
	struct sk_buff *skb;
	int i;

	if (unlikely(flags & ~XDP_XMIT_FLAGS_MASK))
		return -EINVAL;
	if (!netif_running(dev))
		return -ENETDOWN;
	for (i = 0; i < n; i++) {
		skb = xdp_build_skb_from_frame(frames[i], dev);
		if (!skb)
			break;
		/* xdp_build_skb_from_frame pulled the Ethernet header. */
		skb_push(skb, ETH_HLEN);
		if (skb_linearize(skb)) {
			kfree_skb(skb);
			nm_inc(priv, NM_TX_DROP_ERROR);
			nm_inc(priv, NM_TX_DROPPED);
			continue;
		}
		nm_inc(priv, NM_XDP_XMIT);
		nm_tx(priv, skb);
	}
	return i;
}
