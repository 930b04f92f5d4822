// SPDX-License-Identifier: Apache-2.0

package config

import (
	"os"
	"path/filepath"
	"time"
)

// Keying: how a peer's SAs get their keys.
const (
	// KeyingManual installs SAs from the key file (the ConnectX-6 SR-IOV guide's walk-through).
	// The same key comes back whenever the SA is created again, with the
	// sequence number at 1: see docs/overlay.md "Keying".
	KeyingManual = "manual"
	// KeyingIKE has strongSwan (charon, over VICI) negotiate the SAs, choose
	// their SPIs and rekey them.
	KeyingIKE = "ike"
)

// IKE limits (DefaultVICI: defaults.go).
const (
	// MinRekeyTime keeps rekeying from being a denial of service on
	// oneself; short times are for the rekey bench.
	MinRekeyTime = 5 * time.Second
)

// IKE is ipsec.ike: how sluice drives strongSwan for the peers keyed by IKE.
type IKE struct {
	// VICI is charon's VICI socket (unix:///path or tcp://host:port).
	VICI string
	// PSK is a file holding the pre-shared key (mode 0600). Either PSK, or
	// CA + Cert + PrivateKey.
	PSK string
	// CA, Cert and PrivateKey are PEM files: the CA that signed every
	// peer's certificate, this host's certificate, and its private key
	// (mode 0600).
	CA, Cert, PrivateKey string
	// RekeyTime is when a CHILD_SA is rekeyed; LifeTime when it expires
	// hard (must be later, so the rekey has time to finish); RandTime is
	// the random jitter subtracted from RekeyTime, so both ends do not
	// rekey at once.
	RekeyTime, LifeTime, RandTime time.Duration
	// RekeyBytes and RekeyPackets rekey after so much traffic (0: never).
	RekeyBytes, RekeyPackets uint64
	Line                     int
}

// Auth names the IKE authentication: "psk" or "pubkey".
func (k *IKE) Auth() string {
	if k.PSK != "" {
		return "psk"
	}
	return "pubkey"
}

// IKEPath resolves a path of ipsec.ike relative to the host file.
func (h *Host) IKEPath(p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(filepath.Dir(h.File), p)
}

// HasKeying reports whether any peer uses keying k.
func (h *Host) HasKeying(k string) bool {
	if h.IPsec == nil {
		return false
	}
	for _, p := range h.IPsec.Peers {
		if p.Keying == k {
			return true
		}
	}
	return false
}

// ikeFile is ipsec.ike as written (filled into IKE).
type ikeFile struct {
	VICI         nonEmpty    `yaml:"vici" default:"unix:///var/run/charon.vici"`
	PSK          nonEmpty    `yaml:"psk"`
	CA           nonEmpty    `yaml:"ca"`
	Cert         nonEmpty    `yaml:"cert"`
	PrivateKey   nonEmpty    `yaml:"private-key"`
	RekeyTime    lifetime    `yaml:"rekey-time" default:"1h"` // strongSwan's own CHILD_SA default
	LifeTime     lifetime    `yaml:"life-time"`
	RandTime     lifetime    `yaml:"rand-time"`
	RekeyBytes   num[maxU62] `yaml:"rekey-bytes"`
	RekeyPackets num[maxU62] `yaml:"rekey-packets"`
}

// applyIKEDefaults gives each peer the ipsec-wide keying and fills in the
// IKE lifetimes: life-time 10% over rekey-time and rand-time the gap, as
// strongSwan does, so that one end's rekey is (almost always) well ahead
// of the other's and of the hard expiry.
func (m *hostMeta) applyIKEDefaults(p *parser, h *Host) {
	s := h.IPsec
	if s == nil {
		return
	}
	for i, it := range m.peers {
		if !p.Given[it.Path+".keying"] {
			s.Peers[i].Keying = s.Keying
		}
	}
	k := s.IKE
	if k == nil {
		return
	}
	if k.LifeTime == 0 && !p.Given[m.ipsec.Path+".ike.life-time"] {
		k.LifeTime = k.RekeyTime + k.RekeyTime/10
	}
	if k.RandTime == 0 && !p.Given[m.ipsec.Path+".ike.rand-time"] {
		k.RandTime = k.LifeTime - k.RekeyTime
	}
}

