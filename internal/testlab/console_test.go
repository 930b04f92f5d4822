// SPDX-License-Identifier: Apache-2.0

package testlab

import (
	"bytes"
	"strings"
	"testing"
)

const testNonce = "0123456789abcdef"

// feedConsole writes s to a filter in chunks of n bytes (n <= 0: at once),
// as qemu's pipe may split it anywhere.
func feedConsole(s string, n int) (*consoleFilter, string) {
	var out bytes.Buffer
	f := newConsoleFilter(testNonce, &out, nil)
	if n <= 0 {
		n = len(s)
	}
	for len(s) > 0 {
		k := min(n, len(s))
		f.Write([]byte(s[:k]))
		s = s[k:]
	}
	f.Close()
	return f, out.String()
}

func TestConsoleFilter(t *testing.T) {
	begin := "SLUICE-" + testNonce + "-BEGIN\n"
	end := "SLUICE-" + testNonce + "-END "
	for _, tc := range []struct {
		name, console, want string
		code                int
		haveCode            bool
	}{
		{
			name:    "noise around the output",
			console: "[    1.0] kernel noise\r\nsluice-init: x\n" + begin + "hello\nworld\n" + end + "3\n[ 9.1] reboot: Power down\r\n",
			want:    "hello\nworld\n", code: 3, haveCode: true,
		},
		{
			name:    "output without final newline",
			console: begin + "no newline" + end + "0\n",
			want:    "no newline", code: 0, haveCode: true,
		},
		{
			name:    "CRLF after BEGIN",
			console: "SLUICE-" + testNonce + "-BEGIN\r\nx\n" + end + "1\n",
			want:    "x\n", code: 1, haveCode: true,
		},
		{
			name:    "empty output",
			console: begin + end + "0\n",
			want:    "", code: 0, haveCode: true,
		},
		{
			name:    "marker look-alikes are output",
			console: begin + "SLUICE-ffff-END 5\nSLUICE-" + testNonce + "-EN\n" + end + "7\n",
			want:    "SLUICE-ffff-END 5\nSLUICE-" + testNonce + "-EN\n", code: 7, haveCode: true,
		},
		{
			name:    "guest died mid-command",
			console: begin + "partial output SLUICE-" + testNonce,
			want:    "partial output SLUICE-" + testNonce,
		},
		{
			name:    "never began",
			console: "Kernel panic - not syncing: VFS\n",
			want:    "",
		},
		{
			name:    "END without trailing newline",
			console: begin + "ok\n" + end + "42",
			want:    "ok\n", code: 42, haveCode: true,
		},
	} {
		for _, chunk := range []int{0, 1, 3, 7} {
			f, got := feedConsole(tc.console, chunk)
			if got != tc.want {
				t.Errorf("%s (chunks of %d): output %q, want %q", tc.name, chunk, got, tc.want)
			}
			if f.haveCode != tc.haveCode || f.code != tc.code {
				t.Errorf("%s (chunks of %d): code %d (%v), want %d (%v)", tc.name, chunk, f.code, f.haveCode, tc.code, tc.haveCode)
			}
		}
	}
}

func TestConsoleFilterDiagnostics(t *testing.T) {
	f, _ := feedConsole("line1\r\nsluice-init: cannot mount the host root\r\n", 5)
	if !f.began.IsZero() {
		t.Fatal("began without a BEGIN marker")
	}
	if got := f.tail(1); got != "sluice-init: cannot mount the host root" {
		t.Fatalf("tail(1) = %q", got)
	}
	if !strings.Contains(f.context(), "line1") {
		t.Fatalf("context lacks the console: %q", f.context())
	}
	// The diagnostic buffer is bounded.
	f, _ = feedConsole(strings.Repeat("x", 3*diagLimit), 1000)
	if len(f.diag) > diagLimit {
		t.Fatalf("diag holds %d bytes, limit %d", len(f.diag), diagLimit)
	}
}

func TestPartialSuffix(t *testing.T) {
	m := []byte("SLUICE-x-END ")
	for data, want := range map[string]int{
		"abc":            0,
		"abcS":           1,
		"abcSLUICE-x-EN": 11,
		"SLUICE-x-END ":  0, // a full marker is not a partial one
		"":               0,
	} {
		if got := partialSuffix([]byte(data), m); got != want {
			t.Errorf("partialSuffix(%q) = %d, want %d", data, got, want)
		}
	}
}
