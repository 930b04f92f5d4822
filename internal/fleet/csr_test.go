// SPDX-License-Identifier: Apache-2.0

package fleet_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"sluice/internal/fleet/kubetest"
)

// The runbook's IKE certificate issuance (docs/fleet.md, step 3), run as
// written against a real API server with strongSwan's pki: the host's
// request goes through a CertificateSigningRequest of signer
// sluice.dev/ike, the administrator approves it, signs it with the fleet
// CA and puts the certificate in its status; what the host fetches chains
// to the CA and names the host as subjectAltName (its IKE identity). The
// private keys never leave their files.
func TestCSRFlowIKECertificate(t *testing.T) {
	if _, err := exec.LookPath("pki"); err != nil {
		t.Skip("pki missing: make setup installs strongswan-pki")
	}
	s := kubetest.Need(t)
	ctx := context.Background()
	dir := t.TempDir()
	pki := func(out string, args ...string) []byte {
		t.Helper()
		cmd := exec.Command("pki", args...)
		cmd.Dir = dir
		b, err := cmd.Output()
		if err != nil {
			t.Fatalf("pki %v: %v", args, err)
		}
		if out != "" {
			if err := os.WriteFile(filepath.Join(dir, out), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return b
	}
	// The administrator's CA; the host's key and request.
	pki("fleet-ca.key", "--gen", "--type", "ecdsa", "--size", "384", "--outform", "pem")
	caPEM := pki("fleet-ca.pem", "--self", "--ca", "--lifetime", "30", "--in", "fleet-ca.key", "--dn", "CN=sluice fleet CA", "--outform", "pem")
	pki("hv-a.key", "--gen", "--type", "ecdsa", "--size", "256", "--outform", "pem")
	req := pki("hv-a.csr", "--req", "--in", "hv-a.key", "--dn", "CN=hv-a", "--san", "hv-a", "--outform", "pem")

	kc := kubernetes.NewForConfigOrDie(s.Config("admin"))
	csrs := kc.CertificatesV1().CertificateSigningRequests()
	csr := &certv1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: "hv-a-ike"},
		Spec: certv1.CertificateSigningRequestSpec{SignerName: "sluice.dev/ike", Request: req,
			Usages: []certv1.KeyUsage{certv1.UsageDigitalSignature}}}
	csr, err := csrs.Create(ctx, csr, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("posting the request: %v", err)
	}
	// kubectl certificate approve hv-a-ike
	csr.Status.Conditions = append(csr.Status.Conditions, certv1.CertificateSigningRequestCondition{Type: certv1.CertificateApproved,
		Status: corev1.ConditionTrue, Reason: "FleetAdmin", Message: "hv-a is ours"})
	if csr, err = csrs.UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("approving: %v", err)
	}
	// The administrator signs what the API holds, with the subject and
	// SAN it decided.
	if err := os.WriteFile(filepath.Join(dir, "from-api.csr"), csr.Spec.Request, 0o600); err != nil {
		t.Fatal(err)
	}
	certPEM := pki("", "--issue", "--cacert", "fleet-ca.pem", "--cakey", "fleet-ca.key", "--type", "pkcs10", "--in", "from-api.csr",
		"--dn", "CN=hv-a", "--san", "hv-a", "--lifetime", "30", "--outform", "pem")
	csr.Status.Certificate = certPEM
	if _, err := csrs.UpdateStatus(ctx, csr, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("kubectl patch csr --subresource=status: %v", err)
	}
	// What the host fetches.
	got, err := csrs.Get(ctx, "hv-a-ike", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(got.Status.Certificate)
	caBlk, _ := pem.Decode(caPEM)
	if blk == nil || caBlk == nil {
		t.Fatalf("status.certificate is not PEM: %q", got.Status.Certificate)
	}
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caBlk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Errorf("the host's certificate does not chain to the fleet CA: %v", err)
	}
	if !slices.Contains(cert.DNSNames, "hv-a") || cert.Subject.CommonName != "hv-a" {
		t.Errorf("certificate names %v (CN %q), want subjectAltName hv-a", cert.DNSNames, cert.Subject.CommonName)
	}
	for _, b := range [][]byte{csr.Spec.Request, got.Status.Certificate} {
		if p, _ := pem.Decode(b); p != nil && (p.Type == "PRIVATE KEY" || p.Type == "EC PRIVATE KEY") {
			t.Error("a private key reached the API")
		}
	}
}
