// SPDX-License-Identifier: GPL-2.0
/*
 * nicmodel: ESP encapsulation and AES-GCM (RFC 4303, RFC 4106), the
 * "hardware" half of packet offload on transmit.
 *
 * The stack hands a packet-offloaded port plain frames (in tunnel mode
 * not even a valid Ethernet header: xfrm_dev_direct_output only pushes
 * room for one), so the port builds the whole outer frame itself. The
 * IV is the 64-bit sequence number, unique per key as RFC 4106 requires.
 * Crypto offload (nm_crypto_tx, at the end) only encrypts what the stack
 * built.
 */
#include <linux/etherdevice.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/random.h>
#include <linux/udp.h>
#include <net/ip6_checksum.h>
#include <net/ip.h>
#include <net/esp.h>
#include <net/inet_ecn.h>
#include <net/dsfield.h>
#include <crypto/aead.h>
#include "nicmodel.h"

/*
 * nm_gcm runs rfc4106(gcm(aes)) in place over data: len bytes of
 * plaintext (the ICV is written after them) or, to decrypt, ciphertext
 * and ICV. The AAD is SPI and sequence number (with the high half under
 * ESN, RFC 4303 2.2.1); -EBADMSG means the ICV did not verify.
 */
int nm_gcm(struct nm_sa *sa, bool enc, __be32 spi, u64 seq,
	   const u8 *iv, u8 *data, unsigned int len)
{
	struct crypto_aead *tfm = sa->tfm;
	struct aead_request *req;
	struct scatterlist sg[2];
	unsigned int reqlen = sizeof(*req) + crypto_aead_reqsize(tfm);
	unsigned int assoclen = sa->esn ? 20 : 16;
	u8 *aad, *ivbuf;
	__be32 *w;
	int err;

	req = kmalloc(reqlen + 32, GFP_ATOMIC);
	if (!req)
		return -ENOMEM;
	aad = (u8 *)req + reqlen;
	ivbuf = aad + 24;
	w = (__be32 *)aad;
	*w++ = spi;
	if (sa->esn)
		*w++ = htonl(upper_32_bits(seq));
	*w++ = htonl(lower_32_bits(seq));
	memcpy(w, iv, NM_IV_LEN);	/* rfc4106 wants the IV after the AAD */
	memcpy(ivbuf, iv, NM_IV_LEN);

	sg_init_table(sg, 2);
	sg_set_buf(&sg[0], aad, assoclen);
	sg_set_buf(&sg[1], data, len + (enc ? NM_ICV_LEN : 0));
	aead_request_set_tfm(req, tfm);
	aead_request_set_callback(req, 0, NULL, NULL);
	aead_request_set_crypt(req, sg, sg, len, ivbuf);
	aead_request_set_ad(req, assoclen);
	err = enc ? crypto_aead_encrypt(req) : crypto_aead_decrypt(req);
	kfree_sensitive(req);
	return err;
}

/* nm_next_seq takes the SA's next sequence number; false on overflow
 * (RFC 4303 3.3.3: a counter never cycles; rekey instead).
 */
static bool nm_next_seq(struct nm_sa *sa, u64 *seq)
{
	bool ok = true;

	spin_lock(&sa->lock);
	if (sa->esn ? sa->seq == U64_MAX : sa->seq >= U32_MAX)
		ok = false;
	else
		*seq = ++sa->seq;
	spin_unlock(&sa->lock);
	return ok;
}

static u8 nm_outer_dsfield(const struct sk_buff *skb, const struct nm_flow *fl)
{
	u8 ds;

	if (fl->family == AF_INET)
		ds = ((const struct iphdr *)(skb->data + fl->l3off))->tos;
	else
		ds = ipv6_get_dsfield((const struct ipv6hdr *)(skb->data + fl->l3off));
	return INET_ECN_encapsulate(ds, ds);
}

static void nm_outer_ip(struct nm_sa *sa, u8 *p, unsigned int payload, u8 ds)
{
	if (sa->family == AF_INET) {
		struct iphdr *ip = (struct iphdr *)p;

		memset(ip, 0, sizeof(*ip));
		ip->version = 4;
		ip->ihl = 5;
		ip->tos = ds;
		ip->tot_len = htons(sizeof(*ip) + payload);
		ip->id = htons(get_random_u16());
		ip->frag_off = htons(IP_DF);
		ip->ttl = 64;
		ip->protocol = IPPROTO_ESP;
		ip->saddr = sa->saddr.a4;
		ip->daddr = sa->daddr.a4;
		ip_send_check(ip);
	} else {
		struct ipv6hdr *ip6 = (struct ipv6hdr *)p;

		memset(ip6, 0, sizeof(*ip6));
		ip6->version = 6;
		ip6_flow_hdr(ip6, ds, 0);
		ip6->payload_len = htons(payload);
		ip6->nexthdr = IPPROTO_ESP;
		ip6->hop_limit = 64;
		memcpy(&ip6->saddr, &sa->saddr.in6, sizeof(ip6->saddr));
		memcpy(&ip6->daddr, &sa->daddr.in6, sizeof(ip6->daddr));
	}
}

