// SPDX-License-Identifier: GPL-2.0
/*
 * nicmodel: the policy table's match, as the kernel's selector match
 * (xfrm_selector_match) defines it, or as the driver profile narrows it
 * (profile.c): addresses by prefix or exactly, protocol, ports
 * (ICMP type and code in their place) under masks. Lower priority value
 * wins; among equal priorities the policy added first wins, as in the
 * kernel's policy list. Marks and interface ids are not matched: frames
 * from XDP carry none.
 */
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/icmp.h>
#include <linux/icmpv6.h>
#include <linux/if_ether.h>
#include <linux/if_vlan.h>
#include <net/ip.h>
#include <net/ipv6.h>
#include "nicmodel.h"

static void nm_parse_ports(const struct sk_buff *skb, struct nm_flow *fl)
{
	const u8 *l4 = skb->data + fl->l4off;

	if (fl->l4off + 4 > skb->len)
		return;
	switch (fl->proto) {
	case IPPROTO_TCP:
	case IPPROTO_UDP:
	case IPPROTO_SCTP:
		fl->sport = *(const __be16 *)l4;
		fl->dport = *(const __be16 *)(l4 + 2);
		break;
	case IPPROTO_ICMP:
	case IPPROTO_ICMPV6:
		fl->sport = htons(l4[0]);
		fl->dport = htons(l4[1]);
		break;
	}
}

/*
 * nm_ipv6_exthdrs walks IPv6 extension headers from off (the first one)
 * to the upper-layer header, as a NIC's parser does: fl->proto becomes
 * the upper protocol, fl->l4off its offset; *later_frag is set for a
 * fragment other than the first. -EINVAL on a truncated chain.
 */
static int nm_ipv6_exthdrs(const struct sk_buff *skb, struct nm_flow *fl,
			   unsigned int off, unsigned int end, bool *later_frag)
{
	u8 nexthdr = fl->proto;
	int n;

	for (n = 0; n < 8 && ipv6_ext_hdr(nexthdr) && nexthdr != NEXTHDR_NONE; n++) {
		const u8 *h = skb->data + off;
		unsigned int len;

		if (off + 8 > end)
			return -EINVAL;
		fl->ip_opts = true;
		if (nexthdr == NEXTHDR_FRAGMENT) {
			fl->frag = true;
			/* A later fragment carries no upper header. */
			if (ntohs(*(const __be16 *)(h + 2)) & ~7)
				*later_frag = true;
			len = 8;
		} else if (nexthdr == NEXTHDR_AUTH) {
			len = (h[1] + 2) * 4;
		} else {
			len = (h[1] + 1) * 8;
		}
		nexthdr = h[0];
		off += len;
	}
	if (off > end)
		return -EINVAL;
	fl->proto = nexthdr;
	fl->l4off = off;
	return 0;
}

/* nm_parse_l3 reads the IP header of type proto at fl->l3off. */
static int nm_parse_l3(const struct sk_buff *skb, struct nm_flow *fl,
		       __be16 proto)
{
	bool later_frag = false;

	if (proto == htons(ETH_P_IP)) {
		const struct iphdr *ip = (const void *)(skb->data + fl->l3off);

		if (skb->len < fl->l3off + sizeof(*ip) || ip->version != 4 ||
		    ip->ihl < 5 || ntohs(ip->tot_len) < ip->ihl * 4 ||
		    skb->len < fl->l3off + ntohs(ip->tot_len))
			return -EINVAL;
		fl->family = AF_INET;
		fl->proto = ip->protocol;
		fl->saddr.a4 = ip->saddr;
		fl->daddr.a4 = ip->daddr;
		fl->l4off = fl->l3off + ip->ihl * 4;
		fl->l3len = ntohs(ip->tot_len);
		fl->ip_opts = ip->ihl > 5;
		fl->frag = ip_is_fragment(ip);
		if (!(ip->frag_off & htons(IP_OFFSET)))
			nm_parse_ports(skb, fl);
		return 0;
	}
	if (proto == htons(ETH_P_IPV6)) {
		const struct ipv6hdr *ip6 = (const void *)(skb->data + fl->l3off);

		if (skb->len < fl->l3off + sizeof(*ip6) || ip6->version != 6 ||
		    skb->len < fl->l3off + sizeof(*ip6) + ntohs(ip6->payload_len))
			return -EINVAL;
		fl->family = AF_INET6;
		fl->proto = ip6->nexthdr;
		memcpy(&fl->saddr.in6, &ip6->saddr, sizeof(ip6->saddr));
		memcpy(&fl->daddr.in6, &ip6->daddr, sizeof(ip6->daddr));
		fl->l3len = sizeof(*ip6) + ntohs(ip6->payload_len);
		if (nm_ipv6_exthdrs(skb, fl, fl->l3off + sizeof(*ip6),
				    fl->l3off + fl->l3len, &later_frag))
			return -EINVAL;
		if (!later_frag)
			nm_parse_ports(skb, fl);
		return 0;
	}
	return -EINVAL;
}

