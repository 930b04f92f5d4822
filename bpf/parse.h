/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
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
	__u8 dmac[6];     /* destination MAC (2-byte aligned: compared as three halfwords) */
	__u8 icmp_err;    /* an ICMP error the kernel's FWD check looks into (icmp_err_packet) */
	__u8 tos;
	__be32 src[4];
	__be32 dst[4];
	__u32 l3_off;     /* offset of the IP header from data */
	__be32 flowinfo;
};

/* ipv4_csum_ok checks an option-less IPv4 header's checksum, as ip_rcv
 * does (ip_fast_csum): the sum of its ten words, folded, is 0xffff. */
static __always_inline int ipv4_csum_ok(const struct iphdr *iph)
{
	const __u16 *w = (const __u16 *)iph;
	__u32 sum = 0;
#pragma unroll
	for (int i = 0; i < 10; i++)
		sum += w[i];
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return sum == 0xffff;
}

/* parse_packet fills p and returns FP_R_MAX when the packet is one the fast
 * path may classify, or the reason it must go to the kernel.
 *
 * It reads the L4 fields as the kernel's XFRM flow decoding does
 * (__xfrm_decode_session: the flow dissector over the skb that ip_rcv /
 * ip6_rcv trimmed to the IP length): ports only when their 4 bytes lie
 * within the IP length, ICMP type and code only when the whole 8-byte
 * ICMP header does, and only for ICMP in IPv4 and ICMPv6 in IPv6
 * (decode_session4/6); otherwise the selector sees ports 0. Bytes past the
 * IP length (Ethernet padding) are never read as L4. */
static __always_inline int parse_packet(struct xdp_md *ctx, struct pkt *p)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	__u32 off = sizeof(*eth);
	__be16 proto;

	if ((void *)(eth + 1) > data_end)
		return FP_R_MALFORMED;
	__builtin_memcpy(p->dmac, eth->h_dest, ETH_ALEN);
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
	/* Broadcast and multicast frames are never forwarded (ip_forward and
	 * ip6_forward drop all but PACKET_HOST). Another host's unicast MAC
	 * is checked against the interface in decide_full. */
	if (eth->h_dest[0] & 1)
		return FP_R_L2_NOT_OURS;

	void *l4;
	__u32 l3_room = (__u32)(data_end - data) - off; /* bytes from the IP header on */
	__u32 l4_len;     /* L4 bytes within the IP length */
	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *iph = data + off;
		if ((void *)(iph + 1) > data_end)
			return FP_R_MALFORMED;
		if (iph->version != 4 || iph->ihl < 5)
			return FP_R_MALFORMED;
		if (iph->ihl != 5)
			return FP_R_IP_OPTIONS;
		/* ip_rcv_core: bad checksum, total length beyond the frame or
		 * shorter than the header: dropped. */
		if (!ipv4_csum_ok(iph))
			return FP_R_BAD_IP_HEADER;
		p->tot_len = bpf_ntohs(iph->tot_len);
		if (p->tot_len < sizeof(*iph) || p->tot_len > l3_room)
			return FP_R_BAD_IP_HEADER;
		if (iph->frag_off & bpf_htons(IP_MF | IP_OFFSET))
			return FP_R_FRAGMENT;
		p->family = FP_FAM_V4;
		p->proto = iph->protocol;
		p->ttl = iph->ttl;
		p->tos = iph->tos;
		p->src[0] = iph->saddr;
		p->dst[0] = iph->daddr;
		l4 = iph + 1;
		l4_len = p->tot_len - sizeof(*iph);
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = data + off;
		if ((void *)(ip6 + 1) > data_end)
			return FP_R_MALFORMED;
		if (ip6->version != 6)
			return FP_R_MALFORMED;
		p->family = FP_FAM_V6;
		p->proto = ip6->nexthdr;
		p->ttl = ip6->hop_limit;
		l4_len = bpf_ntohs(ip6->payload_len);
		p->tot_len = l4_len + sizeof(*ip6);
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
		/* ip6_rcv_core: a payload length beyond the frame: dropped
		 * (0 means a jumbogram only with a hop-by-hop header, handled
		 * above; otherwise it trims to 40 bytes). */
		if (l4_len + sizeof(*ip6) > l3_room) /* in 32 bits: tot_len wraps */
			return FP_R_BAD_IP_HEADER;
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
		if (l4_len < 4)
			break; /* the dissector finds no ports: 0 */
		__be16 *ports = l4;
		if ((void *)(ports + 2) > data_end)
			return FP_R_MALFORMED; /* cannot happen: the IP length fits */
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
		 * the destination port (xfrm_flowi_sport/dport), read only
		 * with the whole header (skb_flow_get_icmp_tci) and only for
		 * the family's own ICMP (decode_session4/6). */
		int own = p->family == FP_FAM_V4 ? p->proto == IPPROTO_ICMP : p->proto == IPPROTO_ICMPV6_;
		if (!own || l4_len < 8)
			break;
		__u8 *tc = l4;
		if ((void *)(tc + 8) > data_end)
			return FP_R_MALFORMED; /* cannot happen: the IP length fits */
		if (p->family == FP_FAM_V6 && tc[0] >= 133 && tc[0] <= 137)
			return FP_R_NOT_IP; /* neighbour discovery: always the kernel's */
		p->sport = bpf_htons(tc[0]);
		p->dport = bpf_htons(tc[1]);
		/* icmp_err_packet(): destination unreachable and time exceeded
		 * (IPv4 3, 11; IPv6 1, 3) and IPv6 packet too big (2). */
		if (p->family == FP_FAM_V4)
			p->icmp_err = tc[0] == 3 || tc[0] == 11;
		else
			p->icmp_err = tc[0] >= 1 && tc[0] <= 3;
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
