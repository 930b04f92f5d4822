/* SPDX-License-Identifier: GPL-2.0 */
/*
 * nicmodel: a model of a NIC with IPsec packet and crypto offload, for
 * tests.
 *
 * Ports come in pairs joined by a "wire": what one port transmits, the
 * other receives. Each port models the hardware's part of IPsec packet
 * offload: it keeps the SAs and policies the kernel offloads to it,
 * encrypts on transmit what its OUT policies select, and decrypts on
 * receive the ESP of its IN SAs. For crypto offload it only runs AES-GCM
 * over the ESP the stack built or will parse. See README.md for what it
 * models and what it does not.
 */
#ifndef NICMODEL_H
#define NICMODEL_H

#include <linux/netdevice.h>
#include <linux/ethtool.h>
#include <linux/skbuff.h>
#include <linux/hashtable.h>
#include <linux/workqueue.h>
#include <crypto/aead.h>
#include <net/xfrm.h>
#include <net/xdp.h>
#include <linux/version.h>

/*
 * nm_xso_port: the port an offloaded SA is on. Before Linux 6.16 the
 * xfrm core set xso.real_dev for every offloaded SA; since, only the
 * bonding driver does (to its port), and xso.dev is the port otherwise.
 */
static inline struct net_device *nm_xso_port(const struct xfrm_state *x)
{
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 16, 0)
	return x->xso.real_dev ? x->xso.real_dev : x->xso.dev;
#else
	return x->xso.real_dev;
#endif
}

#define NM_DRV_NAME "nicmodel"
#define NM_DRV_VERSION "1"
#define NM_RXQ_LIMIT 1024
/* Largest replay window the model's "hardware" keeps (bits), as mlx5. */
#define NM_REPLAY_MAX 256
#define NM_ICV_LEN 16
#define NM_IV_LEN 8
#define NM_SALT_LEN 4

/* Counters shown by ethtool -S; the order is the strings' order. */
enum nm_stat {
	NM_TX_IPSEC_PACKETS,
	NM_TX_IPSEC_BYTES,
	NM_TX_CLEARTEXT_PACKETS,
	NM_TX_NON_IP_PACKETS,
	NM_TX_LINK_LOCAL_PACKETS,
	NM_TX_DROP_NO_STATE,
	NM_TX_DROP_POLICY_BLOCK,
	NM_TX_DROP_HARD_LIMIT,
	NM_TX_DROP_SEQ_OVERFLOW,
	NM_TX_DROP_OVERSIZE,
	NM_TX_DROP_ERROR,
	NM_RX_IPSEC_PACKETS,
	NM_RX_IPSEC_BYTES,
	NM_RX_ESP_NO_SA,
	NM_RX_DROP_AUTH,
	NM_RX_DROP_REPLAY,
	NM_RX_DROP_HARD_LIMIT,
	NM_RX_DROP_SELECTOR,
	NM_RX_DROP_MALFORMED,
	NM_RX_DROP_OVERSIZE,
	NM_RX_DROP_QUEUE_FULL,
	NM_RX_CLEARTEXT_PACKETS,
	NM_RX_NON_IP_PACKETS,
	NM_TX_CRYPTO_PACKETS,
	NM_TX_CRYPTO_BYTES,
	NM_TX_CRYPTO_DROP_ERROR,
	NM_RX_CRYPTO_PACKETS,
	NM_RX_CRYPTO_BYTES,
	NM_RX_CRYPTO_AUTH_FAIL,
	NM_RX_CRYPTO_BAD_TRAILER,
	NM_XDP_PASS,
	NM_XDP_DROP,
	NM_XDP_TX,
	NM_XDP_REDIRECT,
	NM_XDP_ABORTED,
	NM_XDP_XMIT,
	NM_TX_PACKETS,
	NM_TX_BYTES,
	NM_RX_PACKETS,
	NM_RX_BYTES,
	NM_TX_DROPPED,
	NM_RX_DROPPED,
	NM_RX_TC_HITS,			/* frames a hardware flower rule matched */
	NM_RX_TC_REDIRECT,		/* ... and sent out of a port */
	NM_RX_TC_DROP,			/* ... and dropped */
	NM_TX_DROP_NO_NEIGH,		/* tunnel frame without L2, outer MAC unresolved */
	NM_STAT_COUNT,
};

extern const char nm_stat_names[NM_STAT_COUNT][ETH_GSTRING_LEN];

