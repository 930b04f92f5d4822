// SPDX-License-Identifier: Apache-2.0

package xfrm

import "github.com/vishvananda/netlink/nl"

// The layout of the XFRM uapi structs (include/uapi/linux/xfrm.h) that
// sluice reads and writes byte by byte: every offset is named here, once,
// and the decoder and the encoders both use these names. Sizes come from
// vishvananda/netlink/nl where it has them; the offsets were checked with
// offsetof() against the installed header (x86-64 and arm64 agree: the
// structs have no pointer-sized fields). Offsets of a nested struct are
// relative to that struct; the outer struct names where it starts.

// Sizes, padding included.
const (
	xfrmAddrLen       = nl.SizeofXfrmAddress        // xfrm_address_t
	xfrmSelectorLen   = nl.SizeofXfrmSelector       // struct xfrm_selector
	xfrmPolicyInfoLen = nl.SizeofXfrmUserpolicyInfo // struct xfrm_userpolicy_info
	xfrmPolicyIDLen   = nl.SizeofXfrmUserpolicyId   // struct xfrm_userpolicy_id
	xfrmTmplLen       = nl.SizeofXfrmUserTmpl       // struct xfrm_user_tmpl
	xfrmSAInfoLen     = nl.SizeofXfrmUsersaInfo     // struct xfrm_usersa_info
	xfrmSAIDLen       = nl.SizeofXfrmUsersaId       // struct xfrm_usersa_id
	xfrmExpireLen     = nl.SizeofXfrmUserExpire     // struct xfrm_user_expire: usersa_info, hard, padding
	xfrmPolExpireLen  = 176                         // struct xfrm_user_polexpire: userpolicy_info, hard, padding
	xfrmMarkLen       = nl.SizeofXfrmMark           // struct xfrm_mark
	xfrmAlgoLen       = nl.SizeofXfrmAlgo           // struct xfrm_algo, the key not counted
	xfrmAlgoAEADLen   = nl.SizeofXfrmAlgoAEAD       // struct xfrm_algo_aead (and _auth), the key not counted
	xfrmReplayESNLen  = nl.SizeofXfrmReplayStateEsn // struct xfrm_replay_state_esn, the bitmap not counted
	xfrmPolicyTypeLen = 6                           // struct xfrm_userpolicy_type {u8 type; u16 reserved1; u8 reserved2}
	xfrmPolicyDefLen  = 3                           // struct xfrm_userpolicy_default {u8 in, fwd, out}
	xfrmAlgoNameLen   = 64                          // char alg_name[64]
	// xfrmOffloadLen is sizeof(struct xfrm_user_offload): int ifindex, __u8
	// flags, then 3 bytes of padding the kernel insists on (its attribute
	// policy requires the full 8 bytes).
	xfrmOffloadLen = 8

	xfrmPolicyTypeSub = 1 // XFRM_POLICY_TYPE_SUB
)

// struct xfrm_selector.
const (
	selDaddr    = 0  // xfrm_address_t
	selSaddr    = 16 // xfrm_address_t
	selDport    = 32 // __be16
	selDportMsk = 34 // __be16
	selSport    = 36 // __be16
	selSportMsk = 38 // __be16
	selFamily   = 40 // __u16
	selPlenD    = 42 // __u8 prefixlen_d
	selPlenS    = 43 // __u8 prefixlen_s
	selProto    = 44 // __u8
	selIfindex  = 48 // int
)

// struct xfrm_lifetime_cfg: eight __u64 limits.
const (
	lftSoftByte   = 0
	lftHardByte   = 8
	lftSoftPacket = 16
	lftHardPacket = 24
	lftSoftAdd    = 32 // soft_add_expires_seconds
	lftHardAdd    = 40 // hard_add_expires_seconds
	lftSoftUse    = 48
	lftHardUse    = 56
)

// struct xfrm_lifetime_cur: four __u64 counters.
const (
	curBytes   = 0
	curPackets = 8
	curAdd     = 16 // add_time
	curUse     = 24 // use_time
)

// struct xfrm_stats: three __u32.
const (
	statsReplayWindow    = 0
	statsReplay          = 4
	statsIntegrityFailed = 8
)

// struct xfrm_userpolicy_info.
const (
	polSel      = 0   // struct xfrm_selector
	polLft      = 56  // struct xfrm_lifetime_cfg
	polCurlft   = 120 // struct xfrm_lifetime_cur
	polPriority = 152 // __u32
	polIndex    = 156 // __u32
	polDir      = 160 // __u8
	polAction   = 161 // __u8
)

