// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Two rekeys, 1 s apart, 100 datagrams/s: the first window loses seq
// 60-62 and sees 70 twice, the second sees 150 after 151.
func TestRekeyAccounting(t *testing.T) {
	var sentAt []time.Duration
	for s := 0; s < 250; s++ {
		sentAt = append(sentAt, time.Duration(s)*10*time.Millisecond)
	}
	var arrivals []uint64
	for s := uint64(0); s < 250; s++ {
		switch {
		case s >= 60 && s <= 62:
		case s == 70:
			arrivals = append(arrivals, 70, 70)
		case s == 150:
		case s == 151:
			arrivals = append(arrivals, 151, 150)
		default:
			arrivals = append(arrivals, s)
		}
	}
	r := newRekeyReport(RekeyOptions{Label: "test", Mode: RekeyChild, Rate: 100, Interval: time.Second})
	r.account([]RekeyEvent{{N: 1, At: 0.5}, {N: 2, At: 1.5}}, sentAt, arrivals, time.Second)
	e1, e2 := r.Events[0], r.Events[1]
	if e1.Sent != 100 || e1.Lost != 3 || e1.Duplicated != 1 || e1.Reordered != 0 || e1.LongestGapMS != 30 {
		t.Fatalf("rekey 1: %+v", e1)
	}
	if e2.Sent != 100 || e2.Lost != 0 || e2.Reordered != 1 {
		t.Fatalf("rekey 2: %+v", e2)
	}
	if r.Total.Lost != 3 || r.Total.Duplicated != 1 || r.Total.Reordered != 1 {
		t.Fatalf("total %+v", r.Total)
	}
	var b bytes.Buffer
	r.WriteTable(&b)
	if !strings.Contains(b.String(), "test (child, 100 pps (achieved 0), a rekey every 1.0 s): 3 lost, 1 duplicated, 1 reordered over 2 rekeys") {
		t.Fatalf("table:\n%s", b.String())
	}
	dir := t.TempDir()
	if err := r.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	page, _ := os.ReadFile(filepath.Join(dir, "report.html"))
	for _, want := range []string{`id="chart-rekey"`, "<svg", "<b>3 lost</b>"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("report.html lacks %q", want)
		}
	}
	for _, f := range []string{"rekey.json", "rekey.txt", "rekey.svg", "rekey.png"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
}