/* Transport mode keeps the packet's IP header, now announcing ESP (or
 * UDP for NAT-T).
 */
static void nm_transport_ip(u8 *p, u16 family, unsigned int hdrlen,
			    unsigned int payload, u8 proto)
{
	if (family == AF_INET) {
		struct iphdr *ip = (struct iphdr *)p;

		ip->protocol = proto;
		ip->tot_len = htons(hdrlen + payload);
		ip_send_check(ip);
	} else {
		struct ipv6hdr *ip6 = (struct ipv6hdr *)p;

		ip6->nexthdr = proto;
		ip6->payload_len = htons(payload);
	}
}

/*
 * nm_udp_encap writes the NAT-T UDP header (RFC 3948) before the ESP
 * header, with the SA's ports, as mlx5's reformat context carries them
 * (ipsec_fs.c setup_pkt_transport_reformat, ADD_ESP_TRANSPORT_OVER_UDPV4/6).
 * IPv4 sends checksum 0 (RFC 3948 2.1); IPv6 needs one (RFC 8200 8.1).
 */
static void nm_udp_encap(struct nm_sa *sa, u8 *ip, struct udphdr *uh,
			 unsigned int ulen)
{
	uh->source = sa->encap_sport;
	uh->dest = sa->encap_dport;
	uh->len = htons(ulen);
	uh->check = 0;
	if (sa->family == AF_INET6) {
		struct ipv6hdr *ip6 = (struct ipv6hdr *)ip;

		uh->check = csum_ipv6_magic(&ip6->saddr, &ip6->daddr, ulen,
					    IPPROTO_UDP, csum_partial(uh, ulen, 0));
		if (!uh->check)
			uh->check = CSUM_MANGLED_0;
	}
}

/*
 * nm_tunnel_eth writes the outer frame's MACs. dmac is the neighbour of
 * the SA's outer destination for a frame the stack sent without an L2
 * header (neigh.c). Otherwise the wire's other station is taken: it has
 * one; a NIC would take the MAC from its neighbour table here too, and
 * that is left as it was for frames that carry a header.
 */
static void nm_tunnel_eth(struct nm_priv *priv, struct ethhdr *eth,
			  const u8 *dmac)
{
	struct net_device *peer = rcu_dereference(priv->peer);

	if (dmac)
		ether_addr_copy(eth->h_dest, dmac);
	else if (peer)
		ether_addr_copy(eth->h_dest, peer->dev_addr);
	ether_addr_copy(eth->h_source, priv->dev->dev_addr);
}

