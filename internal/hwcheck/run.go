// SPDX-License-Identifier: Apache-2.0

package hwcheck

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"sluice/internal/driverquirk"
	"sluice/internal/kernel"
)

// Options is what a run needs.
type Options struct {
	// Port is the port under test, Peer the one it is cabled to; both in
	// the caller's network namespace, with no address and no master.
	Port, Peer string
	// Profile compares with a NIC model profile (driverquirk.ModelProfiles)
	// instead of the table's rows for the port's driver and kernel.
	Profile string
	// Frames is how many frames each measurement sends (default 5).
	Frames int
	// Only runs these scenarios (names as Scenarios lists them).
	Only []string
	// Log gets progress lines; nil: discarded.
	Log io.Writer
}

// Report is a run's result.
type Report struct {
	Port    string `json:"port"`
	Peer    string `json:"peer"`
	Driver  string `json:"driver"`
	Kernel  string `json:"kernel"`
	Profile string `json:"profile,omitempty"`
	// ExpectedFrom says whose rows the expectations are: the driver table
	// for a driver and version, or a model profile.
	ExpectedFrom string `json:"expected_from"`
	Rows         []Row  `json:"rows"`
}

// Failed reports a run with a row that differs or proved nothing.
func (r Report) Failed() bool { return slices.ContainsFunc(r.Rows, Row.Failed) }

// scenario is one row: the behaviour it measures and how.
type scenario struct {
	name string
	// behaviour is the driver table's row the expectation comes from;
	// zero when the table has none (assumption then says what sluice and
	// the model assume).
	behaviour  driverquirk.Behaviour
	assumption expectation
	outcomes   outcomes
	run        func(ctx context.Context, l *lab, frames int) measurement
}

// scenarios in the order issue 31 lists them.
var scenarios = []scenario{subnetScenario, saDeletedScenario, xdpXmitScenario, replayScenario, oseqScenario, bondScenario}

// Scenarios names the scenarios, for --only and --help.
func Scenarios() []string {
	out := make([]string, len(scenarios))
	for i, s := range scenarios {
		out[i] = s.name
	}
	return out
}

// ErrUnknownProfile: --profile names no model profile.
var ErrUnknownProfile = errors.New("unknown profile")

// Expectations picks the rows the run compares with: a model profile's,
// or the driver table's for driver on the kernel release.
func Expectations(profile, driver, release string) (driverquirk.Set, error) {
	if profile == "" {
		return driverquirk.ForDevice(driver, release, "/"), nil
	}
	if _, ok := driverquirk.ModelProfiles[profile]; !ok {
		known := make([]string, 0, len(driverquirk.ModelProfiles))
		for p := range driverquirk.ModelProfiles {
			known = append(known, p)
		}
		slices.Sort(known)
		return driverquirk.Set{}, fmt.Errorf("--profile %q: %w (known: %s)", profile, ErrUnknownProfile, strings.Join(known, ", "))
	}
	return driverquirk.ForModel(profile, release), nil
}

// Run runs the scenarios on the port pair and compares each with the
// expectations. The ports are back where they were when it returns,
// whatever happened (ctx cancelled by an interrupt included); an error
// is a run that could not measure (a port in use, not cabled, no
// packet offload), not a row that differs.
func Run(ctx context.Context, o Options) (rep Report, err error) {
	if o.Frames <= 0 {
		o.Frames = 5
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	for _, name := range o.Only {
		if !slices.Contains(Scenarios(), name) {
			return Report{}, fmt.Errorf("--only %q: no such scenario (known: %s)", name, strings.Join(Scenarios(), ", "))
		}
	}
	rep = Report{Port: o.Port, Peer: o.Peer, Kernel: release(), Profile: o.Profile}
	driver, _, err := kernel.EthtoolDriver(o.Port)
	if err != nil {
		return rep, fmt.Errorf("--port %s: %w", o.Port, err)
	}
	rep.Driver = driver
	set, err := Expectations(o.Profile, driver, rep.Kernel)
	if err != nil {
		return rep, err
	}
	rep.ExpectedFrom = set.As
	l, err := newLab(ctx, o.Port, o.Peer, o.Log)
	if err != nil {
		return rep, err
	}
	defer func() {
		if cerr := l.close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("cleaning up: %w", cerr))
		}
	}()
	for _, s := range scenarios {
		if len(o.Only) > 0 && !slices.Contains(o.Only, s.name) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		fmt.Fprintf(o.Log, "%s ...\n", s.name)
		e := s.assumption
		if s.behaviour != 0 {
			e = expect(set, s.behaviour)
		}
		m := s.run(ctx, l, o.Frames)
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		rep.Rows = append(rep.Rows, compare(s.name, s.outcomes, e, m))
	}
	return rep, err
}

func release() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Release[:])
}