/* One offloaded SA. */
struct nm_sa {
	struct hlist_node hnode;	/* priv->sa_in (IN), by SPI */
	struct list_head node;		/* priv->sa_out (OUT) */
	struct rcu_work free_work;
	struct work_struct expire_work;
	struct xfrm_state *x;
	struct nm_priv *priv;
	struct crypto_aead *tfm;
	bool out;
	bool crypto;			/* XFRM_DEV_OFFLOAD_CRYPTO: the stack does ESP */
	bool esn;
	bool tunnel;
	bool linked;
	/* NAT-T (row 9): ESP in UDP (RFC 3948), the SA's ports. */
	bool encap;
	__be16 encap_sport, encap_dport;
	u16 family;			/* outer (x->props.family) */
	u32 reqid;
	__be32 spi;
	xfrm_address_t saddr, daddr;	/* outer */
	unsigned long add_seq;		/* newer SAs win on TX */
	u8 salt[NM_SALT_LEN];

	/* TX sequence and RX replay state, as the hardware keeps them. */
	spinlock_t lock;
	u64 seq;			/* TX: last sent (64-bit with ESN) */
	u64 top;			/* RX: highest accepted */
	u32 window;
	unsigned long bitmap[BITS_TO_LONGS(NM_REPLAY_MAX)];

	atomic64_t packets, bytes;
	/* Crypto RX failures the device dropped (row 8), not yet given to
	 * the xfrm core by update_stats.
	 */
	atomic64_t auth_fail, trailer_fail;
	time64_t last_used;
	unsigned long flags;		/* NM_SA_* */
};

enum { NM_SA_SOFT, NM_SA_HARD };

/* One offloaded policy: a copy of what the TX/RX tables match on. */
struct nm_pol {
	struct list_head node;
	struct rcu_head rcu;
	struct nm_priv *priv;		/* the port (xdo.real_dev) */
	struct xfrm_policy *xp;
	struct xfrm_selector sel;
	u32 priority;
	u8 dir;				/* XFRM_DEV_OFFLOAD_IN/OUT */
	u8 action;			/* XFRM_POLICY_ALLOW/BLOCK */
	struct xfrm_tmpl tmpl;
	u32 if_id;
	struct xfrm_mark mark;
};

struct nm_priv {
	struct net_device *dev;
	struct net_device __rcu *peer;
	struct napi_struct napi;
	struct sk_buff_head rxq;
	struct xdp_rxq_info xdp_rxq;
	struct bpf_prog __rcu *xdp_prog;

	spinlock_t tbl_lock;		/* writers of the tables below */
	DECLARE_HASHTABLE(sa_in, 8);
	struct list_head sa_out;	/* RCU */
	struct list_head pol_out;	/* RCU, by priority */
	struct list_head pol_in;	/* RCU, by priority */
	unsigned int n_sa, n_pol;	/* packet offload (tc.c refuses beside them) */
	unsigned int n_crypto;		/* crypto-offloaded SAs */
	unsigned long sa_seq;
	unsigned int n_tc;		/* tc rules in "hardware" */
	struct list_head tc_rules;	/* RCU, by preference (tc_flower.c) */
	struct net_device __rcu *tap;	/* tap.c, under RTNL */

	atomic64_t stats[NM_STAT_COUNT];
};

static inline void nm_inc(struct nm_priv *p, enum nm_stat s)
{
	atomic64_inc(&p->stats[s]);
}

static inline void nm_add(struct nm_priv *p, enum nm_stat s, u64 v)
{
	atomic64_add(v, &p->stats[s]);
}

/* Parsed L3/L4 header fields of a frame, what selectors match on. */
struct nm_flow {
	u16 family;
	u8 proto;
	__be16 sport, dport;
	xfrm_address_t saddr, daddr;
	unsigned int l3off;		/* from the Ethernet header (after VLAN tags) */
	unsigned int l4off;		/* after IPv4 options / IPv6 extension headers */
	unsigned int l3len;		/* IP header + payload */
	bool frag;			/* IPv4 MF or offset, IPv6 fragment header */
	bool ip_opts;			/* IPv4 options or IPv6 extension headers */
};

/*
 * A driver profile: the behaviours in which drivers (and versions of one
 * driver) differ, each a switch. README.md cites each one's source.
 */
