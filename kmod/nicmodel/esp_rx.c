// SPDX-License-Identifier: GPL-2.0
/*
 * nicmodel: receive side of packet offload.
 *
 * ESP addressed to an IN SA the port holds is checked against the replay
 * window, decrypted, decapsulated, and handed up as the plain packet with
 * a secpath holding the SA and xfrm_offload marked CRYPTO_DONE /
 * CRYPTO_SUCCESS: what a packet-offload driver reports, and what makes
 * the kernel skip its inbound policy check (__xfrm_policy_check2). ESP
 * for SPIs the port does not hold, and everything else, passes untouched:
 * the kernel's software ESP may still own it. ESP of a crypto-offloaded IN
 * SA is only decrypted (nm_crypto_rx).
 */
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/if_ether.h>
#include <linux/udp.h>
#include <net/ip.h>
#include <net/esp.h>
#include "nicmodel.h"

#define NM_ESP_MIN (sizeof(struct ip_esp_hdr) + NM_IV_LEN + 2 + NM_ICV_LEN)

/* RFC 4303 Appendix A: the high half of a 64-bit sequence number. */
static u64 nm_infer_seq(const struct nm_sa *sa, u32 seq)
{
	u32 tl = lower_32_bits(sa->top), th = upper_32_bits(sa->top);
	u32 w = max_t(u32, sa->window, 1);

	if (!sa->esn)
		return seq;
	if (tl >= w - 1) {
		if (seq < tl - w + 1)
			th++;
	} else if (seq >= tl - w + 1) {
		th--;
	}
	return (u64)th << 32 | seq;
}

/* nm_replay_check: 0 if s has not been seen and is not too old. */
static int nm_replay_check(const struct nm_sa *sa, u64 s)
{
	u64 diff;

	if (!s)
		return -EINVAL;
	if (!sa->window || s > sa->top)
		return 0;
	diff = sa->top - s;
	if (diff >= sa->window || test_bit(diff, sa->bitmap))
		return -EINVAL;
	return 0;
}

static void nm_replay_advance(struct nm_sa *sa, u64 s)
{
	u64 d;

	if (s > sa->top) {
		d = s - sa->top;
		if (d >= NM_REPLAY_MAX)
			bitmap_zero(sa->bitmap, NM_REPLAY_MAX);
		else
			bitmap_shift_left(sa->bitmap, sa->bitmap, d, NM_REPLAY_MAX);
		sa->top = s;
		d = 0;
	} else {
		d = sa->top - s;
	}
	if (d < NM_REPLAY_MAX)
		set_bit(d, sa->bitmap);
}

void nm_mark_offloaded(struct sk_buff *skb, struct xfrm_state *x, u8 status)
{
	struct xfrm_offload *xo;
	struct sec_path *sp;

	sp = secpath_set(skb);
	if (!sp || sp->len >= XFRM_MAX_DEPTH) {
		xfrm_state_put(x);
		return;
	}
	sp->xvec[sp->len++] = x;
	sp->olen++;
	xo = xfrm_offload(skb);
	xo->flags = CRYPTO_DONE;
	xo->status = status;
}

/* Selector of the SA, checked on the decapsulated packet unless it is a
 * wildcard (the kernel checks it in xfrm_input for software SAs).
 */
static bool nm_sel_ok(const struct xfrm_selector *sel, const struct sk_buff *skb)
{
	struct nm_flow fl;

	if (!sel->prefixlen_d && !sel->prefixlen_s && !sel->proto &&
	    !sel->sport_mask && !sel->dport_mask)
		return true;
	return !nm_parse_flow(skb, &fl) && nm_sel_match(sel, &fl, false);
}

/* Rewrite the decrypted frame in place into the packet it carried; udp
 * is the NAT-T UDP header's length before the ESP header (0 without).
 */
static int nm_decap(struct sk_buff *skb, const struct nm_sa *sa,
		    const struct nm_flow *fl, unsigned int udp,
		    unsigned int inner, u8 nexthdr)
{
	unsigned int hdrlen = fl->l4off - fl->l3off;
	unsigned int esplen = udp + sizeof(struct ip_esp_hdr) + NM_IV_LEN;
	u8 *data = skb->data + fl->l4off + esplen;
	struct ethhdr *eth;

	if (sa->tunnel) {
		if (nexthdr != IPPROTO_IPIP && nexthdr != IPPROTO_IPV6)
			return -EINVAL;
		memmove(data - ETH_HLEN, skb->data, ETH_HLEN);
		skb_pull(skb, data - ETH_HLEN - skb->data);
		skb_trim(skb, ETH_HLEN + inner);
		eth = (struct ethhdr *)skb->data;
		eth->h_proto = htons(nexthdr == IPPROTO_IPIP ? ETH_P_IP : ETH_P_IPV6);
		if (inner < 1 || (skb->data[ETH_HLEN] >> 4) != (nexthdr == IPPROTO_IPIP ? 4 : 6))
			return -EINVAL;
		return 0;
	}
	memmove(data - hdrlen - ETH_HLEN, skb->data, ETH_HLEN + hdrlen);
	skb_pull(skb, esplen);
	skb_trim(skb, ETH_HLEN + hdrlen + inner);
	if (fl->family == AF_INET) {
		struct iphdr *ip = (struct iphdr *)(skb->data + ETH_HLEN);

		ip->protocol = nexthdr;
		ip->tot_len = htons(hdrlen + inner);
		ip_send_check(ip);
	} else {
		struct ipv6hdr *ip6 = (struct ipv6hdr *)(skb->data + ETH_HLEN);

		ip6->nexthdr = nexthdr;
		ip6->payload_len = htons(inner);
	}
	return 0;
}

