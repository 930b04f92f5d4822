// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"sluice/internal/config"
	"sluice/internal/fileread"
	"sluice/internal/fleet"
	"sluice/internal/overlay"
)

// Results of one reconcile (Host status lastApply.result).
const (
	ResultApplied     = "Applied"
	ResultNothingToDo = "NothingToDo"
	ResultRefused     = "Refused"
	ResultFailed      = "Failed"
	ResultOrphaned    = "Orphaned"
	ResultTornDown    = "TornDown"
	// ResultHeld: the new desired state would remove more than half of
	// the overlay's members at once; the last applied state stays until
	// the change is confirmed (see massRemoval).
	ResultHeld = "Held"
)

// Outcome is what one reconcile did.
type Outcome struct {
	Result  string
	Steps   int
	Digest  string
	Message string
	// Drift is true when the desired state was already applied and the
	// host had moved away from it (the steps repaired it).
	Drift bool
	// Report is the verification after the reconcile: every SA with the
	// offload the kernel holds.
	Report *overlay.VerifyReport
	// OffloadNotes are apply's per-SA offload reports (what auto got and
	// why the better modes were refused).
	OffloadNotes []overlay.OffloadNote
	// Held are the IKE initiations held back (not this host's turn);
	// Initiated counts those run (in Steps: an initiation changes no
	// configuration, it asks charon to negotiate).
	Held      []string
	Initiated int
}

// stored is the last desired state applied without error, kept in the
// state directory so that a restarted agent prunes against it and rolls
// back to it, even before the API answers.
type stored struct {
	Doc            []byte `json:"doc"`
	File           string `json:"file"`
	Digest         string `json:"digest"`
	Overlay        string `json:"overlay,omitempty"`
	DeletionPolicy string `json:"deletionPolicy,omitempty"`
	// Settings are the overlay's renegotiating settings as it spelled
	// them (rollout.go).
	Settings *rawSettings `json:"settings,omitempty"`
}

// Reconciler keeps one host in its desired state with the overlay
// engine: plan, prune what the previous state had and this one does not,
// apply; on a failed step, roll back to the last good state. It never
// writes a half-applied state as good.
type Reconciler struct {
	// StateDir keeps the last good state across reboots (on disk).
	StateDir string
	// RunDir holds the apply journal: what apply created on this boot's
	// kernel, so it lives on tmpfs and starts empty after a reboot.
	RunDir string
	// InNS runs f in the host's network namespace (the agent's own by
	// default; tests run several hosts in one process).
	InNS func(f func() error) error
	Logf func(format string, args ...any)
	name string
	last *stored
	// applied is the digest applied during this process's life: a plan
	// with steps for the same digest is drift.
	applied string
}

// NewReconciler loads the last good state of agent name from stateDir;
// runDir holds the apply journals.
func NewReconciler(stateDir, runDir, name string, logf func(string, ...any)) (*Reconciler, error) {
	r := &Reconciler{StateDir: stateDir, RunDir: runDir, Logf: logf, name: name, InNS: func(f func() error) error { return f() }}
	b, err := fileread.Read(r.lastPath(), fileread.StateLimit)
	if errors.Is(err, os.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return nil, err
	}
	var s stored
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w (delete it: the agent then starts without a last good state)", r.lastPath(), err)
	}
	r.last = &s
	return r, nil
}

func (r *Reconciler) lastPath() string {
	return filepath.Join(r.StateDir, "agent-"+r.name+".last.json")
}

func (r *Reconciler) runDir() string {
	if r.RunDir == "" {
		return r.StateDir
	}
	return r.RunDir
}

// LastGood is the digest of the last good state ("" : none).
func (r *Reconciler) LastGood() (digest, overlayName string) {
	if r.last == nil {
		return "", ""
	}
	return r.last.Digest, r.last.Overlay
}

// LastDeletionPolicy is the deletion policy of the last applied overlay.
func (r *Reconciler) LastDeletionPolicy() string {
	if r.last == nil {
		return ""
	}
	return r.last.DeletionPolicy
}

// save writes the last good state atomically and durably: a new file,
// synced, renamed over the old one, the directory synced; a crash or a
// power cut leaves the old state or the new one, never half of one.
func (r *Reconciler) save(s *stored) error {
	if err := os.MkdirAll(r.StateDir, 0o700); err != nil {
		return err
	}
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	if err := writeDurable(r.lastPath(), b); err != nil {
		return err
	}
	r.last = s
	return nil
}