// validateIKE checks ipsec.ike against the peers keyed by IKE.
func (m *hostMeta) validateIKE(p *parser, h *Host) {
	s := h.IPsec
	ipath := m.ipsec.Path
	if !h.HasKeying(KeyingIKE) {
		if s.IKE != nil {
			p.Errorf(s.IKE.Line, ipath+".ike", "no peer uses keying: ike; remove ike:, or set keying: ike (for all peers, or per peer)")
		}
		return
	}
	k := s.IKE
	if k == nil {
		l, _ := p.At(m.ipsec, "keying")
		p.Errorf(l, ipath+".ike", "missing; keying: ike needs its authentication, such as ike: {ca: ca.pem, cert: node-a.pem, private-key: node-a.key} (recommended) or ike: {psk: node-a.psk}")
		return
	}
	it := item{Path: ipath + ".ike", Line: k.Line}
	certs := k.CA != "" || k.Cert != "" || k.PrivateKey != ""
	switch {
	case k.PSK != "" && certs:
		p.ErrAt(it, "psk", "give either psk or ca, cert and private-key, not both")
	case k.PSK == "" && !certs:
		p.Errorf(k.Line, ipath+".ike", "no authentication; give ca, cert and private-key (certificates, recommended), or psk: a file with the pre-shared key (mode 0600)")
	case certs:
		for _, c := range []struct{ key, v string }{{"ca", k.CA}, {"cert", k.Cert}, {"private-key", k.PrivateKey}} {
			if c.v == "" {
				p.Missing(it, c.key, "certificate authentication needs ca, cert and private-key (PEM files; make them with strongSwan's pki, see docs/overlay.md)")
			}
		}
	}
	if k.RekeyTime > 0 && k.RekeyTime < MinRekeyTime {
		p.ErrAt(it, "rekey-time", "%s is too short; use %s or more (strongSwan's default is 1h)", k.RekeyTime, MinRekeyTime)
	}
	if k.LifeTime > 0 && k.LifeTime <= k.RekeyTime {
		p.ErrAt(it, "life-time", "%s is not after rekey-time %s: the SA would expire before its rekey finished and traffic would drop; make it later, such as %s (rekey-time + 10%%)", k.LifeTime, k.RekeyTime, k.RekeyTime+k.RekeyTime/10)
	}
	if k.RandTime >= k.RekeyTime && k.RekeyTime > 0 {
		p.ErrAt(it, "rand-time", "%s is not shorter than rekey-time %s; use a fraction of it (default: life-time - rekey-time)", k.RandTime, k.RekeyTime)
	}
	if k.RekeyTime == 0 && k.RekeyBytes == 0 && k.RekeyPackets == 0 {
		p.ErrAt(it, "rekey-time", "is 0 and no rekey-bytes or rekey-packets is set: the SAs would never be rekeyed; give a time such as 1h")
	}
}

// validateIKEPeer checks what a peer keyed by IKE must not set: its SPIs,
// reqids and keys are chosen by IKE.
func (m *hostMeta) validateIKEPeer(p *parser, h *Host, i int) {
	it, pr := m.peers[i], &h.IPsec.Peers[i]
	if pr.OffloadOut != pr.OffloadIn && pr.OffloadOut != "" && pr.OffloadIn != "" {
		key := "offload-out"
		if !p.Given[it.Path+"."+key] {
			key = "offload-in"
		}
		p.ErrAt(it, key, "keying: ike cannot offload one direction only: strongSwan's hw_offload applies to both SAs of a CHILD_SA; use offload: for both, or keying: manual for this peer")
	}
	for _, key := range []string{"spi-out", "spi-in", "reqid-out", "reqid-in"} {
		if p.Given[it.Path+"."+key] {
			p.ErrAt(it, key, "keying: ike chooses SPIs and reqids; remove %s (or set keying: manual for this peer)", key)
		}
	}
}

// IKESecretProblem says why a PSK or private-key file may not be used, or
// "". Such a file must be readable by its owner only, like the key file.
func IKESecretProblem(path string) string {
	fi, err := os.Stat(path)
	if err != nil {
		return err.Error()
	}
	return KeyFileProblem(path, fi)
}
