// SPDX-License-Identifier: Apache-2.0

package overlay

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"sluice/internal/config"
	"sluice/internal/kernel"
	"sluice/internal/kernel/xfrm"
)

// runner carries the state of one apply: the journal and what auto
// offload obtained.
type runner struct {
	j        *Journal
	obtained map[string]string // "peer/dir" -> offload obtained
	notes    []OffloadNote
	saveErr  error
	// ledger remembers the manual keys installed (keyledger.go); force
	// installs one again anyway.
	ledger *keyLedger
	force  bool
}

func (r *runner) created(e entry) {
	r.j.addCreated(e)
	if err := r.j.save(); err != nil && r.saveErr == nil {
		r.saveErr = err
	}
}

func (r *runner) changed(e entry) {
	r.j.addChanged(e)
	if err := r.j.save(); err != nil && r.saveErr == nil {
		r.saveErr = err
	}
}

// report adds an offload note: n's typed fields, and its sentence made
// from format and args.
func (r *runner) report(n OffloadNote, format string, args ...any) {
	n.Text = fmt.Sprintf(format, args...)
	r.notes = append(r.notes, n)
}

func saKey(w wantSA) string { return w.peer.Name + "/" + w.dir }

// Result is what apply did.
type Result struct {
	// Done counts the steps that ran.
	Done int `json:"steps_done"`
	// Offload reports, per SA asked with auto (or whose offload was
	// checked), what was obtained and why.
	Offload []OffloadNote `json:"offload,omitempty"`
	Journal string        `json:"journal"`
}

// OffloadNote is apply's report on the offload of one SA, or of one IKE
// peer's CHILD_SA (Dir empty). Programs read the typed fields; Text is
// the sentence for a person and may be reworded at any time.
type OffloadNote struct {
	Peer string `json:"peer"`
	// Dir is out or in; empty on an IKE note.
	Dir string `json:"dir,omitempty"`
	SPI uint32 `json:"spi,omitempty"`
	// Asked is the file's mode (none, crypto, packet, auto); Got is what
	// the kernel holds (empty: not known, IKE not up yet).
	Asked string `json:"asked,omitempty"`
	Got   string `json:"got,omitempty"`
	Dev   string `json:"dev,omitempty"`
	// Refused says, per better mode that was not obtained, why (offload
	// auto: "packet refused (...)").
	Refused []string `json:"refused,omitempty"`
	Text    string   `json:"text"`
}

func (n OffloadNote) String() string { return n.Text }

// StepError is a failed step: which, and what the kernel said.
type StepError struct {
	Index int
	Step  Step
	Err   error
	Done  int
}

func (e *StepError) Error() string {
	return fmt.Sprintf("step %d (%s %s) failed: %v\n  equivalent command: %s\n  %d step(s) done before it were kept and journaled; fix the cause and apply again (apply is idempotent), or run teardown",
		e.Index+1, e.Step.Action, e.Step.Object, e.Err, strings.Join(e.Step.Commands, " && "), e.Done)
}

func (e *StepError) Unwrap() error { return e.Err }

// Apply runs the plan's steps in order and stops at the first failure.
// Every object created and every attribute changed is journaled (in
// stateDir) as soon as it is done, so a failed apply can be completed by
// applying again, or undone by teardown. progress, when not nil, gets one
// line per step.
func Apply(plan *Plan, stateDir string, progress io.Writer) (*Result, error) {
	j, _, err := LoadJournal(stateDir, plan.Name, plan.File)
	if err != nil {
		return nil, err
	}
	r := &runner{j: j, obtained: map[string]string{}, force: plan.Force}
	res := &Result{Journal: j.path}
	for i, s := range plan.Steps {
		if progress != nil {
			fmt.Fprintf(progress, "[%d/%d] %s %s\n", i+1, len(plan.Steps), s.Action, s.Object)
		}
		if err := s.run(r); err != nil {
			res.Offload = r.notes
			return res, &StepError{Index: i, Step: s, Err: err, Done: i}
		}
		res.Done++
		if r.saveErr != nil {
			return res, fmt.Errorf("step %d done, but the journal could not be written: %w", i+1, r.saveErr)
		}
	}
	res.Offload = r.notes
	if len(j.Created)+len(j.Changed) > 0 {
		if err := j.save(); err != nil {
			return res, err
		}
	}
	return res, nil
}

// offloadFor builds the XFRMA_OFFLOAD_DEV of mode m on dev for an SA in
// direction dir.
func offloadFor(m, dev, dir string, policy bool) (*xfrm.Offload, error) {
	if m == config.OffloadModeNone {
		return nil, nil
	}
	l, err := kernel.Link(dev)
	if err != nil {
		// The plan found it; it went away since.
		return nil, fmt.Errorf("%w (check the name with `ip link`)", err)
	}
	o := &xfrm.Offload{Ifindex: l.Ifindex}
	if m == config.OffloadModePacket {
		o.Flags |= xfrm.OffloadPacket
	}
	if dir == "in" && !policy {
		o.Flags |= xfrm.OffloadInbound
	}
	return o, nil
}

// liveOffload reads back what the kernel made of an SA.
func liveOffload(w wantSA) (string, string, error) {
	sas, err := xfrm.StateDetails(false)
	if err != nil {
		return "", "", err
	}
	for _, s := range sas {
		if s.Dst == w.dst && s.SPI == w.spi && s.Proto == protoESP {
			dev := ""
			if s.Offload != nil {
				if l, err := kernel.LinkByIndex(s.Offload.Ifindex); err == nil {
					dev = l.Name
				}
			}
			return offloadOf(s.Offload), dev, nil
		}
	}
	return "", "", fmt.Errorf("%s vanished right after it was added", w)
}