// struct xfrm_user_expire and xfrm_user_polexpire: the SA or policy, then
// __u8 hard.
const (
	expireHard    = xfrmSAInfoLen
	polExpireHard = xfrmPolicyInfoLen
)

// struct xfrm_userpolicy_id.
const (
	polIDIndex = 56 // __u32 (the selector before it is unused by a lookup by index)
	polIDDir   = 60 // __u8
)

// struct xfrm_user_tmpl.
const (
	tmplDaddr    = 0  // xfrm_id.daddr
	tmplSPI      = 16 // xfrm_id.spi, __be32
	tmplProto    = 20 // xfrm_id.proto
	tmplFamily   = 24 // __u16
	tmplSaddr    = 28 // xfrm_address_t
	tmplReqid    = 44 // __u32
	tmplMode     = 48 // __u8
	tmplOptional = 50 // __u8
	tmplAalgos   = 52 // __u32 bitmaps of allowed algorithms
	tmplEalgos   = 56
	tmplCalgos   = 60
)

// struct xfrm_usersa_info.
const (
	saSel          = 0   // struct xfrm_selector
	saDaddr        = 56  // xfrm_id.daddr
	saSPI          = 72  // xfrm_id.spi, __be32
	saProto        = 76  // xfrm_id.proto
	saSaddr        = 80  // xfrm_address_t
	saLft          = 96  // struct xfrm_lifetime_cfg
	saCurlft       = 160 // struct xfrm_lifetime_cur
	saStats        = 192 // struct xfrm_stats
	saReqid        = 208 // __u32
	saFamily       = 212 // __u16
	saMode         = 214 // __u8
	saReplayWindow = 215 // __u8 (0 with ESN: the window is in XFRMA_REPLAY_ESN_VAL)
	saFlags        = 216 // __u8 XFRM_STATE_*
)

// struct xfrm_usersa_id.
const (
	saIDDaddr  = 0  // xfrm_address_t
	saIDSPI    = 16 // __be32
	saIDFamily = 20 // __u16
	saIDProto  = 22 // __u8
)

// struct xfrm_algo, xfrm_algo_auth and xfrm_algo_aead: the name, the key
// length in bits, then (auth, aead) the truncation or ICV length in bits;
// the key follows the header (algoLen or algoAEADLen bytes).
const (
	algoNameOff = 0
	algoKeyLen  = 64 // __u32 bits
	algoICVLen  = 68 // __u32 bits: alg_trunc_len (auth) or alg_icv_len (aead)
)

// struct xfrm_replay_state_esn; the bitmap follows the header.
const (
	replayESNBmpLen = 0  // __u32, in 32-bit words
	replayESNOseq   = 4  // __u32 oseq: the last sequence number sent (low 32 bits)
	replayESNSeq    = 8  // __u32 seq: the highest received (low 32 bits)
	replayESNOseqHi = 12 // __u32 oseq_hi
	replayESNSeqHi  = 16 // __u32 seq_hi
	replayESNWindow = 20 // __u32 replay_window
)

// struct xfrm_replay_state (XFRMA_REPLAY_VAL, without ESN).
const (
	replayOseq = 0 // __u32
	replaySeq  = 4 // __u32
	replayLen  = 8 // oseq and seq; the bitmap follows
)

// struct xfrm_encap_tmpl.
const (
	encapType  = 0 // __u16
	encapSport = 2 // __be16
	encapDport = 4 // __be16
	encapOA    = 8 // xfrm_address_t
)

// struct xfrm_user_offload.
const (
	offloadIfindex = 0 // int
	offloadFlags   = 4 // __u8
)

// struct xfrm_mark.
const (
	markValue = 0 // __u32
	markMask  = 4 // __u32
)

// struct xfrm_userpolicy_type and struct xfrm_usersa_flush.
const (
	policyTypeType = 0 // __u8 type
	flushProto     = 0 // __u8 proto
)

// struct xfrm_user_migrate, one per moved template in XFRMA_MIGRATE.
const (
	umOldDaddr         = 0  // xfrm_address_t
	umOldSaddr         = 16 // xfrm_address_t
	umNewDaddr         = 32 // xfrm_address_t
	umNewSaddr         = 48 // xfrm_address_t
	umProto            = 64 // __u8
	umMode             = 65 // __u8
	umReqid            = 68 // __u32
	umOldFamily        = 72 // __u16
	umNewFamily        = 74 // __u16
	xfrmUserMigrateLen = 76
)