/*
 * nm_espinudp: the length of the UDP header before ESP when the frame is
 * NAT-T ESP (RFC 3948: a non-zero SPI where IKE has its zero marker) and
 * the profile takes it (row 9), else 0. Like mlx5, which matches the SPI
 * inside the UDP payload (ipsec_fs.c setup_fte_spi, inner_esp_spi) and
 * not the ports; fragments go to the stack.
 */
static unsigned int nm_espinudp(const struct sk_buff *skb,
				const struct nm_flow *fl)
{
	__be32 spi, *p;

	if (!nm_prof()->espinudp || fl->proto != IPPROTO_UDP || fl->frag ||
	    fl->l3off + fl->l3len < fl->l4off + sizeof(struct udphdr) + NM_ESP_MIN)
		return 0;
	p = skb_header_pointer(skb, fl->l4off + sizeof(struct udphdr),
			       sizeof(spi), &spi);
	return p && *p ? sizeof(struct udphdr) : 0;
}

static bool nm_is_esp(const struct sk_buff *skb, const struct nm_flow *fl)
{
	if (fl->proto != IPPROTO_ESP)
		return false;
	if (fl->family == AF_INET) {
		const struct iphdr *ip = (const void *)(skb->data + fl->l3off);

		/* Fragments go to the stack, which reassembles them. */
		return !(ip->frag_off & htons(IP_MF | IP_OFFSET));
	}
	return true;
}

/*
 * nm_crypto_rx is the device's half of crypto offload on receive, for an
 * IN SA the stack offloaded in crypto mode: decrypt in place and hand the
 * ESP packet up as it came (headers, IV, trailer and ICV stay), with the
 * secpath holding the SA and xfrm_offload CRYPTO_DONE and the result in
 * its status. esp4/esp6 then skip decryption (xfrm_input's crypto_done
 * path: esp_input_tail strips the trailer), and the stack keeps the
 * replay window, lifetimes and counters.
 *
 * A failed ICV or a bad trailer: under the mlx5 profiles (row 8,
 * crypto_rx_hw_drop) the device drops it, as mlx5's status table does
 * (ipsec_fs.c rx_add_rule_drop_auth_trailer: drop rules on syndrome 1
 * and 2, each with a flow counter), so the stack never sees it and only
 * successes go up (ipsec_rxtx.c mlx5e_ipsec_offload_handle_rx_skb sets
 * CRYPTO_SUCCESS always); the counts reach the kernel through
 * update_stats (nm_state_update_stats). Under kernel-xfrm it goes up
 * marked CRYPTO_*_ESP_AUTH_FAILED or CRYPTO_INVALID_PACKET_SYNTAX, and
 * the kernel counts and drops it (xfrm_input).
 */
static struct sk_buff *nm_crypto_rx(struct nm_priv *priv, struct sk_buff *skb,
				    const struct nm_flow *fl, struct nm_sa *sa,
				    struct xfrm_state **xp, u8 *status)
{
	bool hw_drop = nm_prof()->crypto_rx_hw_drop;
	struct ip_esp_hdr *esph;
	unsigned int len;
	u8 *data, padlen;
	u64 seq;
	int err;

	if (skb_linearize(skb) ||
	    (skb_cloned(skb) && pskb_expand_head(skb, 0, 0, GFP_ATOMIC)))
		goto drop;
	skb_trim(skb, fl->l3off + fl->l3len);
	esph = (struct ip_esp_hdr *)(skb->data + fl->l4off);
	spin_lock(&sa->lock);
	seq = nm_infer_seq(sa, ntohl(esph->seq_no));
	spin_unlock(&sa->lock);
	data = esph->enc_data + NM_IV_LEN;
	len = skb->len - (data - skb->data);
	err = nm_gcm(sa, false, esph->spi, seq, esph->enc_data, data, len);
	if (err == -EBADMSG) {
		nm_inc(priv, NM_RX_CRYPTO_AUTH_FAIL);
		if (hw_drop) {
			atomic64_inc(&sa->auth_fail);
			goto hw_drop;
		}
		*status = sa->tunnel ? CRYPTO_TUNNEL_ESP_AUTH_FAILED :
				       CRYPTO_TRANSPORT_ESP_AUTH_FAILED;
	} else if (err) {
		goto drop;
	} else {
		padlen = data[len - NM_ICV_LEN - 2];
		if (padlen + 2 > len - NM_ICV_LEN) {
			nm_inc(priv, NM_RX_CRYPTO_BAD_TRAILER);
			if (hw_drop) {
				atomic64_inc(&sa->trailer_fail);
				goto hw_drop;
			}
			*status = CRYPTO_INVALID_PACKET_SYNTAX;
		} else {
			nm_inc(priv, NM_RX_CRYPTO_PACKETS);
			nm_add(priv, NM_RX_CRYPTO_BYTES, skb->len);
			*status = CRYPTO_SUCCESS;
		}
	}
	if (!refcount_inc_not_zero(&sa->x->refcnt))
		goto drop;
	*xp = sa->x;
	return skb;
hw_drop:
	kfree_skb(skb);
	return NULL;
drop:
	nm_inc(priv, NM_RX_DROP_MALFORMED);
	kfree_skb(skb);
	return NULL;
}

