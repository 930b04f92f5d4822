// SPDX-License-Identifier: GPL-2.0
/*
 * nicmodel: the policy table's match, as the kernel's selector match
 * (xfrm_selector_match) defines it: addresses by prefix, protocol, ports
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

/* nm_parse_flow reads an Ethernet frame's IP header; -EINVAL if none. */
int nm_parse_flow(const struct sk_buff *skb, struct nm_flow *fl)
{
	const struct ethhdr *eth = (const struct ethhdr *)skb->data;

	memset(fl, 0, sizeof(*fl));
	if (skb->len < ETH_HLEN)
		return -EINVAL;
	fl->l3off = ETH_HLEN;
	if (eth->h_proto == htons(ETH_P_IP)) {
		const struct iphdr *ip = (const void *)(skb->data + ETH_HLEN);

		if (skb->len < ETH_HLEN + sizeof(*ip) || ip->version != 4 ||
		    ip->ihl < 5 || ntohs(ip->tot_len) < ip->ihl * 4 ||
		    skb->len < ETH_HLEN + ntohs(ip->tot_len))
			return -EINVAL;
		fl->family = AF_INET;
		fl->proto = ip->protocol;
		fl->saddr.a4 = ip->saddr;
		fl->daddr.a4 = ip->daddr;
		fl->l4off = ETH_HLEN + ip->ihl * 4;
		fl->l3len = ntohs(ip->tot_len);
		if (!(ip->frag_off & htons(IP_OFFSET)))
			nm_parse_ports(skb, fl);
		return 0;
	}
	if (eth->h_proto == htons(ETH_P_IPV6)) {
		const struct ipv6hdr *ip6 = (const void *)(skb->data + ETH_HLEN);

		if (skb->len < ETH_HLEN + sizeof(*ip6) || ip6->version != 6 ||
		    skb->len < ETH_HLEN + sizeof(*ip6) + ntohs(ip6->payload_len))
			return -EINVAL;
		fl->family = AF_INET6;
		fl->proto = ip6->nexthdr;
		memcpy(&fl->saddr.in6, &ip6->saddr, sizeof(ip6->saddr));
		memcpy(&fl->daddr.in6, &ip6->daddr, sizeof(ip6->daddr));
		fl->l4off = ETH_HLEN + sizeof(*ip6);
		fl->l3len = sizeof(*ip6) + ntohs(ip6->payload_len);
		nm_parse_ports(skb, fl);
		return 0;
	}
	return -EINVAL;
}

bool nm_sel_match(const struct xfrm_selector *sel, const struct nm_flow *fl)
{
	if (sel->family != fl->family)
		return false;
	if (sel->proto && sel->proto != fl->proto)
		return false;
	if ((fl->sport ^ sel->sport) & sel->sport_mask)
		return false;
	if ((fl->dport ^ sel->dport) & sel->dport_mask)
		return false;
	if (fl->family == AF_INET)
		return addr4_match(fl->daddr.a4, sel->daddr.a4, sel->prefixlen_d) &&
		       addr4_match(fl->saddr.a4, sel->saddr.a4, sel->prefixlen_s);
	return addr_match(&fl->daddr, &sel->daddr, sel->prefixlen_d) &&
	       addr_match(&fl->saddr, &sel->saddr, sel->prefixlen_s);
}

/* nm_pol_lookup: the first match in a priority-sorted RCU list. */
struct nm_pol *nm_pol_lookup(struct list_head *pols, const struct nm_flow *fl)
{
	struct nm_pol *pol;

	list_for_each_entry_rcu(pol, pols, node) {
		if (nm_sel_match(&pol->sel, fl))
			return pol;
	}
	return NULL;
}