/*
 * nm_parse_flow reads an Ethernet frame's IP header, behind up to two
 * VLAN tags (802.1Q, 802.1ad) as a NIC's parser does; -EINVAL if none.
 */
int nm_parse_flow(const struct sk_buff *skb, struct nm_flow *fl)
{
	const struct ethhdr *eth = (const struct ethhdr *)skb->data;
	__be16 proto;
	int tags;

	memset(fl, 0, sizeof(*fl));
	if (skb->len < ETH_HLEN)
		return -EINVAL;
	fl->l3off = ETH_HLEN;
	proto = eth->h_proto;
	for (tags = 0; tags < 2 && (proto == htons(ETH_P_8021Q) ||
				    proto == htons(ETH_P_8021AD)); tags++) {
		if (skb->len < fl->l3off + VLAN_HLEN)
			return -EINVAL;
		proto = *(const __be16 *)(skb->data + fl->l3off + 2);
		fl->l3off += VLAN_HLEN;
	}
	return nm_parse_l3(skb, fl, proto);
}

/*
 * nm_parse_flow_as reads the IP header right after an Ethernet header
 * whose type field is not to be trusted (the stack did not write it,
 * wire.c nm_l2_unwritten): proto says what follows, as the skb's
 * protocol does for the device.
 */
int nm_parse_flow_as(const struct sk_buff *skb, struct nm_flow *fl,
		     __be16 proto)
{
	memset(fl, 0, sizeof(*fl));
	if (skb->len < ETH_HLEN)
		return -EINVAL;
	fl->l3off = ETH_HLEN;
	return nm_parse_l3(skb, fl, proto);
}

/*
 * nm_addr_exact: mlx5 in 6.12 (setup_fte_addr4/6 in ipsec_fs.c) matches
 * a non-zero selector address with an all-ones mask whatever its prefix,
 * and a zero address not at all.
 */
static bool nm_addr_exact(const xfrm_address_t *a, const xfrm_address_t *sel,
			  u16 family)
{
	if (xfrm_addr_any(sel, family))
		return true;
	return xfrm_addr_equal(a, sel, family);
}

/*
 * nm_sel_match: exact selects the profile's exact-address match (row 1
 * of README.md) instead of the kernel's prefix match.
 */
bool nm_sel_match(const struct xfrm_selector *sel, const struct nm_flow *fl,
		  bool exact)
{
	if (sel->family != fl->family)
		return false;
	if (sel->proto && sel->proto != fl->proto)
		return false;
	if ((fl->sport ^ sel->sport) & sel->sport_mask)
		return false;
	if ((fl->dport ^ sel->dport) & sel->dport_mask)
		return false;
	if (exact)
		return nm_addr_exact(&fl->daddr, &sel->daddr, fl->family) &&
		       nm_addr_exact(&fl->saddr, &sel->saddr, fl->family);
	if (fl->family == AF_INET)
		return addr4_match(fl->daddr.a4, sel->daddr.a4, sel->prefixlen_d) &&
		       addr4_match(fl->saddr.a4, sel->saddr.a4, sel->prefixlen_s);
	return addr_match(&fl->daddr, &sel->daddr, sel->prefixlen_d) &&
	       addr_match(&fl->saddr, &sel->saddr, sel->prefixlen_s);
}

/*
 * nm_pol_lookup: the first match in a priority-sorted RCU list, as the
 * profile's policy table matches (exact addresses, no fragments).
 */
struct nm_pol *nm_pol_lookup(struct list_head *pols, const struct nm_flow *fl)
{
	const struct nm_profile *prof = nm_prof();
	struct nm_pol *pol;

	/* Every rule carries setup_fte_no_frags: a fragment meets none. */
	if (prof->no_frags && fl->frag)
		return NULL;
	list_for_each_entry_rcu(pol, pols, node) {
		if (nm_sel_match(&pol->sel, fl, prof->exact_addr_match))
			return pol;
	}
	return NULL;
}