struct sk_buff *nm_esp_rx(struct nm_priv *priv, struct sk_buff *skb,
			  struct xfrm_state **xp, u8 *status)
{
	enum nm_stat why = NM_RX_DROP_MALFORMED;
	struct ip_esp_hdr *esph;
	unsigned int len, ctlen, inner, udp;
	struct nm_flow fl;
	struct nm_sa *sa;
	u8 *data, padlen, nexthdr;
	u64 seq;
	int err;

	if (nm_parse_flow(skb, &fl)) {
		nm_inc(priv, NM_RX_NON_IP_PACKETS);
		return skb;
	}
	udp = nm_espinudp(skb, &fl);
	if (!udp && !nm_is_esp(skb, &fl)) {
		if (fl.proto != IPPROTO_ESP)
			nm_inc(priv, NM_RX_CLEARTEXT_PACKETS);
		return skb;
	}
	/* The model decapsulates untagged frames without IPv6 extension
	 * headers only: the rest goes up as it came (README.md).
	 */
	if (fl.l3off != ETH_HLEN || (fl.family == AF_INET6 && fl.ip_opts))
		return skb;
	if (fl.l3off + fl.l3len < fl.l4off + udp + NM_ESP_MIN)
		goto drop;
	esph = (struct ip_esp_hdr *)(skb->data + fl.l4off + udp);
	sa = nm_sa_in_lookup(priv, fl.family, &fl.daddr, esph->spi);
	/* An SA's rule matches ESP (outer_esp_spi) or, for NAT-T, the SPI
	 * in UDP (inner_esp_spi), not both.
	 */
	if (sa && sa->encap != !!udp)
		sa = NULL;
	if (!sa) {
		nm_inc(priv, udp ? NM_RX_CLEARTEXT_PACKETS : NM_RX_ESP_NO_SA);
		return skb;
	}
	if (sa->crypto)
		return nm_crypto_rx(priv, skb, &fl, sa, xp, status);
	if (nm_sa_hard_expired(sa)) {
		why = NM_RX_DROP_HARD_LIMIT;
		goto drop;
	}
	/* Decryption writes in place: the frame must be ours alone. */
	if (skb_linearize(skb) ||
	    (skb_cloned(skb) && pskb_expand_head(skb, 0, 0, GFP_ATOMIC)))
		goto drop;
	/* Drop anything after the IP packet (Ethernet padding). */
	skb_trim(skb, fl.l3off + fl.l3len);
	esph = (struct ip_esp_hdr *)(skb->data + fl.l4off + udp);

	/* One NAPI context per port: the replay state needs no more. */
	seq = nm_infer_seq(sa, ntohl(esph->seq_no));
	if (nm_replay_check(sa, seq)) {
		why = NM_RX_DROP_REPLAY;
		goto drop;
	}
	data = esph->enc_data + NM_IV_LEN;
	len = skb->len - (data - skb->data);
	err = nm_gcm(sa, false, esph->spi, seq, esph->enc_data, data, len);
	if (err) {
		why = err == -EBADMSG ? NM_RX_DROP_AUTH : NM_RX_DROP_MALFORMED;
		goto drop;
	}
	ctlen = len - NM_ICV_LEN;
	padlen = data[ctlen - 2];
	nexthdr = data[ctlen - 1];
	if (padlen + 2 > ctlen)
		goto drop;
	inner = ctlen - 2 - padlen;
	spin_lock(&sa->lock);
	nm_replay_advance(sa, seq);
	spin_unlock(&sa->lock);

	if (nm_decap(skb, sa, &fl, udp, inner, nexthdr))
		goto drop;
	if (!nm_sel_ok(&sa->x->sel, skb)) {
		why = NM_RX_DROP_SELECTOR;
		goto drop;
	}
	if (!refcount_inc_not_zero(&sa->x->refcnt))
		goto drop;
	nm_sa_count(sa, inner);
	nm_inc(priv, NM_RX_IPSEC_PACKETS);
	nm_add(priv, NM_RX_IPSEC_BYTES, skb->len);
	*xp = sa->x;
	*status = CRYPTO_SUCCESS;
	return skb;
drop:
	nm_inc(priv, why);
	kfree_skb(skb);
	return NULL;
}
