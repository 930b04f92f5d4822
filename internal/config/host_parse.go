// SPDX-License-Identifier: Apache-2.0

package config

import (
	"net/netip"

	"go.yaml.in/yaml/v3"
)

// hostFile is host.yaml as written: every key of the file is declared
// here and in the structs it names, once (docs/overlay.md describes
// them). The order of the fields is the order messages list the keys in.
type hostFile struct {
	Name          hostName           `yaml:"name"`
	Uplinks       *hostUplinks       `yaml:"uplinks"`
	SRIOV         []hostSRIOV        `yaml:"sriov"`
	VTEPs         []hostVTEP         `yaml:"vteps"`
	IPsec         *hostIPsec         `yaml:"ipsec"`
	GuestNetworks []hostGuestNetwork `yaml:"guest-networks"`
	Guests        []hostGuest        `yaml:"guests"`
}

type hostUplinks struct {
	Ports     []portName `yaml:"ports"`
	MTU       mtu        `yaml:"mtu"`
	Bond      *hostBond  `yaml:"bond"`
	Addresses []ifAddr   `yaml:"addresses"`
}

func (hostUplinks) describe() (string, string) { return "uplinks", "ports: [eth0, eth1]" }

type hostBond struct {
	Name    ifname   `yaml:"name"`
	Mode    bondMode `yaml:"mode"`
	MIIMon  miimon   `yaml:"miimon"`
	Primary portName `yaml:"primary"`
}

func (hostBond) describe() (string, string) { return "bond", "name: bond0" }

type hostSRIOV struct {
	PF           portName               `yaml:"pf"`
	VFs          *num[max4096]          `yaml:"vfs"`
	Eswitch      choice[eswitchChoice]  `yaml:"eswitch"`
	FlowSteering choice[steeringChoice] `yaml:"flow-steering-mode"`
	VFIPsec      *flag                  `yaml:"vf-ipsec"`
	VF           []hostVF               `yaml:"vf"`
}

func (hostSRIOV) describe() (string, string) { return "physical function", "pf: enp3s0f0np0" }

type hostVF struct {
	Index    num[max4095]          `yaml:"index"`
	MAC      mac                   `yaml:"mac"`
	VLAN     *num[max4094]         `yaml:"vlan"`
	Trust    *flag                 `yaml:"trust"`
	SpoofChk *flag                 `yaml:"spoofchk"`
	IPsec    []choice[vfCapChoice] `yaml:"ipsec"`
}

func (hostVF) describe() (string, string) { return "VF", "index: 0" }

type hostVTEP struct {
	Name          ifname                 `yaml:"name"`
	Type          choice[vtepTypeChoice] `yaml:"type"`
	VNI           vni                    `yaml:"vni"`
	Local         ipAddr                 `yaml:"local"`
	Port          port                   `yaml:"port"`
	Remotes       []hostRemote           `yaml:"remotes"`
	MTU           mtu                    `yaml:"mtu"`
	GeneveOptions geneveOptions          `yaml:"geneve-options"`
	Addresses     []ifAddr               `yaml:"addresses"`
}

func (hostVTEP) describe() (string, string) { return "VTEP", "name: vx0" }

// hostRemote is a remote VTEP: an address, or address: and via:.
type hostRemote struct {
	Address ipAddr `yaml:"address"`
	Via     ipAddr `yaml:"via"`
}

func (hostRemote) describe() (string, string) { return "remote VTEP", "address: 192.168.80.3" }

// shorthand: a bare address stands for {address: ...}.
func (hostRemote) shorthand() string { return "address" }

type hostIPsec struct {
	Keys              keyFile              `yaml:"keys"`
	Peers             []hostPeer           `yaml:"peers"`
	UnsafeBondOffload flag                 `yaml:"unsafe-bond-offload"`
	Keying            choice[keyingChoice] `yaml:"keying"`
	IKE               *ikeFile             `yaml:"ike"`
}

func (hostIPsec) describe() (string, string) { return "ipsec", "keys: /etc/sluice/host.keys" }