// addSA installs one SA. With offload auto it tries packet, then crypto,
// then none, and reports which it got and why the others failed. The
// kernel installs a crypto-offload SA without offload, silently, when the
// device has no IPsec offload ops (or its driver answers EOPNOTSUPP): so
// what was obtained is read back, never assumed.
func (r *runner) addSA(w wantSA) error {
	pr := w.peer
	modes := []string{w.offload}
	if w.offload == config.OffloadModeAuto {
		modes = []string{config.OffloadModePacket, config.OffloadModeCrypto, config.OffloadModeNone}
	}
	if !w.carried {
		if err := r.checkKey(w); err != nil {
			return err
		}
	}
	if w.offload != config.OffloadModeNone {
		if err := waitActivePort(pr.OffloadDev, 3*time.Second); err != nil {
			return err
		}
	}
	var refused []string
	for _, m := range modes {
		dev, err := applyDev(pr, m)
		if err != nil {
			return fmt.Errorf("%s: %w", w, err)
		}
		off, err := offloadFor(m, dev, w.dir, false)
		if err != nil {
			return err
		}
		err = xfrm.StateAddESP(xfrm.ESPState{Src: w.src, Dst: w.dst, SPI: w.spi, Reqid: w.reqid, Tunnel: pr.Mode == config.ModeTunnel,
			AEAD: AEAD, Key: w.key.Bytes(), ICVBits: ICVBits, ESN: pr.ESN, ReplayWindow: pr.ReplayWindow, Offload: off, OSeq: w.oseq, Seq: w.seq})
		if errors.Is(err, xfrm.ErrSeqAbove32Bits) {
			return fmt.Errorf("%s: %w: use a new key", w, err) // no offload mode can carry it over
		}
		if err != nil {
			if w.offload == config.OffloadModeAuto && m != config.OffloadModeNone {
				refused = append(refused, fmt.Sprintf("%s refused (%v)", m, trimErr(err)))
				continue
			}
			return fmt.Errorf("%s: %w", w, err)
		}
		got, dev, err := liveOffload(w)
		if err != nil {
			return err
		}
		if got != m {
			_ = xfrm.StateDelete(w.dst, w.spi)
			why := fmt.Sprintf("%s accepted but installed with offload %s: %s has no ESP offload for it (no xfrmdev_ops, or the driver declined)", m, got, pr.OffloadDev)
			if w.offload == config.OffloadModeAuto {
				refused = append(refused, why)
				continue
			}
			return fmt.Errorf("%s: offload %s was asked for; the kernel %s; the SA was removed again. Check `ethtool -k %s | grep esp`, or use offload: auto or none", w, m, strings.TrimPrefix(why, m+" "), pr.OffloadDev)
		}
		r.created(entry{Kind: kindSA, Dst: w.dst.String(), SPI: w.spi, Src: w.src.String()})
		if err := r.recordKey(w); err != nil {
			return err
		}
		r.obtained[saKey(w)] = m
		note := OffloadNote{Peer: pr.Name, Dir: w.dir, SPI: w.spi, Asked: w.offload, Got: m, Dev: dev, Refused: refused}
		switch {
		case w.offload == config.OffloadModeAuto:
			msg := fmt.Sprintf("%s: offload auto -> %s", w, m)
			if dev != "" {
				msg += " on " + dev
			}
			if len(refused) > 0 {
				msg += ": " + strings.Join(refused, "; ")
			}
			r.report(note, "%s", msg)
		case m != config.OffloadModeNone:
			r.report(note, "%s: offload %s on %s", w, m, dev)
		}
		return nil
	}
	return fmt.Errorf("%s: no offload mode worked: %s", w, strings.Join(refused, "; "))
}

// waitActivePort waits until a bond has an active port: the bonding
// driver offloads an SA to its active port and refuses it (ENODEV) while
// it has none, which is the case for up to one miimon period after the
// bond comes up with its ports. Not a bond: nothing to wait for.
func waitActivePort(dev string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		active, isBond, err := kernel.BondActiveSlave(dev)
		if err != nil || !isBond || active != "" {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bond %s has no active port after %s: offload goes to the active port, so bring a port's link up (ip link show master %s)", dev, limit, dev)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func trimErr(err error) string {
	return strings.TrimSpace(strings.ReplaceAll(err.Error(), "\n", " "))
}

// addPolicy installs (or updates) one policy; packet offload follows what
// the SA obtained for offload auto.
func (r *runner) addPolicy(w wantSA, pol xfrm.ESPPolicy, update bool) error {
	pr := w.peer
	packet := w.offload == config.OffloadModePacket
	if w.offload == config.OffloadModeAuto {
		if m, ok := r.obtained[saKey(w)]; ok {
			packet = m == config.OffloadModePacket
		} else {
			got, _, err := liveOffload(w)
			if err != nil {
				return err
			}
			packet = got == config.OffloadModePacket
		}
	}
	if pol.Dir == xfrm.DirFwd {
		packet = false
	}
	if packet {
		// On the SA's device: a packet-offloaded policy finds only SAs
		// offloaded to its own device (xfrm_state_find).
		dev := pr.OffloadDev
		if _, d, err := liveOffload(w); err == nil && d != "" {
			dev = d
		}
		off, err := offloadFor(config.OffloadModePacket, dev, w.dir, true)
		if err != nil {
			return err
		}
		pol.Offload = off
	}
	if err := xfrm.PolicyAdd(pol, update); err != nil {
		return err
	}
	if !update {
		r.created(entry{Kind: kindPolicy, Dir: pol.Dir.String(), Src: pol.Src.String(), Dst: pol.Dst.String()})
	}
	return nil
}
