// SPDX-License-Identifier: Apache-2.0

package testlab

import (
	"bytes"
	"io"
	"strconv"
	"strings"
	"time"
)

// consoleFilter sits between qemu's serial console and Options.Stdout. The
// console carries kernel messages and init's own lines too; init prints
// "SLUICE-<nonce>-BEGIN" right before the command and "SLUICE-<nonce>-END
// <code>" right after it, with a random per-run nonce the command cannot
// guess, and only the bytes between them are the command's output. The END
// marker may follow output that lacks a final newline, so it is matched
// anywhere, and bytes that could be its start are held back until decided.
type consoleFilter struct {
	begin, end []byte
	out        io.Writer // the command's output
	raw        io.Writer // optional copy of everything (Options.Console)

	state    int    // stateBoot, stateCommand, stateDone
	buf      []byte // boot: unmatched tail; command: held bytes; done: END line so far
	skipNL   bool   // drop the newline that ends the BEGIN line
	diag     []byte // last diagLimit bytes outside the command's output
	outErr   error
	code     int
	haveCode bool
	began    time.Time
}

const (
	stateBoot = iota
	stateCommand
	stateDone
)

const diagLimit = 16 << 10

func newConsoleFilter(nonce string, out, raw io.Writer) *consoleFilter {
	return &consoleFilter{
		begin: []byte("SLUICE-" + nonce + "-BEGIN"),
		end:   []byte("SLUICE-" + nonce + "-END "),
		out:   out,
		raw:   raw,
	}
}

// Write never fails: an error from the caller's writer must not stall
// qemu's console. It is remembered and reported by Run instead.
func (f *consoleFilter) Write(p []byte) (int, error) {
	if f.raw != nil {
		f.raw.Write(p)
	}
	f.feed(p)
	return len(p), nil
}

func (f *consoleFilter) feed(p []byte) {
	switch f.state {
	case stateBoot:
		f.buf = append(f.buf, p...)
		i := bytes.Index(f.buf, f.begin)
		if i < 0 {
			// Keep just enough to match a marker split across writes.
			if keep := len(f.begin) - 1; len(f.buf) > keep {
				f.addDiag(f.buf[:len(f.buf)-keep])
				f.buf = append([]byte(nil), f.buf[len(f.buf)-keep:]...)
			}
			return
		}
		f.addDiag(f.buf[:i+len(f.begin)])
		rest := append([]byte(nil), f.buf[i+len(f.begin):]...)
		f.buf = nil
		f.state = stateCommand
		f.skipNL = true
		f.began = time.Now()
		f.feed(rest)
	case stateCommand:
		if f.skipNL && len(p) > 0 {
			p = bytes.TrimPrefix(p, []byte("\r"))
			if len(p) > 0 {
				p = bytes.TrimPrefix(p, []byte("\n"))
				f.skipNL = false
			}
		}
		data := append(f.buf, p...)
		if i := bytes.Index(data, f.end); i >= 0 {
			f.emit(data[:i])
			rest := append([]byte(nil), data[i+len(f.end):]...)
			f.buf = nil
			f.state = stateDone
			f.feed(rest)
			return
		}
		hold := partialSuffix(data, f.end)
		f.emit(data[:len(data)-hold])
		f.buf = append([]byte(nil), data[len(data)-hold:]...)
	case stateDone:
		if f.haveCode {
			f.addDiag(p)
			return
		}
		f.buf = append(f.buf, p...)
		if i := bytes.IndexByte(f.buf, '\n'); i >= 0 {
			f.parseCode(f.buf[:i])
			f.addDiag(f.buf[i+1:])
			f.buf = nil
		}
	}
}

// Close flushes held-back bytes: if the guest died mid-command, what looked
// like the start of the END marker was output after all; if it never began,
// the tail belongs to the diagnostics.
func (f *consoleFilter) Close() {
	switch f.state {
	case stateBoot:
		f.addDiag(f.buf)
	case stateCommand:
		f.emit(f.buf)
	case stateDone:
		if !f.haveCode {
			f.parseCode(f.buf)
		}
	}
	f.buf = nil
}

func (f *consoleFilter) parseCode(line []byte) {
	if n, err := strconv.Atoi(strings.TrimSpace(string(line))); err == nil {
		f.code, f.haveCode = n, true
	}
}

func (f *consoleFilter) emit(b []byte) {
	if len(b) == 0 || f.outErr != nil {
		return
	}
	_, f.outErr = f.out.Write(b)
}

func (f *consoleFilter) addDiag(b []byte) {
	f.diag = append(f.diag, b...)
	if len(f.diag) > diagLimit {
		f.diag = append([]byte(nil), f.diag[len(f.diag)-diagLimit:]...)
	}
}

// tail returns the last n lines of console output that was not the
// command's, for error messages.
func (f *consoleFilter) tail(n int) string {
	s := strings.TrimRight(strings.ReplaceAll(string(f.diag), "\r", ""), "\n")
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// partialSuffix is the length of the longest suffix of data that is a
// proper prefix of marker: bytes that may be the start of the marker.
func partialSuffix(data, marker []byte) int {
	for n := min(len(marker)-1, len(data)); n > 0; n-- {
		if bytes.Equal(data[len(data)-n:], marker[:n]) {
			return n
		}
	}
	return 0
}