type hostPeer struct {
	Name         peerName                 `yaml:"name"`
	Local        ipAddr                   `yaml:"local"`
	Remote       ipAddr                   `yaml:"remote"`
	Mode         choice[modeChoice]       `yaml:"mode"`
	KeyBits      keyBits                  `yaml:"key-bits"`
	SPIOut       spi                      `yaml:"spi-out"`
	SPIIn        spi                      `yaml:"spi-in"`
	ReqidOut     reqid                    `yaml:"reqid-out"`
	ReqidIn      reqid                    `yaml:"reqid-in"`
	ESN          flag                     `yaml:"esn"`
	ReplayWindow num[maxReplay]           `yaml:"replay-window"`
	Offload      choice[offloadChoice]    `yaml:"offload"`
	OffloadOut   choice[offloadDirChoice] `yaml:"offload-out"`
	OffloadIn    choice[offloadDirChoice] `yaml:"offload-in"`
	OffloadDev   ifname                   `yaml:"offload-dev"`
	Selectors    []hostSelector           `yaml:"selectors"`
	Priority     num[maxU32]              `yaml:"priority"`
	Keying       choice[keyingChoice]     `yaml:"keying"`
	LocalID      nonEmpty                 `yaml:"local-id"`
	RemoteID     nonEmpty                 `yaml:"remote-id"`
}

func (hostPeer) describe() (string, string) { return "peer", "name: node-b" }

type hostSelector struct {
	Local  ipPrefix `yaml:"local"`
	Remote ipPrefix `yaml:"remote"`
}

func (hostSelector) describe() (string, string) { return "selector", "local: 10.0.0.0/24" }

// hostMeta is where things are in the document, for validation.
type hostMeta struct {
	rootLine int
	uplinks  item
	bond     item
	ipsec    item
	sriov    []item
	vfs      [][]item
	vteps    []item
	remotes  [][]item
	peers    []item
	sels     [][]item
	// portLines and addrLines hold the line of each list element as
	// written.
	portLines, addrLines []int
	guests               guestMeta
}

