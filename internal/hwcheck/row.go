// SPDX-License-Identifier: Apache-2.0

package hwcheck

import (
	"fmt"

	"sluice/internal/driverquirk"
)

// Verdict is a row's outcome.
type Verdict string

const (
	// Same: the port did what sluice assumes.
	Same Verdict = "model = hardware"
	// Differs: the port did the other thing; the model (and sluice's
	// driver table) are wrong for this driver, or the port is.
	Differs Verdict = "differs"
	// NotRun: the scenario needs what this run does not have (Row.Why).
	NotRun Verdict = "not run"
	// Inconclusive: the scenario ran but the wire showed neither
	// outcome (Row.Why): it proves nothing, and fails the run.
	Inconclusive Verdict = "inconclusive"
)

// Row is one scenario's result.
type Row struct {
	Scenario string `json:"scenario"`
	// Behaviour is the driver behaviour the scenario proves or refutes
	// (internal/driverquirk's name; a model assumption otherwise).
	Behaviour string `json:"behaviour"`
	// Expected is what the profile says the port does, Measured what it
	// did (empty when not run).
	Expected string  `json:"expected"`
	Measured string  `json:"measured,omitempty"`
	Verdict  Verdict `json:"verdict"`
	// Why a row did not run or proved nothing.
	Why string `json:"why,omitempty"`
	// Evidence is what the capture counted.
	Evidence string `json:"evidence,omitempty"`
}

// Failed reports a row that fails the run.
func (r Row) Failed() bool { return r.Verdict == Differs || r.Verdict == Inconclusive }

// expectation is what the profile says of one scenario's behaviour.
type expectation struct {
	behaviour string
	shows     bool
	// source: where the assumption comes from (a driverquirk row's source,
	// or the model's README for an assumption the table has no row for).
	source string
}

// measurement is what a scenario saw on the wire.
type measurement struct {
	// shows: the port showed the behaviour; nil: neither outcome (why).
	shows    *bool
	why      string
	evidence string
	// notRun says why the scenario could not run.
	notRun string
}

func showed(b bool, evidence string) measurement { return measurement{shows: &b, evidence: evidence} }

func inconclusive(why, evidence string) measurement {
	return measurement{why: why, evidence: evidence}
}

// outcomes names a scenario's two outcomes on the wire: yes when the
// behaviour shows, no when it does not.
type outcomes struct{ yes, no string }

func (o outcomes) say(shows bool) string {
	if shows {
		return o.yes
	}
	return o.no
}

// compare makes a scenario's row.
func compare(scenario string, o outcomes, e expectation, m measurement) Row {
	r := Row{Scenario: scenario, Behaviour: e.behaviour, Expected: o.say(e.shows), Evidence: m.evidence}
	switch {
	case m.notRun != "":
		r.Verdict, r.Why = NotRun, m.notRun
	case m.shows == nil:
		r.Verdict, r.Why = Inconclusive, m.why
	default:
		r.Measured = o.say(*m.shows)
		r.Verdict = Same
		if *m.shows != e.shows {
			r.Verdict = Differs
		}
	}
	return r
}

// expect reads a behaviour's expectation from the driver table's rows.
func expect(set driverquirk.Set, b driverquirk.Behaviour) expectation {
	e, ok := set.Get(b)
	x := expectation{behaviour: b.String(), shows: ok}
	if ok {
		x.source = e.Source
	} else {
		x.source = fmt.Sprintf("no row of %s for %s", b, set.As)
	}
	return x
}
