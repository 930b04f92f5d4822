// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"strings"
)

// PublicCert returns the first certificate of a PEM file, re-encoded, for
// the Host object. A file that holds a private key is refused outright:
// nothing secret is written to the API, even by mistake (the CRD refuses
// it too).
func PublicCert(b []byte) (string, error) {
	if strings.Contains(string(b), "PRIVATE KEY") {
		return "", errors.New("holds a private key; the private key never leaves the host: give the certificate file (--cert) and the key separately (--private-key)")
	}
	for rest := b; ; {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			return "", errors.New("no PEM certificate in it")
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		if _, err := x509.ParseCertificate(blk.Bytes); err != nil {
			return "", err
		}
		return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: blk.Bytes})), nil
	}
}
