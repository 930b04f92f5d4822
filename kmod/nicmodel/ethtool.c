// SPDX-License-Identifier: GPL-2.0
/*
 * nicmodel: ethtool driver info and counters (ethtool -S).
 *
 * Counter names follow the direction and the reason, so a test can tell
 * "encrypted" from "sent in cleartext" from "dropped because ...".
 * *_cleartext_packets count IP packets that are not ESP: on a port whose
 * peer should only ever see ESP, rx_cleartext_packets is the leak count
 * of the wire (non-IP frames, ARP, are counted apart).
 */
#include <linux/ethtool.h>
#include "nicmodel.h"

const char nm_stat_names[NM_STAT_COUNT][ETH_GSTRING_LEN] = {
	[NM_TX_IPSEC_PACKETS] = "tx_ipsec_packets",
	[NM_TX_IPSEC_BYTES] = "tx_ipsec_bytes",
	[NM_TX_CLEARTEXT_PACKETS] = "tx_cleartext_packets",
	[NM_TX_NON_IP_PACKETS] = "tx_non_ip_packets",
	[NM_TX_LINK_LOCAL_PACKETS] = "tx_link_local_packets",
	[NM_TX_DROP_NO_STATE] = "tx_ipsec_drop_no_state",
	[NM_TX_DROP_POLICY_BLOCK] = "tx_ipsec_drop_policy_block",
	[NM_TX_DROP_HARD_LIMIT] = "tx_ipsec_drop_hard_limit",
	[NM_TX_DROP_SEQ_OVERFLOW] = "tx_ipsec_drop_seq_overflow",
	[NM_TX_DROP_OVERSIZE] = "tx_drop_oversize",
	[NM_TX_DROP_ERROR] = "tx_drop_error",
	[NM_RX_IPSEC_PACKETS] = "rx_ipsec_packets",
	[NM_RX_IPSEC_BYTES] = "rx_ipsec_bytes",
	[NM_RX_ESP_NO_SA] = "rx_esp_no_sa",
	[NM_RX_DROP_AUTH] = "rx_ipsec_drop_auth",
	[NM_RX_DROP_REPLAY] = "rx_ipsec_drop_replay",
	[NM_RX_DROP_HARD_LIMIT] = "rx_ipsec_drop_hard_limit",
	[NM_RX_DROP_SELECTOR] = "rx_ipsec_drop_selector",
	[NM_RX_DROP_MALFORMED] = "rx_ipsec_drop_malformed",
	[NM_RX_DROP_OVERSIZE] = "rx_drop_oversize",
	[NM_RX_DROP_QUEUE_FULL] = "rx_drop_queue_full",
	[NM_RX_CLEARTEXT_PACKETS] = "rx_cleartext_packets",
	[NM_RX_NON_IP_PACKETS] = "rx_non_ip_packets",
	[NM_TX_CRYPTO_PACKETS] = "tx_ipsec_crypto_packets",
	[NM_TX_CRYPTO_BYTES] = "tx_ipsec_crypto_bytes",
	[NM_TX_CRYPTO_DROP_ERROR] = "tx_ipsec_crypto_drop_error",
	[NM_RX_CRYPTO_PACKETS] = "rx_ipsec_crypto_packets",
	[NM_RX_CRYPTO_BYTES] = "rx_ipsec_crypto_bytes",
	[NM_RX_CRYPTO_AUTH_FAIL] = "rx_ipsec_crypto_auth_fail",
	[NM_RX_CRYPTO_BAD_TRAILER] = "rx_ipsec_crypto_bad_trailer",
	[NM_XDP_PASS] = "xdp_pass",
	[NM_XDP_DROP] = "xdp_drop",
	[NM_XDP_TX] = "xdp_tx",
	[NM_XDP_REDIRECT] = "xdp_redirect",
	[NM_XDP_ABORTED] = "xdp_aborted",
	[NM_XDP_XMIT] = "xdp_xmit",
	[NM_TX_PACKETS] = "tx_packets",
	[NM_TX_BYTES] = "tx_bytes",
	[NM_RX_PACKETS] = "rx_packets",
	[NM_RX_BYTES] = "rx_bytes",
	[NM_TX_DROPPED] = "tx_dropped",
	[NM_RX_DROPPED] = "rx_dropped",
	[NM_RX_TC_HITS] = "rx_tc_hits",
	[NM_RX_TC_REDIRECT] = "rx_tc_redirect",
	[NM_RX_TC_DROP] = "rx_tc_drop",
	[NM_TX_DROP_NO_NEIGH] = "tx_ipsec_drop_no_neigh",
};

/* Gauges after the counters. */
static const char nm_gauge_names[][ETH_GSTRING_LEN] = {
	"ipsec_sa_count",
	"ipsec_policy_count",
	"tc_rule_count",
};

static void nm_get_drvinfo(struct net_device *dev,
			   struct ethtool_drvinfo *info)
{
	strscpy(info->driver, NM_DRV_NAME, sizeof(info->driver));
	strscpy(info->version, NM_DRV_VERSION, sizeof(info->version));
	strscpy(info->bus_info, "nicmodel", sizeof(info->bus_info));
}

static int nm_get_sset_count(struct net_device *dev, int sset)
{
	if (sset != ETH_SS_STATS)
		return -EOPNOTSUPP;
	return NM_STAT_COUNT + ARRAY_SIZE(nm_gauge_names);
}

static void nm_get_strings(struct net_device *dev, u32 sset, u8 *buf)
{
	if (sset != ETH_SS_STATS)
		return;
	memcpy(buf, nm_stat_names, sizeof(nm_stat_names));
	memcpy(buf + sizeof(nm_stat_names), nm_gauge_names,
	       sizeof(nm_gauge_names));
}

static void nm_get_ethtool_stats(struct net_device *dev,
				 struct ethtool_stats *stats, u64 *data)
{
	struct nm_priv *priv = netdev_priv(dev);
	int i;

	for (i = 0; i < NM_STAT_COUNT; i++)
		data[i] = atomic64_read(&priv->stats[i]);
	data[i++] = READ_ONCE(priv->n_sa) + READ_ONCE(priv->n_crypto);
	data[i++] = READ_ONCE(priv->n_pol);
	data[i++] = READ_ONCE(priv->n_tc);
}

const struct ethtool_ops nm_ethtool_ops = {
	.get_drvinfo = nm_get_drvinfo,
	.get_link = ethtool_op_get_link,
	.get_sset_count = nm_get_sset_count,
	.get_strings = nm_get_strings,
	.get_ethtool_stats = nm_get_ethtool_stats,
};