func writeDurable(path string, b []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Desired is one reconcile's input.
type Desired struct {
	Doc            []byte
	File           string
	Overlay        string
	DeletionPolicy string
	// Settings are the overlay's renegotiating settings (kept with the
	// last good state; nil from a file).
	Settings *rawSettings
	// Gate says whether the IKE initiation of a peer may run now (nil:
	// all may).
	Gate func(peer string) bool
}

// parse reads a desired document as overlay.Load reads a file: the host,
// and its key file when a peer is keyed manually.
func parse(doc []byte, file string) (*config.Host, *config.Keys, error) {
	h, err := config.ParseHost(doc, file)
	if err != nil {
		return nil, nil, err
	}
	keys, err := h.ManualKeys()
	if err != nil {
		return nil, nil, err
	}
	return h, keys, nil
}

// Reconcile makes the host hold d.
func (r *Reconciler) Reconcile(d Desired) Outcome {
	out := Outcome{Digest: fleet.Digest(d.Doc)}
	h, keys, err := parse(d.Doc, d.File)
	if err != nil {
		out.Result, out.Message = ResultRefused, err.Error()
		return out
	}
	var prev *config.Host
	if r.last != nil {
		if p, _, err := parse(r.last.Doc, r.last.File); err == nil && p.Name == h.Name {
			prev = p
		}
	}
	err = r.InNS(func() error {
		live, err := overlay.ReadLive(h)
		if err != nil {
			return err
		}
		plan, err := overlay.NewPlan(h, keys, live)
		if err != nil {
			out.Result, out.Message = ResultRefused, err.Error()
			return nil
		}
		plan.Steps, out.Held = gate(plan.Steps, d.Gate)
		j, _, err := overlay.LoadJournal(r.runDir(), h.Name, h.File)
		if err != nil {
			return err
		}
		var prune *overlay.Plan
		if prev != nil && r.last.Digest != out.Digest {
			prune = overlay.NewPrune(prev, h, live, j)
		}
		if plan.Empty() && (prune == nil || prune.Empty()) {
			out.Result = ResultNothingToDo
		} else {
			// Drift: the state was applied and the host moved away from
			// it. An IKE initiation alone is not drift: the SA is not up
			// yet (the peer was down, or its slot came).
			out.Drift = (r.applied == out.Digest || (r.applied == "" && r.last != nil && r.last.Digest == out.Digest)) && !onlyInitiations(plan)
			if prune != nil && !prune.Empty() {
				n, err := overlay.Prune(prune, j)
				out.Steps += n
				r.logSteps("pruned", prune, n)
				if err != nil {
					out.Result, out.Message = ResultFailed, "removing what the previous state had: "+err.Error()
					return nil
				}
			}
			res, err := overlay.Apply(plan, r.runDir(), nil)
			if res != nil {
				out.Steps += res.Done
				for i, st := range plan.Steps {
					if i < res.Done && st.IKEPeer != "" {
						out.Initiated++
					}
				}
				out.OffloadNotes = res.Offload
				verb := "applied"
				if out.Drift {
					verb = "drift repaired"
				} else if onlyInitiations(plan) {
					verb = "initiated"
				}
				r.logSteps(verb, plan, res.Done)
			}
			if err != nil {
				out.Result, out.Message = ResultFailed, err.Error()
				out.Message += "; " + r.rollback(h, prev)
				return nil
			}
			out.Result = ResultApplied
		}
		out.Report = overlay.Verify(h, keys, mustLive(h, live))
		return nil
	})
	if err != nil {
		out.Result, out.Message = ResultFailed, err.Error()
	}
	if out.Result == ResultApplied || out.Result == ResultNothingToDo {
		r.applied = out.Digest
		if r.last == nil || r.last.Digest != out.Digest {
			if err := r.save(&stored{Doc: d.Doc, File: d.File, Digest: out.Digest, Overlay: d.Overlay, DeletionPolicy: d.DeletionPolicy, Settings: d.Settings}); err != nil {
				out.Message = "applied, but the last good state could not be saved: " + err.Error()
			}
		}
	}
	return out
}

// mustLive reads the host again after a change (verify compares with
// what is there now); on error it falls back to the state read before.
func mustLive(h *config.Host, before *overlay.Live) *overlay.Live {
	l, err := overlay.ReadLive(h)
	if err != nil {
		return before
	}
	return l
}

// rollback puts back the last good state after a failed apply: it removes
// what the failed state added beyond it, then applies it. Runs in the
// namespace already.
func (r *Reconciler) rollback(failed, prev *config.Host) string {
	j, _, err := overlay.LoadJournal(r.runDir(), failed.Name, failed.File)
	if err != nil {
		return "rollback: " + err.Error()
	}
	live, err := overlay.ReadLive(failed)
	if err != nil {
		return "rollback: " + err.Error()
	}
	if prev == nil {
		// No good state yet: undo everything the failed apply did.
		n, err := overlay.Teardown(overlay.NewTeardown(failed, live, j, true), j, nil)
		if err != nil {
			return fmt.Sprintf("rollback (teardown of the partial apply, %d step(s)) failed: %v", n, err)
		}
		return fmt.Sprintf("rolled back: the %d step(s) of the partial apply were undone", n)
	}
	keys, _ := prev.ManualKeys()
	n, err := overlay.Prune(overlay.NewPrune(failed, prev, live, j), j)
	if err != nil {
		return fmt.Sprintf("rollback: removing the failed state's additions: %v", err)
	}
	if live, err = overlay.ReadLive(prev); err != nil {
		return "rollback: " + err.Error()
	}
	plan, err := overlay.NewPlan(prev, keys, live)
	if err != nil {
		return "rollback: " + err.Error()
	}
	plan.Force = true // the last good state's own keys, put back
	res, err := overlay.Apply(plan, r.runDir(), nil)
	if err != nil {
		return "rollback to the last good state failed: " + err.Error()
	}
	return fmt.Sprintf("rolled back to the last good state %s (%d step(s) removed, %d re-applied)", r.last.Digest, n, res.Done)
}

// Teardown removes what the last good state applied (deletionPolicy
// Teardown, or the host left its overlay) and forgets it.
func (r *Reconciler) Teardown() Outcome {
	if r.last == nil {
		return Outcome{Result: ResultNothingToDo}
	}
	out := Outcome{Digest: r.last.Digest}
	h, _, err := parse(r.last.Doc, r.last.File)
	if err != nil {
		return Outcome{Result: ResultFailed, Message: err.Error()}
	}
	err = r.InNS(func() error {
		live, err := overlay.ReadLive(h)
		if err != nil {
			return err
		}
		j, has, err := overlay.LoadJournal(r.runDir(), h.Name, h.File)
		if err != nil {
			return err
		}
		p := overlay.NewTeardown(h, live, j, has)
		n, err := overlay.Teardown(p, j, nil)
		out.Steps = n
		r.logSteps("tore down", p, n)
		return err
	})
	if err != nil {
		out.Result, out.Message = ResultFailed, err.Error()
		return out
	}
	out.Result = ResultTornDown
	_ = os.Remove(r.lastPath())
	r.last, r.applied = nil, ""
	return out
}

func (r *Reconciler) logSteps(verb string, p *overlay.Plan, n int) {
	if r.Logf == nil || n == 0 {
		return
	}
	for i, s := range p.Steps {
		if i >= n {
			break
		}
		r.Logf("%s: [%s] %s %s: %s", verb, s.Section, s.Action, s.Object, s.Why)
	}
}

func onlyInitiations(p *overlay.Plan) bool {
	for _, s := range p.Steps {
		if s.IKEPeer == "" {
			return false
		}
	}
	return true
}

// gate drops the IKE initiations the gate holds back (the steps with an
// IKEPeer, the plan's last): the trap policies are loaded, so traffic is
// held for IKE, never sent in clear, and the pair's initiator starts it in
// its slot.
func gate(steps []overlay.Step, g func(string) bool) ([]overlay.Step, []string) {
	if g == nil {
		return steps, nil
	}
	var keep []overlay.Step
	var held []string
	for _, s := range steps {
		if s.IKEPeer != "" && !g(s.IKEPeer) {
			held = append(held, s.IKEPeer)
			continue
		}
		keep = append(keep, s)
	}
	return keep, held
}
