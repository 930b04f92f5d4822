// SPDX-License-Identifier: Apache-2.0

//go:build vmtest

package flower_test

import (
	"encoding/binary"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// checkUseTimePolice checks the use-time police on the IPv4 forward to dst
// (pkts_rate 1 pkts_burst 1: the first packet of each second conforms and
// goes to the host, the rest are forwarded). The gateway's kernel forwarding
// is off, so what the host takes never reaches b.
//
// It judges the token bucket by times that bound when the rule saw each
// packet, not by the sender's pacing, which a loaded TCG guest stretches
// (10 packets 50 ms apart once took over a second, and two went to the
// host). The rule saw packet k no earlier than just before a wrote it, and
// no later than the kernel stamped the next forwarded packet into b's socket
// (packets keep their order on the path). From those:
//   - packet 0 meets a full bucket: it goes to the host;
//   - two packets the host took passed the rule at least 1 s apart;
//   - a packet sent at least 1 s after the host's last one was seen must
//     not be forwarded (the bucket had refilled).
//
// It sends 50 ms apart until at least 10 were sent, 5 forwarded, and the last
// one reached b (so each one the host took has a forwarded one after it).
func checkUseTimePolice(t *testing.T, f *flowerLab, dst netip.Addr, port int) {
	t.Helper()
	addr := net.JoinHostPort(dst.String(), strconv.Itoa(port))
	var rc *net.UDPConn
	var sc net.Conn
	inNetns(t, f.b, func() {
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			t.Fatal(err)
		}
		rc = pc.(*net.UDPConn)
	})
	defer rc.Close()
	raw, err := rc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	raw.Control(func(fd uintptr) {
		err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_TIMESTAMPNS, 1)
	})
	if err != nil {
		t.Fatalf("SO_TIMESTAMPNS: %v", err)
	}
	inNetns(t, f.a, func() {
		if sc, err = net.Dial("udp", addr); err != nil {
			t.Fatal(err)
		}
	})
	defer sc.Close()

	// act_police starts with an empty packet bucket (the model's starts
	// full): a second fills it. Longer only fills it to the same burst.
	time.Sleep(1100 * time.Millisecond)
	var sent []time.Time       // just before each write
	got := map[int]time.Time{} // the kernel's receive stamp at b
	buf, oob := make([]byte, 2048), make([]byte, 128)
	receive := func(wait time.Duration) {
		rc.SetReadDeadline(time.Now().Add(wait))
		for {
			n, oobn, _, _, err := rc.ReadMsgUDP(buf, oob)
			if err != nil {
				return
			}
			if n >= 4 {
				got[int(binary.BigEndian.Uint32(buf))] = rxStamp(t, oob[:oobn])
			}
		}
	}
	forwarded := func() int { return len(got) }
	lastArrived := func() bool { _, ok := got[len(sent)-1]; return ok }
	payload := make([]byte, 100-28) // 100-byte IPv4 packets
	deadline := time.Now().Add(20 * time.Second)
	for len(sent) < 10 || forwarded() < 5 || !lastArrived() {
		if time.Now().After(deadline) {
			t.Fatalf("after %d packets in 20 s, b received %d (want >= 5 and the last): %v", len(sent), forwarded(), slices.Sorted(maps.Keys(got)))
		}
		binary.BigEndian.PutUint32(payload, uint32(len(sent)))
		sent = append(sent, time.Now())
		if _, err := sc.Write(payload); err != nil {
			t.Fatal(err)
		}
		receive(50 * time.Millisecond) // the gap between packets
	}
	// seen bounds when the rule saw packet k from above: the receive
	// stamp of the first forwarded packet at or after k.
	seen := func(k int) time.Time {
		for ; k < len(sent); k++ {
			if ts, ok := got[k]; ok {
				return ts
			}
		}
		return time.Time{} // unreachable: the last one arrived
	}
	var host []int
	for k := range sent {
		if _, ok := got[k]; !ok {
			host = append(host, k)
		}
	}
	t.Logf("sent %d over %v; the host took %v", len(sent), sent[len(sent)-1].Sub(sent[0]).Round(time.Millisecond), host)
	if len(host) == 0 || host[0] != 0 {
		t.Errorf("the host took %v, want packet 0 (a full bucket) among them", host)
	}
	for n := 1; n < len(host); n++ {
		i, j := host[n-1], host[n]
		if d := seen(j).Sub(sent[i]); d < time.Second {
			t.Errorf("packets %d and %d both went to the host, at most %v apart at the rule: want one a second", i, j, d.Round(time.Millisecond))
			break // the first says it
		}
	}
	last := -1
	for k := range sent {
		if _, ok := got[k]; !ok {
			last = k
			continue
		}
		if last >= 0 {
			if d := sent[k].Sub(seen(last)); d >= time.Second {
				t.Errorf("packet %d was forwarded at least %v after packet %d went to the host: want it to the host (the bucket had refilled)", k, d.Round(time.Millisecond), last)
				break
			}
		}
	}
}

// rxStamp is the SCM_TIMESTAMPNS stamp in a datagram's control messages.
func rxStamp(t *testing.T, oob []byte) time.Time {
	t.Helper()
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		t.Fatalf("control messages: %v", err)
	}
	for _, m := range msgs {
		if m.Header.Level == syscall.SOL_SOCKET && m.Header.Type == syscall.SCM_TIMESTAMPNS && len(m.Data) >= 16 {
			return time.Unix(int64(binary.NativeEndian.Uint64(m.Data)), int64(binary.NativeEndian.Uint64(m.Data[8:])))
		}
	}
	t.Fatal("no SCM_TIMESTAMPNS on a received datagram")
	return time.Time{}
}
