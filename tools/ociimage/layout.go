// SPDX-License-Identifier: Apache-2.0

package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// OCI media types (image-spec v1.1).
const (
	mediaIndex    = "application/vnd.oci.image.index.v1+json"
	mediaManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaConfig   = "application/vnd.oci.image.config.v1+json"
	mediaLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
)

// Image is what goes into the layout: one layer holding the binary.
type Image struct {
	// Binary is the static executable's content, installed as Path.
	Binary []byte
	Path   string
	// Ref names the image in index.json (org.opencontainers.image.ref.name).
	Ref     string
	Version string
	Arch    string
	// Created is every timestamp of the image (SOURCE_DATE_EPOCH), so the
	// same binary gives the same digests.
	Created time.Time
}

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    map[string]string `json:"platform,omitempty"`
}

// blobs writes content-addressed files under dir/blobs/sha256.
type blobs struct{ dir string }

func (b blobs) put(media string, data []byte) (descriptor, error) {
	sum := sha256.Sum256(data)
	hexsum := hex.EncodeToString(sum[:])
	p := filepath.Join(b.dir, "blobs", "sha256", hexsum)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return descriptor{}, err
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		return descriptor{}, err
	}
	return descriptor{MediaType: media, Digest: "sha256:" + hexsum, Size: int64(len(data))}, nil
}

// layer is the root filesystem: the directories of Path, the binary
// (root-owned, 0755) and /tmp. It returns the uncompressed tar (its
// digest is the config's diff_id) and the gzip of it (the blob).
func layer(img Image) (raw, gz []byte, err error) {
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	hdr := func(h *tar.Header) error {
		h.ModTime, h.Uname, h.Gname, h.Format = img.Created, "root", "root", tar.FormatPAX
		return tw.WriteHeader(h)
	}
	var dirs []string
	for d := filepath.Dir(img.Path); d != "/" && d != "."; d = filepath.Dir(d) {
		dirs = append([]string{d[1:] + "/"}, dirs...)
	}
	for _, d := range dirs {
		if err := hdr(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755}); err != nil {
			return nil, nil, err
		}
	}
	if err := hdr(&tar.Header{Typeflag: tar.TypeDir, Name: "tmp/", Mode: 0o1777}); err != nil {
		return nil, nil, err
	}
	if err := hdr(&tar.Header{Typeflag: tar.TypeReg, Name: img.Path[1:], Mode: 0o755, Size: int64(len(img.Binary))}); err != nil {
		return nil, nil, err
	}
	if _, err := tw.Write(img.Binary); err != nil {
		return nil, nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, nil, err
	}
	var zb bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&zb, gzip.BestCompression)
	zw.ModTime = img.Created // the gzip header's time: reproducible
	if _, err := zw.Write(tb.Bytes()); err != nil {
		return nil, nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, nil, err
	}
	return tb.Bytes(), zb.Bytes(), nil
}

// Write lays the image out in dir as an OCI image layout (oci-layout,
// index.json, blobs/sha256/...): what `skopeo copy oci:DIR docker://...`,
// `podman load` or a registry client takes.
func Write(dir string, img Image) (descriptor, error) {
	if len(img.Binary) == 0 || !filepath.IsAbs(img.Path) {
		return descriptor{}, fmt.Errorf("an image needs a binary and an absolute path for it (got %d bytes at %q)", len(img.Binary), img.Path)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return descriptor{}, err
	}
	b := blobs{dir}
	raw, gz, err := layer(img)
	if err != nil {
		return descriptor{}, err
	}
	lay, err := b.put(mediaLayer, gz)
	if err != nil {
		return descriptor{}, err
	}
	diff := sha256.Sum256(raw)
	created := img.Created.UTC().Format(time.RFC3339)
	labels := map[string]string{
		"org.opencontainers.image.title":    "sluice",
		"org.opencontainers.image.version":  img.Version,
		"org.opencontainers.image.created":  created,
		"org.opencontainers.image.licenses": "Apache-2.0",
	}
	cfg, err := json.Marshal(map[string]any{
		"created":      created,
		"architecture": img.Arch,
		"os":           "linux",
		"config": map[string]any{
			"Entrypoint": []string{img.Path},
			"Env":        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
			"Labels":     labels,
		},
		"rootfs":  map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + hex.EncodeToString(diff[:])}},
		"history": []map[string]any{{"created": created, "created_by": "sluice make image (tools/ociimage)"}},
	})
	if err != nil {
		return descriptor{}, err
	}
	cd, err := b.put(mediaConfig, cfg)
	if err != nil {
		return descriptor{}, err
	}
	man, err := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": mediaManifest, "config": cd,
		"layers": []descriptor{lay}, "annotations": labels})
	if err != nil {
		return descriptor{}, err
	}
	md, err := b.put(mediaManifest, man)
	if err != nil {
		return descriptor{}, err
	}
	md.Annotations = map[string]string{"org.opencontainers.image.ref.name": img.Ref}
	md.Platform = map[string]string{"architecture": img.Arch, "os": "linux"}
	idx, err := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": mediaIndex, "manifests": []descriptor{md}})
	if err != nil {
		return descriptor{}, err
	}
	if err := os.WriteFile(filepath.Join(dir, "index.json"), idx, 0o644); err != nil {
		return descriptor{}, err
	}
	return md, os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644)
}
