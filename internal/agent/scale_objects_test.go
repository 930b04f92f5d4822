// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	mrand "math/rand/v2"
	"net/netip"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"sluice/internal/config"
	"sluice/internal/fleet"
	"sluice/internal/fleet/v1alpha1"
)

// The objects of the realistic scale measurement: Hosts as the runbook
// (docs/fleet.md, steps 2-3) and the agent make them.

// scaleCA is the fleet CA of the runbook: ECDSA P-384, self-signed.
type scaleCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 64))
	return n
}

func newScaleCA() (*scaleCA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: "sluice fleet CA"},
		NotBefore: now, NotAfter: now.AddDate(10, 0, 0), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	c, err := x509.ParseCertificate(der)
	return &scaleCA{cert: c, key: key}, err
}

// issue signs a host's IKE certificate as the runbook's `pki --issue`
// does: its own P-256 key, CN and subjectAltName the host's name, one
// year. What the Host carries is what the agent publishes (PublicCert).
// strongSwan's pki makes 587 bytes of PEM for hv-0001; this makes about
// as many (the scale test logs the size).
func (ca *scaleCA) issue(name string) (string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", err
	}
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: now, NotAfter: now.AddDate(1, 0, 0), KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return "", err
	}
	return PublicCert(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

func scaleName(i int) string { return fmt.Sprintf("hv-%04d", i) }

func scaleVTEP(i int) string {
	return fmt.Sprintf("10.%d.%d.%d", 100+i/65536, (i/256)%256, i%256)
}

// scaleHost is host i's object as the administrator labels it and its
// agent registers it: addresses, capabilities and its certificate.
func scaleHost(i int, cert string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "fleet.sluice.dev/v1alpha1", "kind": "Host",
		"metadata": map[string]any{"name": scaleName(i), "namespace": "sluice-system", "labels": map[string]any{"sluice.dev/overlay": "prod"}},
		"spec": map[string]any{"vtep": scaleVTEP(i),
			"underlay":     map[string]any{"address": fmt.Sprintf("172.%d.%d.%d/12", 16+i/65536, (i/256)%256, i%256), "interface": "bond0", "mtu": int64(9000)},
			"capabilities": map[string]any{"offload": []any{"packet", "crypto", "none"}, "kernel": "6.12.95+deb13-amd64"},
			"certificate":  cert}}}
}

// scaleStatus is the status host i's agent writes in a fleet of n hosts
// when every tunnel is up with packet offload: Agent.status itself, fed
// with n-1 peers and an in/out SA pair each, offload in step. perPeer
// false drops the tunnels: what stays in the watched object if per-peer
// detail moves out of it.
func scaleStatus(i, n int, perPeer bool) (map[string]any, error) {
	me := v1alpha1.Host{ObjectMeta: metav1.ObjectMeta{Name: scaleName(i), Generation: 1}}
	a := &Agent{o: Options{Name: me.Name, Instance: "4c4c4544004d3510804bc4c04f4e4d33:7f0e7a2c-93c4-4e59-8f52-3f1f1d2b9c61"}}
	inStep := true
	var d fleet.Desired
	for j := 0; j < n; j++ {
		if j == i {
			continue
		}
		d.Peers = append(d.Peers, fleet.Peer{Name: scaleName(j), VTEP: netip.MustParseAddr(scaleVTEP(j))})
		for _, dir := range []string{"in", "out"} {
			a.lastTruth = append(a.lastTruth, SATruth{Peer: scaleName(j), Dir: dir, SPI: mrand.Uint32(), Asked: config.OffloadModeAuto,
				Got: config.OffloadModePacket, Dev: "bond0", Packets: 1000, Counting: &inStep, Evidence: EvidenceDevice})
		}
	}
	st := a.status(&me, d, Outcome{Result: ResultApplied, Steps: 3 * len(d.Peers), Digest: "3f9a0c21b7e4",
		Message: fmt.Sprintf("applied overlay prod: %d peers", len(d.Peers))})
	if !perPeer {
		st.Tunnels = nil
	}
	return runtime.DefaultUnstructuredConverter.ToUnstructured(&st)
}
