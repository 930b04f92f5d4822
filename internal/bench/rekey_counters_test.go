// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"bytes"
	"encoding/binary"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"sluice/internal/testutil"
)

func TestParseDropCounters(t *testing.T) {
	m := map[string]uint64{}
	parseXfrmStat([]byte("XfrmInError             \t0\nXfrmInNoStates          \t3\n"), "B xfrm ", m)
	parseSNMP([]byte("Ip: Forwarding DefaultTTL InReceives InHdrErrors InAddrErrors ForwDatagrams InUnknownProtos InDiscards InDelivers OutRequests OutDiscards OutNoRoutes ReasmTimeout ReasmReqds ReasmOKs ReasmFails FragOKs FragFails FragCreates OutTransmits\n"+
		"Ip: 2 64 100 0 0 0 0 4 96 50 0 0 0 0 0 0 0 0 0 50\n"+
		"Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors\n"+
		"Udp: 90 1 7 40 7 0 0 0 0\n"), "B ", m)
	parseNetDev([]byte("Inter-|   Receive                                                |  Transmit\n"+
		" face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n"+
		"    lo:     100       1    0    0    0     0          0         0      100       1    0    0    0     0       0          0\n"+
		" bond0:    5000      50    1    2    0     0          0         0     4000      40    0    9    0     0       0          0\n"), "B dev ", m)
	want := map[string]uint64{"B xfrm XfrmInNoStates": 3, "B Ip InDiscards": 4, "B Udp InErrors": 7, "B Udp RcvbufErrors": 7, "B Udp NoPorts": 1,
		"B dev bond0 rx_errors": 1, "B dev bond0 rx_dropped": 2, "B dev bond0 tx_dropped": 9}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %d, want %d (all: %v)", k, m[k], v, m)
		}
	}
	if _, ok := m["B Udp InDatagrams"]; ok {
		t.Error("a traffic counter is kept as a drop counter")
	}
	if _, ok := m["B dev lo rx_dropped"]; ok {
		t.Error("lo is kept")
	}
}

// The host's own namespace: the files open and the counters read.
func TestCountersOpenHere(t *testing.T) {
	c, err := openCounters("A", "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	m := map[string]uint64{}
	c.read(m)
	c.read(m) // a second read starts at the top again
	if _, ok := m["A Udp RcvbufErrors"]; !ok {
		t.Fatalf("no Udp RcvbufErrors in %v", m)
	}
}

// Windows: rekey 1's window saw an xfrm counter rise, rekey 2's a socket
// drop, rekey 3's a send error; each loss gets its cause.
func TestRekeyExplain(t *testing.T) {
	var sentAt []time.Duration
	for s := 0; s < 300; s++ {
		sentAt = append(sentAt, time.Duration(s)*10*time.Millisecond)
	}
	var arrivals []uint64
	for s := uint64(0); s < 300; s++ {
		if s != 50 && s != 150 && s != 250 && s != 251 {
			arrivals = append(arrivals, s)
		}
	}
	r := newRekeyReport(RekeyOptions{Label: "test", Mode: RekeyChild, Rate: 100, Interval: time.Second})
	r.account([]RekeyEvent{{N: 1, At: 0.5}, {N: 2, At: 1.5}, {N: 3, At: 2.5}}, sentAt, arrivals, time.Second)
	samples := []map[string]uint64{
		{"B xfrm XfrmInNoStates": 0, causeSocketFull: 0},
		{"B xfrm XfrmInNoStates": 1, causeSocketFull: 0},
		{"B xfrm XfrmInNoStates": 1, causeSocketFull: 1},
		{"B xfrm XfrmInNoStates": 1, causeSocketFull: 1},
	}
	r.explain(samples, map[uint64]string{250: "EAGAIN", 251: "EAGAIN"}, sentAt, time.Second)
	for i, want := range []string{CauseIPsec, CauseOutside, CauseSend} {
		if r.Events[i].Cause != want {
			t.Errorf("rekey %d: cause %q, want %q (%+v)", i+1, r.Events[i].Cause, want, r.Events[i])
		}
	}
	if r.LostBy[CauseSend] != 2 || r.LostBy[CauseIPsec] != 1 || r.Drops["A send EAGAIN"] != 2 || r.Drops[causeSocketFull] != 1 {
		t.Fatalf("lost by %v, drops %v", r.LostBy, r.Drops)
	}
	var b bytes.Buffer
	r.WriteTable(&b)
	for _, want := range []string{"lost: IPsec; B xfrm XfrmInNoStates +1", "lost: send error; A send EAGAIN +2", "lost by cause: 1 IPsec, 1 outside IPsec, 2 send error"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

// The receiver's socket: SO_RCVBUFFORCE gets the big buffer past
// rmem_max, and SO_RXQ_OVFL reports what a full buffer dropped.
func TestReceiverSocketDrops(t *testing.T) {
	testutil.RequireRoot(t, "SO_RCVBUFFORCE needs CAP_NET_ADMIN")
	rx, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	got, err := bigReceiveBuffer(rx)
	if err != nil || got < receiveBuffer {
		t.Fatalf("receive buffer %d, %v; want >= %d", got, err, receiveBuffer)
	}
	// Now a tiny buffer, so most of a burst is dropped.
	rc, _ := rx.SyscallConn()
	rc.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 1) })
	tx, err := net.DialUDP("udp", nil, rx.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	const n = 200
	buf := make([]byte, rekeyPayload)
	for s := uint64(0); s < n; s++ {
		binary.BigEndian.PutUint64(buf, s)
		tx.Write(buf)
	}
	var arrivals []uint64
	var drops atomic.Uint64
	done := make(chan struct{})
	go func() { defer close(done); receive(rx, &arrivals, &drops) }()
	// The count rides on datagrams queued after the drops: one more.
	time.Sleep(100 * time.Millisecond)
	binary.BigEndian.PutUint64(buf, n)
	tx.Write(buf)
	time.Sleep(100 * time.Millisecond)
	rx.Close()
	<-done
	if drops.Load() == 0 || int(drops.Load())+len(arrivals) != n+1 {
		t.Fatalf("%d received, %d socket drops; want them to add up to %d with some drops", len(arrivals), drops.Load(), n+1)
	}
}
