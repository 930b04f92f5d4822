// SPDX-License-Identifier: Apache-2.0

package api

// FlowerStatus is the hardware tier's state (docs/flower.md).
type FlowerStatus struct {
	Enabled        bool   `json:"enabled"`
	SkipHW         bool   `json:"skip_hw,omitempty"` // lab: rules in software
	RulesInstalled int    `json:"rules_installed"`
	RulesAdded     uint64 `json:"rules_added"`
	RulesRemoved   uint64 `json:"rules_removed"`
	RulesRefused   uint64 `json:"rules_refused"`
	// RulesWithdrawn: removed straight from an XFRM event (an SA or
	// policy gone), ahead of the derive.
	RulesWithdrawn uint64         `json:"rules_withdrawn"`
	Promotions     uint64         `json:"promotions"`
	Demotions      uint64         `json:"demotions"`
	Devices        []FlowerDevice `json:"devices,omitempty"`
	Rules          []FlowerRule   `json:"rules,omitempty"`
	Skips          []FlowerSkip   `json:"skips,omitempty"`
}

// FlowerDevice is one device/chain the tier probed.
type FlowerDevice struct {
	Name       string `json:"name"`
	Chain      uint32 `json:"chain"`
	HardwareOK bool   `json:"hardware_ok"`
	Busy       bool   `json:"busy,omitempty"` // mlx5: IPsec packet offload and tc offload on one netdev
	Message    string `json:"message,omitempty"`
}

// FlowerRule is one installed forwarding rule.
type FlowerRule struct {
	PolicyIndex uint32 `json:"policy_index"`
	Dir         string `json:"dir"`
	Port        string `json:"port"`
	Rule        string `json:"rule"`
	// Reason says why the NIC serves this tunnel (placement's reading).
	Reason string `json:"reason,omitempty"`
}

// FlowerSkip is a policy the tier leaves to XDP or the kernel, and why.
type FlowerSkip struct {
	PolicyIndex uint32 `json:"policy_index"`
	Port        string `json:"port"`
	Reason      string `json:"reason"`
}
