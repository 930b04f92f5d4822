// SPDX-License-Identifier: Apache-2.0

package testlab

import (
	"archive/tar"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// writeEtcArchive writes the host's /etc as an uncompressed tar for the
// guest's writable /etc copy. Copying /etc file by file over 9p in the guest
// took 3.5 s of a 7 s boot (some 1,400 files, several 9p round trips each,
// under TCG); reading one tar over 9p and unpacking it into tmpfs takes a
// fraction of that. Files the host user cannot read are left out, as a copy
// in the guest could not read them either.
func writeEtcArchive(root, dst string) error {
	f, err := os.Create(dst)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	walkErr := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if d != nil && d.IsDir() && path != root {
				return fs.SkipDir
			}
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return nil // vanished meanwhile
		}
		return addTarEntry(tw, path, rel, info)
	})
	if err := tw.Close(); err != nil && walkErr == nil {
		walkErr = err
	}
	if err := f.Close(); err != nil && walkErr == nil {
		walkErr = err
	}
	return walkErr
}

func addTarEntry(tw *tar.Writer, path, rel string, info fs.FileInfo) error {
	var link string
	switch {
	case info.Mode()&fs.ModeSymlink != 0:
		l, err := os.Readlink(path)
		if err != nil {
			return nil
		}
		link = l
	case info.IsDir(), info.Mode().IsRegular():
	default:
		return nil // sockets, fifos, devices: nothing a guest /etc needs
	}
	var src *os.File
	if info.Mode().IsRegular() {
		var err error
		if src, err = os.Open(path); err != nil {
			return nil // unreadable for this user
		}
		defer src.Close()
	}
	hdr, err := tar.FileInfoHeader(info, link)
	if err != nil {
		return err
	}
	hdr.Name = rel
	if info.IsDir() {
		hdr.Name += "/"
	}
	// Numeric ids only: the guest sees the same /etc/passwd anyway.
	hdr.Uname, hdr.Gname = "", ""
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		hdr.Uid, hdr.Gid = int(st.Uid), int(st.Gid)
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if src != nil {
		// The header's size was taken before reading: write exactly that
		// many bytes, zero-padded if the file shrank meanwhile, so a file
		// changing under us cannot corrupt the archive.
		n, err := io.CopyN(tw, src, hdr.Size)
		if err == io.EOF {
			_, err = io.CopyN(tw, zeroReader{}, hdr.Size-n)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