// host decodes the root mapping.
func (p *parser) host(root *yaml.Node) (*Host, *hostMeta) {
	var f hostFile
	p.decode(root, &f)
	h := &Host{File: p.file, Name: string(f.Name)}
	m := &hostMeta{rootLine: root.Line}
	if u := f.Uplinks; u != nil {
		m.uplinks = p.itemAt("uplinks")
		h.Uplinks = &Uplinks{Ports: strs(u.Ports), MTU: int(u.MTU), Addresses: prefixes(u.Addresses), Line: m.uplinks.line}
		for _, it := range p.itemsOf("uplinks.ports", len(u.Ports)) {
			m.portLines = append(m.portLines, it.line)
		}
		for _, it := range p.itemsOf("uplinks.addresses", len(u.Addresses)) {
			m.addrLines = append(m.addrLines, it.line)
		}
		if b := u.Bond; b != nil {
			m.bond = p.itemAt("uplinks.bond")
			h.Uplinks.Bond = &Bond{Name: string(b.Name), Mode: string(b.Mode), MIIMon: int(b.MIIMon), Primary: string(b.Primary), Line: m.bond.line}
		}
	}
	m.sriov = p.itemsOf("sriov", len(f.SRIOV))
	for i, s := range f.SRIOV {
		it := m.sriov[i]
		vfs := p.itemsOf(it.path+".vf", len(s.VF))
		x := SRIOV{PF: string(s.PF), VFs: optInt(s.VFs), Eswitch: string(s.Eswitch), FlowSteering: string(s.FlowSteering),
			VFIPsec: optBool(s.VFIPsec), Line: it.line}
		for j, v := range s.VF {
			vf := VFConfig{Index: int(v.Index), MAC: string(v.MAC), VLAN: optInt(v.VLAN), Trust: optBool(v.Trust),
				SpoofChk: optBool(v.SpoofChk), IPsec: strs(v.IPsec), Line: vfs[j].line}
			if !p.given[vfs[j].path+".index"] {
				vf.Index = -1
			}
			x.VF = append(x.VF, vf)
		}
		h.SRIOV = append(h.SRIOV, x)
		m.vfs = append(m.vfs, vfs)
	}
	m.vteps = p.itemsOf("vteps", len(f.VTEPs))
	for i, v := range f.VTEPs {
		rs := p.itemsOf(m.vteps[i].path+".remotes", len(v.Remotes))
		x := VTEP{Name: string(v.Name), Type: string(v.Type), VNI: uint32(v.VNI), Local: netip.Addr(v.Local), Port: uint16(v.Port),
			MTU: int(v.MTU), GeneveOptions: int(v.GeneveOptions), Addresses: prefixes(v.Addresses), Line: m.vteps[i].line}
		for j, r := range v.Remotes {
			x.Remotes = append(x.Remotes, Remote{Address: netip.Addr(r.Address), Via: netip.Addr(r.Via), Line: rs[j].line})
		}
		h.VTEPs = append(h.VTEPs, x)
		m.remotes = append(m.remotes, rs)
	}
	if s := f.IPsec; s != nil {
		m.ipsec = p.itemAt("ipsec")
		h.IPsec = &IPsec{Keys: string(s.Keys), UnsafeBondOffload: bool(s.UnsafeBondOffload), Keying: string(s.Keying), IKE: p.ike(s.IKE)}
		if p.given["ipsec.keys"] {
			h.IPsec.KeysLine = p.lines["ipsec.keys"]
		}
		m.peers = p.itemsOf("ipsec.peers", len(s.Peers))
		for i, x := range s.Peers {
			sels := p.itemsOf(m.peers[i].path+".selectors", len(x.Selectors))
			pr := Peer{Name: string(x.Name), Local: netip.Addr(x.Local), Remote: netip.Addr(x.Remote), Mode: string(x.Mode),
				KeyBits: int(x.KeyBits), SPIOut: uint32(x.SPIOut), SPIIn: uint32(x.SPIIn), ReqidOut: uint32(x.ReqidOut),
				ReqidIn: uint32(x.ReqidIn), ESN: bool(x.ESN), ReplayWindow: int(x.ReplayWindow), Offload: string(x.Offload),
				OffloadOut: string(x.OffloadOut), OffloadIn: string(x.OffloadIn), OffloadDev: string(x.OffloadDev),
				Priority: uint32(x.Priority), Keying: string(x.Keying), LocalID: string(x.LocalID), RemoteID: string(x.RemoteID),
				Line: m.peers[i].line}
			for j, sel := range x.Selectors {
				pr.Selectors = append(pr.Selectors, Selector{Local: netip.Prefix(sel.Local), Remote: netip.Prefix(sel.Remote), Line: sels[j].line})
			}
			h.IPsec.Peers = append(h.IPsec.Peers, pr)
			m.sels = append(m.sels, sels)
		}
	}
	p.guests(&f, h, &m.guests)
	return h, m
}

// itemAt is the mapping at path (a key of the file), for messages.
func (p *parser) itemAt(path string) item { return item{path: path, line: p.lines[path]} }

// itemsOf is the entries of the list at path that were decoded (n of
// them: fewer than recorded when the decode was cut short).
func (p *parser) itemsOf(path string, n int) []item {
	its := p.items[path]
	return its[:min(n, len(its))]
}

func strs[T ~string](xs []T) []string {
	var out []string
	for _, x := range xs {
		out = append(out, string(x))
	}
	return out
}

func prefixes(xs []ifAddr) []netip.Prefix {
	var out []netip.Prefix
	for _, x := range xs {
		out = append(out, netip.Prefix(x))
	}
	return out
}

func optInt[L limit](v *num[L]) *int {
	if v == nil {
		return nil
	}
	x := int(*v)
	return &x
}

func optBool(v *flag) *bool {
	if v == nil {
		return nil
	}
	b := bool(*v)
	return &b
}
