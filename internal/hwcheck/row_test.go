// SPDX-License-Identifier: Apache-2.0

package hwcheck

import (
	"errors"
	"strings"
	"testing"

	"sluice/internal/driverquirk"
	"sluice/internal/wire"
)

// TestCompare: a row is "model = hardware" only when the wire showed what
// the profile expects; the other outcome differs, no outcome is
// inconclusive, a scenario the run cannot do is not run; and the run
// fails on a difference or an inconclusive row, never on "not run".
func TestCompare(t *testing.T) {
	o := outcomes{yes: "cleartext", no: "ESP"}
	yes, no := expectation{behaviour: "b", shows: true}, expectation{behaviour: "b", shows: false}
	for _, tc := range []struct {
		name     string
		e        expectation
		m        measurement
		verdict  Verdict
		measured string
		failed   bool
	}{
		{"expected and shown", yes, showed(true, "ev"), Same, "cleartext", false},
		{"expected, not shown", yes, showed(false, "ev"), Differs, "ESP", true},
		{"not expected, shown", no, showed(true, "ev"), Differs, "cleartext", true},
		{"not expected, not shown", no, showed(false, "ev"), Same, "ESP", false},
		{"neither outcome", yes, inconclusive("too few frames", "ev"), Inconclusive, "", true},
		{"cannot run", yes, measurement{notRun: "needs a bond"}, NotRun, "", false},
	} {
		r := compare("s", o, tc.e, tc.m)
		if r.Verdict != tc.verdict || r.Measured != tc.measured || r.Failed() != tc.failed {
			t.Errorf("%s: %+v; want verdict %q, measured %q, failed %v", tc.name, r, tc.verdict, tc.measured, tc.failed)
		}
		if r.Expected != o.say(tc.e.shows) {
			t.Errorf("%s: expected %q, want the profile's outcome %q", tc.name, r.Expected, o.say(tc.e.shows))
		}
	}
	rep := Report{Rows: []Row{{Verdict: Same}, {Verdict: NotRun}}}
	if rep.Failed() {
		t.Error("a run with only same and not-run rows failed")
	}
	rep.Rows = append(rep.Rows, Row{Verdict: Differs})
	if !rep.Failed() {
		t.Error("a run with a row that differs passed")
	}
}

// TestExpectationsFromProfiles: the subnet row is what tells the two
// mlx5 profiles apart (TestHWCheckOnModel relies on it); the rows the
// profiles share are expected under both; a driver's rows follow the
// table; an unknown profile is refused with the known ones.
func TestExpectationsFromProfiles(t *testing.T) {
	const rel = "6.12.95+deb12-amd64"
	old, err := Expectations("mlx5-6.12", "", rel)
	if err != nil {
		t.Fatal(err)
	}
	up, err := Expectations("mlx5-upstream", "", rel)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range scenarios {
		if s.behaviour == 0 {
			if !s.assumption.shows || s.assumption.source == "" {
				t.Errorf("%s: an assumption without a row must say what is assumed and where it comes from", s.name)
			}
			continue
		}
		eo, eu := expect(old, s.behaviour), expect(up, s.behaviour)
		wantDiffer := s.behaviour == driverquirk.ExactSelectorMatch
		if (eo.shows != eu.shows) != wantDiffer {
			t.Errorf("%s (%s): mlx5-6.12 expects %v, mlx5-upstream %v", s.name, s.behaviour, eo.shows, eu.shows)
		}
		if s.name != "bond-failover" && !eo.shows {
			t.Errorf("%s: mlx5-6.12 must expect %s (the 6.12 rows)", s.name, s.behaviour)
		}
	}
	if e := expect(mustExpect(t, "", "mlx5_core", "6.15.0"), driverquirk.ExactSelectorMatch); e.shows {
		t.Errorf("mlx5_core on 6.15 (after the subnet fix) expects %s", e.behaviour)
	}
	if e := expect(mustExpect(t, "", "ixgbe", rel), driverquirk.NoTXMissRule); e.shows || !strings.Contains(e.source, "no row") {
		t.Errorf("ixgbe: %+v, want no row", e)
	}
	if _, err := Expectations("mlx5-7", "", rel); !errors.Is(err, ErrUnknownProfile) || !strings.Contains(err.Error(), "mlx5-6.12, mlx5-upstream") {
		t.Errorf("unknown profile: %v", err)
	}
}

func mustExpect(t *testing.T, profile, driver, release string) driverquirk.Set {
	t.Helper()
	s, err := Expectations(profile, driver, release)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestVerdictOf: a transmit scenario shows the behaviour on cleartext
// and no ESP, refutes it on ESP and no cleartext, two frames at least; a
// mix or a single frame is inconclusive.
func TestVerdictOf(t *testing.T) {
	for _, tc := range []struct {
		clear, esp int
		want       *bool
	}{
		{5, 0, ptr(true)}, {2, 0, ptr(true)}, {0, 5, ptr(false)}, {0, 2, ptr(false)},
		{4, 1, nil}, {1, 4, nil}, {1, 0, nil}, {0, 1, nil}, {0, 0, nil},
	} {
		m := verdictOf(tc.clear, tc.esp, 5, "")
		if (m.shows == nil) != (tc.want == nil) || (m.shows != nil && *m.shows != *tc.want) {
			t.Errorf("clear %d esp %d of 5: shows %v, want %v", tc.clear, tc.esp, m.shows, tc.want)
		}
	}
}

func ptr(b bool) *bool { return &b }

// TestUDPFrame: the frames the XDP scenarios send classify as the
// cleartext flow they stand for, with a valid IPv4 checksum.
func TestUDPFrame(t *testing.T) {
	b := udpFrame([]byte{2, 0, 0, 0, 0, 2}, []byte{2, 0, 0, 0, 0, 1}, xdpSrc, xdpDst)
	f := wire.ClassifyFrame(b)
	if f.Class != wire.Cleartext || !flowOf(xdpSrc, xdpDst).Has(f) || f.Proto != 17 || f.Fragment {
		t.Errorf("udpFrame: %s", f)
	}
	if ipChecksum(b[14:34]) != 0 {
		t.Errorf("IPv4 header checksum does not verify")
	}
}
