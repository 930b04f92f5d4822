// SPDX-License-Identifier: Apache-2.0

package testlab

import (
	"fmt"
	"io"
	"strings"
)

// cpioWriter writes the "newc" (SVR4, no CRC) cpio format, the one the
// kernel unpacks as an initramfs. Written in Go rather than with cpio(1) so
// that device nodes (/dev/console, which init needs before devtmpfs is
// mounted) need no mknod on the host, and timestamps are zero, making the
// archive a pure function of its inputs.
type cpioWriter struct {
	w   io.Writer
	ino uint32
	err error
}

const (
	modeDir  = 0o040000
	modeFile = 0o100000
	modeLink = 0o120000
	modeChr  = 0o020000
)

func newCpioWriter(w io.Writer) *cpioWriter { return &cpioWriter{w: w, ino: 1} }

func (c *cpioWriter) Dir(name string, perm uint32) {
	c.entry(name, modeDir|perm, 2, 0, 0, nil)
}

func (c *cpioWriter) File(name string, perm uint32, data []byte) {
	c.entry(name, modeFile|perm, 1, 0, 0, data)
}

func (c *cpioWriter) Symlink(name, target string) {
	c.entry(name, modeLink|0o777, 1, 0, 0, []byte(target))
}

func (c *cpioWriter) CharDev(name string, perm, major, minor uint32) {
	c.entry(name, modeChr|perm, 1, major, minor, nil)
}

// Close writes the trailer entry; it does not close the underlying writer.
func (c *cpioWriter) Close() error {
	c.entry("TRAILER!!!", 0, 1, 0, 0, nil)
	return c.err
}

func (c *cpioWriter) entry(name string, mode, nlink, rmajor, rminor uint32, data []byte) {
	if c.err != nil {
		return
	}
	name = strings.TrimPrefix(name, "/")
	ino := c.ino
	c.ino++
	hdr := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		ino, mode, 0, 0, nlink, 0, len(data), 0, 0, rmajor, rminor, len(name)+1, 0)
	c.write([]byte(hdr))
	c.write([]byte(name + "\x00"))
	c.pad(len(hdr) + len(name) + 1)
	c.write(data)
	c.pad(len(data))
}

// pad aligns to 4 bytes; header+name and data are each padded.
func (c *cpioWriter) pad(n int) {
	if r := n % 4; r != 0 {
		c.write(make([]byte, 4-r))
	}
}

func (c *cpioWriter) write(b []byte) {
	if c.err == nil && len(b) > 0 {
		_, c.err = c.w.Write(b)
	}
}
