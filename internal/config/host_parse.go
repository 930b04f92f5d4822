// SPDX-License-Identifier: Apache-2.0

package config

import (
	"go.yaml.in/yaml/v3"
)

// hostFile is host.yaml as written: every key of the file is declared
// here and in the structs it names, once (docs/overlay.md describes
// them). The order of the fields is the order messages list the keys in;
// fill copies them by name into Host and the types it holds.
type hostFile struct {
	Name          usableName         `yaml:"name"`
	Uplinks       *hostUplinks       `yaml:"uplinks" example:"ports: [eth0, eth1]"`
	SRIOV         []hostSRIOV        `yaml:"sriov" what:"physical function" example:"pf: enp3s0f0np0"`
	VTEPs         []hostVTEP         `yaml:"vteps" what:"VTEP" example:"name: vx0"`
	IPsec         *hostIPsec         `yaml:"ipsec" example:"keys: /etc/sluice/host.keys"`
	GuestNetworks []hostGuestNetwork `yaml:"guest-networks" what:"guest network" example:"name: tenant-a"`
	Guests        []hostGuest        `yaml:"guests" what:"guest" example:"name: vm1"`
}

type hostUplinks struct {
	Ports     []portName `yaml:"ports" what:"port (a netdev name or PCI address)"`
	MTU       mtu        `yaml:"mtu"`
	Bond      *hostBond  `yaml:"bond" example:"name: bond0"`
	Addresses []ifAddr   `yaml:"addresses" what:"address with its prefix length (such as 192.168.70.2/24)"`
}

type hostBond struct {
	Name    ifname   `yaml:"name"`
	Mode    bondMode `yaml:"mode" default:"active-backup"`
	MIIMon  miimon   `yaml:"miimon" default:"100"`
	Primary portName `yaml:"primary"`
}

type hostSRIOV struct {
	PF           portName      `yaml:"pf"`
	VFs          *num[max4096] `yaml:"vfs"`
	Eswitch      eswitchMode   `yaml:"eswitch"`
	FlowSteering steeringMode  `yaml:"flow-steering-mode"`
	VFIPsec      *flag         `yaml:"vf-ipsec"`
	VF           []hostVF      `yaml:"vf" what:"VF" example:"index: 0"`
}

type hostVF struct {
	Index    num[max4095]  `yaml:"index"`
	MAC      mac           `yaml:"mac"`
	VLAN     *num[max4094] `yaml:"vlan"`
	Trust    *flag         `yaml:"trust"`
	SpoofChk *flag         `yaml:"spoofchk"`
	IPsec    []vfCap       `yaml:"ipsec"`
}

type hostVTEP struct {
	Name          ifname        `yaml:"name"`
	Type          vtepType      `yaml:"type" default:"vxlan"`
	VNI           vni           `yaml:"vni"`
	Local         ipAddr        `yaml:"local"`
	Port          port          `yaml:"port"`
	Remotes       []hostRemote  `yaml:"remotes" what:"remote VTEP" example:"address: 192.168.80.3"`
	MTU           mtu           `yaml:"mtu"`
	GeneveOptions geneveOptions `yaml:"geneve-options"`
	Addresses     []ifAddr      `yaml:"addresses" what:"address with its prefix length (such as 192.168.70.2/24)"`
}

// hostRemote is a remote VTEP: an address, or address: and via:.
type hostRemote struct {
	Address ipAddr `yaml:"address"`
	Via     ipAddr `yaml:"via"`
}

// shorthand: a bare address stands for {address: ...}.
func (hostRemote) Shorthand() string { return "address" }

type hostIPsec struct {
	Keys              keyFile    `yaml:"keys"`
	Peers             []hostPeer `yaml:"peers" what:"peer" example:"name: node-b"`
	UnsafeBondOffload flag       `yaml:"unsafe-bond-offload"`
	Keying            keyingMode `yaml:"keying" default:"manual"` // each peer's, unless it says
	IKE               *ikeFile   `yaml:"ike" example:"psk: /etc/sluice/ike.psk"`
}

type hostPeer struct {
	Name         peerName       `yaml:"name"`
	Local        ipAddr         `yaml:"local"`
	Remote       ipAddr         `yaml:"remote"`
	Mode         ipsecMode      `yaml:"mode" default:"transport"`
	KeyBits      keyBits        `yaml:"key-bits" default:"128"`
	SPIOut       spi            `yaml:"spi-out"`
	SPIIn        spi            `yaml:"spi-in"`
	ReqidOut     reqid          `yaml:"reqid-out"`
	ReqidIn      reqid          `yaml:"reqid-in"`
	ESN          flag           `yaml:"esn"`
	ReplayWindow num[maxReplay] `yaml:"replay-window"`
	Offload      offloadSetting `yaml:"offload" default:"none"`
	OffloadOut   offloadDir     `yaml:"offload-out"`
	OffloadIn    offloadDir     `yaml:"offload-in"`
	OffloadDev   ifname         `yaml:"offload-dev"`
	Selectors    []hostSelector `yaml:"selectors" what:"selector" example:"local: 10.0.0.0/24"`
	Priority     num[maxU32]    `yaml:"priority"`
	Keying       keyingMode     `yaml:"keying"`
	LocalID      nonEmpty       `yaml:"local-id"`
	RemoteID     nonEmpty       `yaml:"remote-id"`
	AcceptLeaks  []nonEmpty     `yaml:"accept-leaks" what:"driver behaviour name (such as exact-selector-match)"`
}

type hostSelector struct {
	Local  ipPrefix `yaml:"local"`
	Remote ipPrefix `yaml:"remote"`
}

// hostMeta is where things are in the document, for validation.
type hostMeta struct {
	rootLine int
	uplinks  item
	bond     item
	ipsec    item
	sriov    []item
	vteps    []item
	peers    []item
	// portLines and addrLines hold the line of each list element as
	// written.
	portLines, addrLines []int
	guests               guestMeta
}

// host is where h's sections and entries are, h read from root.
func (p *parser) host(root *yaml.Node, h *Host) *hostMeta {
	m := &hostMeta{rootLine: root.Line}
	if u := h.Uplinks; u != nil {
		m.uplinks = p.ItemAt("uplinks")
		for _, it := range p.ItemsOf("uplinks.ports", len(u.Ports)) {
			m.portLines = append(m.portLines, it.Line)
		}
		for _, it := range p.ItemsOf("uplinks.addresses", len(u.Addresses)) {
			m.addrLines = append(m.addrLines, it.Line)
		}
		if u.Bond != nil {
			m.bond = p.ItemAt("uplinks.bond")
		}
	}
	m.sriov = p.ItemsOf("sriov", len(h.SRIOV))
	m.vteps = p.ItemsOf("vteps", len(h.VTEPs))
	if s := h.IPsec; s != nil {
		m.ipsec = p.ItemAt("ipsec")
		if p.Given["ipsec.keys"] {
			s.KeysLine = p.Lines["ipsec.keys"]
		}
		m.peers = p.ItemsOf("ipsec.peers", len(s.Peers))
	}
	m.guests.nets = p.ItemsOf("guest-networks", len(h.GuestNetworks))
	m.guests.guests = p.ItemsOf("guests", len(h.Guests))
	return m
}
