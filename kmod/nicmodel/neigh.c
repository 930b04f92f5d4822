// SPDX-License-Identifier: GPL-2.0
/*
 * nicmodel: the outer Ethernet header of a tunnel-mode packet-offload SA,
 * for frames whose L2 header the stack never wrote.
 *
 * xfrm_output sends a packet of a packet-offloaded tunnel-mode SA that
 * has no socket through xfrm_dev_direct_output (net/xfrm/xfrm_output.c,
 * 6.12.95 and 7.3.4 alike): it pushes hard_header_len bytes and calls
 * dev_queue_xmit without writing them ("In packet offload type, HW is
 * responsible for hard header packet mangling"). A forwarded packet still
 * has the header it arrived with there; one the host made itself (a VTEP's
 * UDP, sent without a socket) has whatever the buffer held. mlx5 builds that header
 * in hardware: the TX SA rule's reformat (MLX5_REFORMAT_TYPE_L2_TO_L3_ESP_TUNNEL,
 * setup_pkt_tunnel_reformat in en_accel/ipsec_fs.c) replaces the frame's
 * L2 header with one holding the port's MAC and the MAC of the SA's outer
 * destination, which mlx5e_ipsec_init_macs (en_accel/ipsec.c, 6.12 and
 * 7.3) takes from the neighbour table when the SA is added: if there is
 * no entry it creates one, calls neigh_event_send and installs the rule
 * as a drop (attrs->drop) until mlx5e_ipsec_netevent_event sees the
 * NETEVENT_NEIGH_UPDATE that makes it valid
 * (mlx5e_ipsec_handle_netdev_event rewrites the MACs and lifts the drop).
 *
 * The model reads the neighbour table per frame instead of caching it per
 * SA: the same MAC on the wire, and no notifier to keep. It takes the
 * neighbour of the SA's outer destination on the port itself; mlx5 first
 * asks the FIB for a gateway (routed tunnel endpoints), which the model
 * does not (README.md, "Not modelled").
 */
#include <linux/etherdevice.h>
#include <net/arp.h>
#include <net/ndisc.h>
#include <net/neighbour.h>
#include "nicmodel.h"

static struct neigh_table *nm_neigh_tbl(u16 family)
{
	if (family == AF_INET)
		return &arp_tbl;
#if IS_ENABLED(CONFIG_IPV6)
	if (family == AF_INET6)
		return &nd_tbl;
#endif
	return NULL;
}

/*
 * nm_neigh_get: the port's neighbour entry for the SA's outer
 * destination, created if missing (as mlx5e_ipsec_init_macs does), with
 * a reference; NULL if the family has no table or the entry cannot be
 * made (no IP configuration on the port).
 */
static struct neighbour *nm_neigh_get(struct nm_priv *priv,
				      const struct nm_sa *sa)
{
	struct neigh_table *tbl = nm_neigh_tbl(sa->family);
	struct neighbour *n;

	if (!tbl)
		return NULL;
	n = neigh_lookup(tbl, &sa->daddr, priv->dev);
	if (n)
		return n;
	n = neigh_create(tbl, &sa->daddr, priv->dev);
	return IS_ERR(n) ? NULL : n;
}

/*
 * nm_neigh_dmac writes the destination MAC of the SA's outer header:
 * 0, or -EAGAIN when the neighbour is not resolved yet (resolution was
 * started: the caller drops the frame, as mlx5's drop rule does), or
 * -ENOENT when there is no entry to resolve.
 */
int nm_neigh_dmac(struct nm_priv *priv, const struct nm_sa *sa, u8 *mac)
{
	struct neighbour *n = nm_neigh_get(priv, sa);
	int err = 0;

	if (!n)
		return -ENOENT;
	if (READ_ONCE(n->nud_state) & NUD_VALID) {
		neigh_ha_snapshot(mac, n, priv->dev);
	} else {
		neigh_event_send(n, NULL);
		err = -EAGAIN;
	}
	neigh_release(n);
	return err;
}

/*
 * nm_neigh_prime starts resolving the outer destination of a new OUT
 * tunnel-mode packet-offload SA, as mlx5e_ipsec_init_macs does when the
 * SA is added, so that the first frames need not wait.
 */
void nm_neigh_prime(struct nm_priv *priv, const struct nm_sa *sa)
{
	struct neighbour *n;

	if (!sa->out || !sa->tunnel || sa->crypto)
		return;
	n = nm_neigh_get(priv, sa);
	if (!n)
		return;
	if (!(READ_ONCE(n->nud_state) & NUD_VALID))
		neigh_event_send(n, NULL);
	neigh_release(n);
}
