// SPDX-License-Identifier: Apache-2.0

package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// readBlob reads a blob and checks that its content is its name and size.
func readBlob(t *testing.T, dir string, d descriptor) []byte {
	t.Helper()
	hexsum, ok := strings.CutPrefix(d.Digest, "sha256:")
	if !ok {
		t.Fatalf("digest %q is not sha256", d.Digest)
	}
	b, err := os.ReadFile(filepath.Join(dir, "blobs", "sha256", hexsum))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	if hex.EncodeToString(sum[:]) != hexsum || int64(len(b)) != d.Size {
		t.Fatalf("blob %s: content sha256 %x, %d bytes; descriptor says %d", d.Digest, sum, len(b), d.Size)
	}
	return b
}

// The image the DaemonSet runs, built from a real executable (this test's
// own), read back the way a runtime would: oci-layout, index.json, the
// manifest, its config and layer, each blob matching its digest; the
// layer's tar holds the binary, byte for byte, executable, at the
// entrypoint's path; the config's diff_id is the uncompressed layer's
// digest. The same input gives the same manifest digest (reproducible).
func TestImageLayout(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("SOURCE_DATE_EPOCH", "1764633600")
	dir := filepath.Join(t.TempDir(), "oci")
	if err := run(self, dir, "sluice:test", "test", "amd64"); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "oci-layout")); err != nil || string(b) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Fatalf("oci-layout: %q %v", b, err)
	}
	var idx struct {
		SchemaVersion int          `json:"schemaVersion"`
		Manifests     []descriptor `json:"manifests"`
	}
	b, _ := os.ReadFile(filepath.Join(dir, "index.json"))
	if err := json.Unmarshal(b, &idx); err != nil || idx.SchemaVersion != 2 || len(idx.Manifests) != 1 {
		t.Fatalf("index.json: %v\n%s", err, b)
	}
	md := idx.Manifests[0]
	if md.MediaType != mediaManifest || md.Annotations["org.opencontainers.image.ref.name"] != "sluice:test" || md.Platform["os"] != "linux" {
		t.Fatalf("index entry: %+v", md)
	}
	var man struct {
		Config descriptor   `json:"config"`
		Layers []descriptor `json:"layers"`
	}
	if err := json.Unmarshal(readBlob(t, dir, md), &man); err != nil || man.Config.MediaType != mediaConfig || len(man.Layers) != 1 || man.Layers[0].MediaType != mediaLayer {
		t.Fatalf("manifest: %v %+v", err, man)
	}
	var cfg struct {
		Arch   string `json:"architecture"`
		OS     string `json:"os"`
		Config struct {
			Entrypoint []string `json:"Entrypoint"`
		} `json:"config"`
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
	if err := json.Unmarshal(readBlob(t, dir, man.Config), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.OS != "linux" || cfg.Arch != "amd64" || len(cfg.Config.Entrypoint) != 1 || cfg.Config.Entrypoint[0] != "/usr/local/sbin/sluice" {
		t.Fatalf("config: %+v", cfg)
	}
	zr, err := gzip.NewReader(bytes.NewReader(readBlob(t, dir, man.Layers[0])))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(raw); len(cfg.RootFS.DiffIDs) != 1 || cfg.RootFS.DiffIDs[0] != "sha256:"+hex.EncodeToString(sum[:]) {
		t.Fatalf("diff_ids %v, layer tar sha256:%x", cfg.RootFS.DiffIDs, sum)
	}
	want, _ := os.ReadFile(self)
	tr := tar.NewReader(bytes.NewReader(raw))
	var names []string
	found := false
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.Name == "usr/local/sbin/sluice" {
			got, _ := io.ReadAll(tr)
			found = bytes.Equal(got, want) && h.Mode == 0o755 && h.Uid == 0
		}
	}
	if !found || strings.Join(names, " ") != "usr/ usr/local/ usr/local/sbin/ tmp/ usr/local/sbin/sluice" {
		t.Fatalf("layer: binary intact and executable %v; entries %v", found, names)
	}
	// Reproducible.
	again := filepath.Join(t.TempDir(), "oci")
	if err := run(self, again, "sluice:test", "test", "amd64"); err != nil {
		t.Fatal(err)
	}
	b2, _ := os.ReadFile(filepath.Join(again, "index.json"))
	if !bytes.Equal(b, b2) {
		t.Errorf("two builds of one binary differ:\n%s\n%s", b, b2)
	}
}