struct nm_profile {
	const char *name;
	bool exact_addr_match;		/* row 1: selector prefix ignored */
	bool tx_sa_miss_cleartext;	/* row 2: TX SA table without a miss rule */
	bool no_frags;			/* row 3: policy/SA rules match non-fragments only */
	bool reqid0_sa_miss;		/* row 6: template reqid 0 meets no SA */
	bool reqid_only_sa;		/* row 5: TX SA by reqid, oldest in use, 2 at most */
	bool replay_esn_only;		/* row 7: anti-replay only with ESN */
	bool seq_restart;		/* row 7: non-ESN TX starts at 1, oseq ignored */
	bool crypto_rx_hw_drop;		/* row 8: crypto RX drops bad ICV/trailer, counts them */
	bool espinudp;			/* row 9: NAT-T (UDP-encapsulated ESP), packet offload, transport */
};

/* profile.c */
extern const struct nm_profile *nm_profile;

static inline const struct nm_profile *nm_prof(void)
{
	return READ_ONCE(nm_profile);
}

/* tap.c: a wire tap, a receive-only device that gets a copy of every
 * frame a port receives from the wire, before the port's RX stage.
 */
void nm_tap_rx(struct nm_priv *priv, const struct sk_buff *skb);
void nm_tap_detach(struct nm_priv *priv, struct list_head *head);

/* main.c */
extern unsigned int nm_sa_budget;
extern int nm_tx_miss_cleartext;
bool nm_is_port(const struct net_device *dev);
struct nm_priv *nm_port_priv(struct net_device *dev);

/* wire.c */
netdev_tx_t nm_start_xmit(struct sk_buff *skb, struct net_device *dev);
void nm_tx(struct nm_priv *priv, struct sk_buff *skb);
int nm_poll(struct napi_struct *napi, int budget);

/* xdp.c */
int nm_bpf(struct net_device *dev, struct netdev_bpf *bpf);
int nm_xdp_xmit(struct net_device *dev, int n, struct xdp_frame **frames,
		u32 flags);
struct sk_buff *nm_xdp_rx(struct nm_priv *priv, struct bpf_prog *prog,
			  struct sk_buff *skb, bool *redirected);

/* ethtool.c */
extern const struct ethtool_ops nm_ethtool_ops;

/* tc.c */
int nm_setup_tc(struct net_device *dev, enum tc_setup_type type,
		void *type_data);

/* tc_flower.c */
struct flow_cls_offload;
int nm_flower(struct nm_priv *priv, struct flow_cls_offload *f);
struct sk_buff *nm_tc_rx(struct nm_priv *priv, struct sk_buff *skb);

/* ipsec.c */
extern const struct xfrmdev_ops nm_xfrmdev_ops;
void nm_ipsec_init(struct nm_priv *priv);
int nm_ipsec_module_init(void);
void nm_ipsec_module_exit(void);
struct nm_sa *nm_sa_in_lookup(struct nm_priv *priv, u16 family,
			      const xfrm_address_t *daddr, __be32 spi);
struct nm_sa *nm_sa_for_tmpl(struct nm_priv *priv, const struct nm_pol *pol,
			     const struct nm_flow *fl);
void nm_sa_count(struct nm_sa *sa, unsigned int bytes);
bool nm_sa_hard_expired(struct nm_sa *sa);

/* match.c */
int nm_parse_flow(const struct sk_buff *skb, struct nm_flow *fl);
int nm_parse_flow_as(const struct sk_buff *skb, struct nm_flow *fl,
		     __be16 proto);
bool nm_sel_match(const struct xfrm_selector *sel, const struct nm_flow *fl,
		  bool exact);
struct nm_pol *nm_pol_lookup(struct list_head *pols, const struct nm_flow *fl);

/* esp_tx.c */
struct sk_buff *nm_esp_encrypt(struct nm_priv *priv, struct nm_sa *sa,
			       struct sk_buff *skb, const struct nm_flow *fl,
			       const u8 *dmac);
int nm_gcm(struct nm_sa *sa, bool enc, __be32 spi, u64 seq,
	   const u8 *iv, u8 *data, unsigned int len);

int nm_crypto_tx(struct nm_priv *priv, struct sk_buff *skb);

/* neigh.c: the outer MAC of tunnel-mode SAs for frames without L2 */
int nm_neigh_dmac(struct nm_priv *priv, const struct nm_sa *sa, u8 *mac);
void nm_neigh_prime(struct nm_priv *priv, const struct nm_sa *sa);

/* esp_rx.c */
struct sk_buff *nm_esp_rx(struct nm_priv *priv, struct sk_buff *skb,
			  struct xfrm_state **xp, u8 *status);
void nm_mark_offloaded(struct sk_buff *skb, struct xfrm_state *x, u8 status);

#endif