struct sk_buff *nm_esp_encrypt(struct nm_priv *priv, struct nm_sa *sa,
			       struct sk_buff *skb, const struct nm_flow *fl,
			       const u8 *dmac)
{
	unsigned int hdrlen, plen, clen, pad, total, i, l2 = fl->l3off;
	unsigned int udp = sa->encap ? sizeof(struct udphdr) : 0;
	const u8 *payload;
	struct sk_buff *out;
	struct ip_esp_hdr *esph;
	u8 nexthdr, *p, *data;
	__be64 iv;
	u64 seq;

	if (sa->tunnel) {
		hdrlen = sa->family == AF_INET ? sizeof(struct iphdr) :
						 sizeof(struct ipv6hdr);
		payload = skb->data + fl->l3off;
		plen = fl->l3len;
		nexthdr = fl->family == AF_INET ? IPPROTO_IPIP : IPPROTO_IPV6;
	} else {
		hdrlen = fl->l4off - fl->l3off;
		payload = skb->data + fl->l4off;
		plen = fl->l3len - hdrlen;
		nexthdr = fl->proto;
	}
	clen = ALIGN(plen + 2, 4);
	pad = clen - plen - 2;
	/* The L2 header is kept, VLAN tags included: the device encrypts
	 * tagged frames too (its parser reads through the tags).
	 */
	total = l2 + hdrlen + udp + sizeof(*esph) + NM_IV_LEN + clen + NM_ICV_LEN;

	if (!nm_next_seq(sa, &seq)) {
		nm_inc(priv, NM_TX_DROP_SEQ_OVERFLOW);
		return NULL;
	}
	out = alloc_skb(total + NET_SKB_PAD + NET_IP_ALIGN, GFP_ATOMIC);
	if (!out) {
		nm_inc(priv, NM_TX_DROP_ERROR);
		return NULL;
	}
	skb_reserve(out, NET_SKB_PAD + NET_IP_ALIGN);
	p = skb_put(out, total);

	memcpy(p, skb->data, l2);
	if (sa->tunnel) {
		nm_tunnel_eth(priv, (struct ethhdr *)p, dmac);
		/* The ethertype after the tags, now the outer family's. */
		*(__be16 *)(p + l2 - 2) = htons(sa->family == AF_INET ?
						ETH_P_IP : ETH_P_IPV6);
		nm_outer_ip(sa, p + l2, total - l2 - hdrlen,
			    nm_outer_dsfield(skb, fl));
	} else {
		memcpy(p + l2, skb->data + fl->l3off, hdrlen);
		nm_transport_ip(p + l2, fl->family, hdrlen,
				total - l2 - hdrlen,
				udp ? IPPROTO_UDP : IPPROTO_ESP);
	}
	esph = (struct ip_esp_hdr *)(p + l2 + hdrlen + udp);
	esph->spi = sa->spi;
	esph->seq_no = htonl(lower_32_bits(seq));
	iv = cpu_to_be64(seq);
	memcpy(esph->enc_data, &iv, NM_IV_LEN);
	data = esph->enc_data + NM_IV_LEN;
	memcpy(data, payload, plen);
	for (i = 0; i < pad; i++)
		data[plen + i] = i + 1;		/* RFC 4303 2.4 */
	data[plen + pad] = pad;
	data[plen + pad + 1] = nexthdr;

	if (nm_gcm(sa, true, sa->spi, seq, (u8 *)&iv, data, clen)) {
		nm_inc(priv, NM_TX_DROP_ERROR);
		kfree_skb(out);
		return NULL;
	}
	if (udp)	/* after encryption: the IPv6 checksum covers the ciphertext */
		nm_udp_encap(sa, p + l2, (struct udphdr *)(p + l2 + hdrlen),
			     total - l2 - hdrlen);
	out->dev = priv->dev;
	out->priority = skb->priority;
	nm_sa_count(sa, fl->l3len);
	nm_inc(priv, NM_TX_IPSEC_PACKETS);
	nm_add(priv, NM_TX_IPSEC_BYTES, total);
	return out;
}

/*
 * nm_crypto_tx is the device's half of crypto offload on transmit. The
 * stack has built the whole ESP packet (esp4/esp6 offload's esp_xmit,
 * after validate_xmit_xfrm): outer headers, the ESP header with SPI and
 * sequence number at the transport header, room for the IV, the payload
 * with its trailer (padding, pad length, next header) and room for the
 * ICV at the end, and it left the SA in the secpath with xfrm_offload
 * marked XFRM_XMIT. The device writes the IV (the 64-bit sequence number,
 * as mlx5's driver does) and encrypts in place with the SA's key.
 *
 * Returns 0 when the frame carries no crypto offload for this port, 1
 * when it was encrypted (it must not meet the packet-offload policy
 * table again), or a negative errno: drop it (counted).
 */
int nm_crypto_tx(struct nm_priv *priv, struct sk_buff *skb)
{
	struct xfrm_offload *xo = xfrm_offload(skb);
	struct ip_esp_hdr *esph;
	struct xfrm_state *x;
	struct sec_path *sp;
	struct nm_sa *sa;
	unsigned int off, len;
	__be64 iv;
	u8 *data;
	u64 seq;

	if (!xo || !(xo->flags & XFRM_XMIT))
		return 0;
	sp = skb_sec_path(skb);
	x = sp->xvec[sp->len - 1];
	if (x->xso.type != XFRM_DEV_OFFLOAD_CRYPTO || nm_xso_port(x) != priv->dev)
		return 0;
	sa = (struct nm_sa *)x->xso.offload_handle;
	off = skb_transport_offset(skb);
	if (!sa || !sa->out || off < ETH_HLEN ||
	    off + sizeof(*esph) + NM_IV_LEN + 2 + NM_ICV_LEN > skb->len ||
	    skb_ensure_writable(skb, skb->len))
		goto err;
	esph = (struct ip_esp_hdr *)(skb->data + off);
	if (esph->spi != sa->spi)
		goto err;
	seq = ntohl(esph->seq_no);
	if (sa->esn)
		seq |= (u64)xo->seq.hi << 32;
	iv = cpu_to_be64(seq);
	memcpy(esph->enc_data, &iv, NM_IV_LEN);
	data = esph->enc_data + NM_IV_LEN;
	len = skb->len - (data - skb->data) - NM_ICV_LEN;
	if (nm_gcm(sa, true, sa->spi, seq, (u8 *)&iv, data, len))
		goto err;
	nm_inc(priv, NM_TX_CRYPTO_PACKETS);
	nm_add(priv, NM_TX_CRYPTO_BYTES, skb->len);
	return 1;
err:
	nm_inc(priv, NM_TX_CRYPTO_DROP_ERROR);
	return -EINVAL;
}
