// SPDX-License-Identifier: Apache-2.0

//go:build vmtest

package vm

import (
	"bytes"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"sluice/internal/testutil"
)

func sluiceBin(t *testing.T) string { t.Helper(); return testutil.SluiceBin(t) }

// gateway is a `sluice gateway run` in a namespace (testutil.Gateway).
type gateway struct {
	*testutil.Gateway
	bin, ns, pinDir string
	daemon          *exec.Cmd // `ip netns exec` execs sluice: same pid
}

func startGateway(t *testing.T, l *lab, ns, config string) *gateway {
	t.Helper()
	g := testutil.StartGateway(t, l.Lab, ns, config)
	return &gateway{g, g.Bin, g.NS, g.PinDir, g.Daemon}
}

func (g *gateway) explainUntil(t *testing.T, ok func(string) bool, args ...string) string {
	t.Helper()
	return g.ExplainUntil(t, ok, args...)
}

// captureWire runs tcpdump on dev in ns while traffic() runs and returns
// what it printed (up to count packets, or what came in 20 s).
func captureWire(t *testing.T, ns, dev, filter string, count int, traffic func()) string {
	t.Helper()
	capture := exec.Command("ip", "netns", "exec", ns, "tcpdump", "-n", "-e", "-l", "-c", strconv.Itoa(count), "-i", dev, filter)
	var out bytes.Buffer
	capture.Stdout, capture.Stderr = &out, &out
	if err := capture.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // tcpdump under TCG is slow to start
	traffic()
	done := make(chan error, 1)
	go func() { done <- capture.Wait() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		capture.Process.Kill()
		<-done
	}
	return out.String()
}
