/* SPDX-License-Identifier: GPL-2.0 */
/* Packet parsing for the fast path: Ethernet, one 802.1Q/802.1ad tag, IPv4
 * without options or fragments, IPv6 without extension headers, and the L4
 * fields the kernel's XFRM selector match reads. Anything else is reported
 * so the caller can pass it to the kernel. */
#ifndef SLUICE_PARSE_H
#define SLUICE_PARSE_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "fastpath.h"

#ifndef ETH_P_8021AD
#define ETH_P_8021AD 0x88A8
#endif
#define IP_MF 0x2000
#define IP_OFFSET 0x1FFF
#ifndef IPPROTO_MH
#define IPPROTO_MH 135
#endif
#define IPPROTO_ICMPV6_ 58

struct vlan_hdr {
	__be16 tci;
	__be16 proto;
};

struct pkt {
	__u8 family;      /* FP_FAM_V4 / FP_FAM_V6 */
	__u8 proto;
	__u8 ttl;
	__u8 tagged;
	__u16 vid;
	__u16 tot_len;    /* L3 length, for the fib lookup's MTU check */
	__be16 sport;     /* as the kernel's xfrm_flowi_sport() sees it */
	__be16 dport;     /* as xfrm_flowi_dport() sees it */
	__be32 src[4];
	__be32 dst[4];
	__u32 l3_off;     /* offset of the IP header from data */
	__u8 tos;
	__be32 flowinfo;
};

/* parse_packet fills p and returns FP_R_MAX when the packet is one the fast
 * path may classify, or the reason it must go to the kernel. */
static __always_inline int parse_packet(struct xdp_md *ctx, struct pkt *p)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	__u32 off = sizeof(*eth);
	__be16 proto;

	if ((void *)(eth + 1) > data_end)
		return FP_R_MALFORMED;
	proto = eth->h_proto;
	if (proto == bpf_htons(ETH_P_8021Q) || proto == bpf_htons(ETH_P_8021AD)) {
		struct vlan_hdr *vh = data + off;
		if ((void *)(vh + 1) > data_end)
			return FP_R_MALFORMED;
		p->tagged = 1;
		p->vid = bpf_ntohs(vh->tci) & 0x0fff;
		proto = vh->proto;
		off += sizeof(*vh);
	}
	p->l3_off = off;

	void *l4;
	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *iph = data + off;
		if ((void *)(iph + 1) > data_end)
			return FP_R_MALFORMED;
		if (iph->version != 4 || iph->ihl < 5)
			return FP_R_MALFORMED;
		if (iph->ihl != 5)
			return FP_R_IP_OPTIONS;
		if (iph->frag_off & bpf_htons(IP_MF | IP_OFFSET))
			return FP_R_FRAGMENT;
		p->family = FP_FAM_V4;
		p->proto = iph->protocol;
		p->ttl = iph->ttl;
		p->tos = iph->tos;
		p->tot_len = bpf_ntohs(iph->tot_len);
		p->src[0] = iph->saddr;
		p->dst[0] = iph->daddr;
		l4 = iph + 1;
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = data + off;
		if ((void *)(ip6 + 1) > data_end)
			return FP_R_MALFORMED;
		if (ip6->version != 6)
			return FP_R_MALFORMED;
		p->family = FP_FAM_V6;
		p->proto = ip6->nexthdr;
		p->ttl = ip6->hop_limit;
		p->tot_len = bpf_ntohs(ip6->payload_len) + sizeof(*ip6);
		p->flowinfo = *(__be32 *)ip6 & bpf_htonl(0x0FFFFFFF);
		__builtin_memcpy(p->src, &ip6->saddr, 16);
		__builtin_memcpy(p->dst, &ip6->daddr, 16);
		switch (p->proto) {
		case IPPROTO_HOPOPTS:
		case IPPROTO_ROUTING:
		case IPPROTO_FRAGMENT:
		case IPPROTO_DSTOPTS:
		case IPPROTO_NONE:
		case IPPROTO_MH:
			return FP_R_IPV6_EXT;
		}
		l4 = ip6 + 1;
	} else {
		return FP_R_NOT_IP;
	}

	switch (p->proto) {
	case IPPROTO_ESP:
	case IPPROTO_AH:
		return FP_R_IPSEC;
	case IPPROTO_TCP:
	case IPPROTO_UDP:
	case IPPROTO_UDPLITE:
	case IPPROTO_SCTP: {
		/* Source and destination port lead all four headers. */
		__be16 *ports = l4;
		if ((void *)(ports + 2) > data_end)
			return FP_R_MALFORMED;
		p->sport = ports[0];
		p->dport = ports[1];
		if (p->proto == IPPROTO_UDP &&
		    (p->dport == bpf_htons(500) || p->dport == bpf_htons(4500) ||
		     p->sport == bpf_htons(500) || p->sport == bpf_htons(4500)))
			return FP_R_IKE;
		break;
	}
	case IPPROTO_ICMP:
	case IPPROTO_ICMPV6_: {
		/* The kernel matches ICMP type as the source port and code as
		 * the destination port (xfrm_flowi_sport/dport). */
		__u8 *tc = l4;
		if ((void *)(tc + 2) > data_end)
			return FP_R_MALFORMED;
		if (p->proto == IPPROTO_ICMPV6_ && (tc[0] >= 133 && tc[0] <= 137))
			return FP_R_NOT_IP; /* neighbour discovery: always the kernel's */
		p->sport = bpf_htons(tc[0]);
		p->dport = bpf_htons(tc[1]);
		break;
	}
	case IPPROTO_GRE:
	case IPPROTO_COMP:
		/* The kernel reads the GRE key / IPComp CPI into the port
		 * fields; not worth mirroring: let it decide. */
		return FP_R_UNCERTAIN;
	default:
		/* Other protocols: the kernel matches ports as 0. */
		break;
	}
	return FP_R_MAX;
}

#endif
