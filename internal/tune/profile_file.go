// SPDX-License-Identifier: Apache-2.0

package tune

import (
	"fmt"

	"sluice/internal/yamldoc"
)

// tuneFile is tune.yaml as written: every key of the file is declared
// here, once (docs/tune.md describes them), and yamldoc reads it as it
// reads gateway.yaml and host.yaml. The order of the fields is the order
// messages list the keys in; Parse fills Profile from it by field name.
type tuneFile struct {
	Sysctls    map[string]yamldoc.Text   `yaml:"sysctls" example:"net.core.busy_poll: 50"`
	THP        yamldoc.Str[thpRule]      `yaml:"thp"`
	Cmdline    map[string]yamldoc.Text   `yaml:"cmdline" example:"isolcpus: 4-23"`
	DaemonCPUs yamldoc.Text              `yaml:"daemon-cpus"`
	Interfaces map[string]*interfaceFile `yaml:"interfaces" example:"p0: {rx-queues: 8, cpus: 4-11}"`
}

// interfaceFile is one entry of interfaces: (filled into Interface).
type interfaceFile struct {
	RxQueues       yamldoc.Num[yamldoc.MaxU32] `yaml:"rx-queues"`
	CPUs           yamldoc.Text                `yaml:"cpus"`
	RSSEqual       yamldoc.Num[yamldoc.MaxU32] `yaml:"rss-equal"`
	Rings          *ringsFile                  `yaml:"rings" example:"rx: 8192"`
	Coalesce       *coalesceFile               `yaml:"coalesce" example:"rx-usecs: 8"`
	Features       map[string]yamldoc.Flag     `yaml:"features" example:"gro: false"`
	PrivateFlags   map[string]yamldoc.Flag     `yaml:"private-flags" example:"rx_striding_rq: true"`
	FlowControl    *flowControlFile            `yaml:"flow-control" example:"rx: false"`
	PCIeMaxReadReq yamldoc.Num[mrrsRule]       `yaml:"pcie-max-read-req"`
}

type ringsFile struct {
	RX yamldoc.Num[yamldoc.MaxU32] `yaml:"rx"`
	TX yamldoc.Num[yamldoc.MaxU32] `yaml:"tx"`
}

type coalesceFile struct {
	AdaptiveRX *yamldoc.Flag                `yaml:"adaptive-rx"`
	AdaptiveTX *yamldoc.Flag                `yaml:"adaptive-tx"`
	RXUsecs    *yamldoc.Num[yamldoc.MaxU32] `yaml:"rx-usecs"`
	RXFrames   *yamldoc.Num[yamldoc.MaxU32] `yaml:"rx-frames"`
	TXUsecs    *yamldoc.Num[yamldoc.MaxU32] `yaml:"tx-usecs"`
	TXFrames   *yamldoc.Num[yamldoc.MaxU32] `yaml:"tx-frames"`
}

type flowControlFile struct {
	RX *yamldoc.Flag `yaml:"rx"`
	TX *yamldoc.Flag `yaml:"tx"`
}

// thpRule is thp: the transparent hugepage mode.
type thpRule struct{}

func (thpRule) Want() string { return "always, madvise or never" }
func (thpRule) Check(s string) (string, string) {
	switch s {
	case "", "always", "madvise", "never":
		return s, ""
	}
	return "", fmt.Sprintf("%q: want always, madvise or never", s)
}

// mrrsRule is pcie-max-read-req: a PCIe maximum read request size.
type mrrsRule struct{}

func (mrrsRule) Max() uint64 { return 4096 }
func (mrrsRule) Refuse(v uint64) string {
	if _, ok := mrrsValues[int(v)]; v != 0 && !ok {
		return fmt.Sprintf("%d: want 128, 256, 512, 1024, 2048 or 4096", v)
	}
	return ""
}
