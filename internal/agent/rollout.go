// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"slices"
	"sort"
	"strings"
	"time"

	"sluice/internal/config"
	"sluice/internal/fleet"
	"sluice/internal/fleet/v1alpha1"
)

// A staged rollout. An edit of the Overlay's offload, keying.rekeyTime or
// keying.lifeTime changes every IKE connection of every member: applied
// by all at once it renegotiates every pair of the mesh together. So the
// agents take it in turns, with no leader: each orders the members by
// name, cuts them into batches of spec.rollout.maxUnavailable, and
// applies the new settings only when every host of the batches before
// its own reports them in its status (status.rollout) with state Done:
// every tunnel that was up before it renegotiated is up again. Until its
// turn a host keeps its settings and follows every other change (a peer
// that joins or leaves, a new segment) at once. A host whose apply fails,
// or whose tunnels stay down past progressDeadlineSeconds, reports Failed
// and the hosts after it wait: the failure reaches one batch, not the
// fleet. It resumes by itself once that host succeeds (it retries with
// the backoff), or when the administrator takes the host out of the
// overlay.
//
// Other edits that change the SAs (keyBits, ipsecMode, encapsulation)
// change what both ends of a pair must agree on: a host with the new
// proposal and one with the old cannot negotiate, so staging would hold
// each pair down until its second end's turn. They apply at once.

// saSettings are the settings whose change renegotiates every SA of a
// host, as the engine reads them from a host document (so "" and 1h,
// or 60m and 1h, are one setting).
type saSettings struct {
	offload             string // packet, auto, crypto, none
	rekeyTime, lifeTime time.Duration
}

var offloadPolicy = map[string]string{
	config.OffloadModePacket: v1alpha1.OffloadRequirePacket,
	config.OffloadModeAuto:   v1alpha1.OffloadPreferPacket,
	config.OffloadModeCrypto: v1alpha1.OffloadCrypto,
	config.OffloadModeNone:   v1alpha1.OffloadNone,
}

// String is the settings as the status shows them; every agent computes
// the same string for the same overlay (the turns compare them).
func (s saSettings) String() string {
	return fmt.Sprintf("offload=%s rekeyTime=%s lifeTime=%s", offloadPolicy[s.offload], s.rekeyTime, s.lifeTime)
}

// docSettings reads the settings of a rendered host document (ok false:
// it has no IKE peer).
func docSettings(doc []byte, file string) (saSettings, bool) {
	h, _, err := parse(doc, file)
	if err != nil || h.IPsec == nil || h.IPsec.IKE == nil || len(h.IPsec.Peers) == 0 {
		return saSettings{}, false
	}
	return saSettings{offload: h.IPsec.Peers[0].Offload, rekeyTime: h.IPsec.IKE.RekeyTime, lifeTime: h.IPsec.IKE.LifeTime}, true
}

// rawSettings are the same settings as the Overlay spells them, kept
// with the last good state so that a waiting host renders exactly the
// document it applied.
type rawSettings struct {
	Offload   string `json:"offload,omitempty"`
	RekeyTime string `json:"rekeyTime,omitempty"`
	LifeTime  string `json:"lifeTime,omitempty"`
}

func rawOf(o *v1alpha1.Overlay) *rawSettings {
	return &rawSettings{Offload: o.Spec.Offload, RekeyTime: o.Spec.Keying.RekeyTime, LifeTime: o.Spec.Keying.LifeTime}
}

// heldSettings are the settings of the last good state of overlay ov.
func (a *Agent) heldSettings(ov string) (saSettings, bool) {
	last := a.rec.last
	if last == nil || last.Overlay != ov {
		return saSettings{}, false
	}
	return docSettings(last.Doc, last.File)
}

// withSettings is a copy of overlays where ov holds the settings of the
// last good state: what this host renders while it waits for its turn.
// A state saved before rollouts were staged has no raw settings: they
// are spelled from the document's.
func (a *Agent) withSettings(overlays []v1alpha1.Overlay, ov *v1alpha1.Overlay, held saSettings) []v1alpha1.Overlay {
	raw := a.rec.last.Settings
	if raw == nil {
		raw = &rawSettings{Offload: offloadPolicy[held.offload], RekeyTime: held.rekeyTime.String(), LifeTime: held.lifeTime.String()}
	}
	out := slices.Clone(overlays)
	for i := range out {
		if out[i].Namespace == ov.Namespace && out[i].Name == ov.Name {
			out[i].Spec.Offload = raw.Offload
			out[i].Spec.Keying.RekeyTime, out[i].Spec.Keying.LifeTime = raw.RekeyTime, raw.LifeTime
		}
	}
	return out
}

// turn says whether host self may apply settings target now: every
// member in the batches before its own reports target, Done. why says
// what it waits for (for the log: it changes as the hosts before it
// move); failed names a host that failed the rollout; batch is the
// host's place ("batch 3 of 10, 2 host(s) at a time"), which does not
// change while it waits.
func turn(self string, o *v1alpha1.Overlay, hosts []v1alpha1.Host, target string) (ok bool, why string, failed bool, batch string) {
	names := append(selected(o, hosts, self), self)
	sort.Strings(names)
	size := max(o.Spec.Rollout.MaxUnavailable, 1)
	i := slices.Index(names, self)
	before := names[:i/size*size]
	byName := map[string]*v1alpha1.Host{}
	for j := range hosts {
		byName[hosts[j].Name] = &hosts[j]
	}
	batch = fmt.Sprintf("batch %d of %d, %d host(s) at a time, by name", i/size+1, (len(names)+size-1)/size, size)
	var waits []string
	for _, n := range before {
		r := byName[n].Status.Rollout
		switch {
		case r == nil || r.Overlay != o.Name:
			waits = append(waits, n+" has not reported its rollout state (is its agent running?)")
		case r.State == v1alpha1.RolloutFailed:
			return false, fmt.Sprintf("held: host %s failed the rollout of %s: %s", n, target, r.Message), true, batch
		case r.Settings != target:
			waits = append(waits, n+" has not applied it yet")
		case r.State != v1alpha1.RolloutDone:
			waits = append(waits, n+"'s tunnels are not back up yet")
		}
	}
	if len(waits) == 0 {
		return true, "", false, batch
	}
	if len(waits) > 4 {
		waits = append(waits[:4], fmt.Sprintf("and %d more", len(waits)-4))
	}
	return false, fmt.Sprintf("waiting for its turn (%s) to apply %s: %s", batch, target, strings.Join(waits, "; ")), false, batch
}

// rollout is this host's progress through a rollout of target.
type rollout struct {
	overlay, target string
	state, message  string
	// upBefore are the peers whose tunnels were up before the host
	// renegotiated: the ones that must come back.
	upBefore []string
	// turn: this host's turn came; applied: when it first held target.
	turn    bool
	applied time.Time
	// heldBy: it waits behind a host that failed; why: what it waits
	// for, as last logged.
	heldBy bool
	why    string
}

// stage decides, before rendering, whether this host takes a
// renegotiating edit of its overlay now. It returns the overlays to
// render (ov with the held settings while the host waits) and the
// rollout key (part of the reconcile key: a turn that comes is a change).
func (a *Agent) stage(overlays []v1alpha1.Overlay, hosts []v1alpha1.Host, d fleet.Desired) ([]v1alpha1.Overlay, string) {
	if d.Overlay == nil || len(d.Peers) == 0 {
		return overlays, ""
	}
	o := d.Overlay
	want, ok := docSettings(d.Doc, fleet.OverlayName(o)+".yaml")
	held, has := a.heldSettings(o.Namespace + "/" + o.Name)
	a.mu.Lock()
	defer a.mu.Unlock()
	r := a.roll
	if !ok || !has || held == want {
		// Nothing to renegotiate (or a new member, which starts with the
		// overlay's settings): Done, unless still waiting for tunnels.
		if r == nil || r.overlay != o.Name || r.target != want.String() {
			a.roll = &rollout{overlay: o.Name, target: want.String(), state: v1alpha1.RolloutDone}
		}
		return overlays, ""
	}
	target := want.String()
	if r == nil || r.overlay != o.Name || r.target != target {
		r = &rollout{overlay: o.Name, target: target, state: v1alpha1.RolloutWaiting}
		a.roll = r
	}
	mine, why, failed, batch := turn(a.o.Name, o, hosts, target)
	if !mine && !r.turn {
		if why != r.why {
			a.logf("rollout: %s", why)
			r.why = why
		}
		// The status says only what changes rarely: every status write
		// is a watch event for every agent, and a message naming the
		// hosts ahead would change on every host at every turn.
		msg := fmt.Sprintf("waiting for its turn (%s) to apply %s; it holds %s (the agent's log names the hosts it waits for)", batch, target, held)
		if failed {
			msg = why
		}
		r.state, r.message, r.heldBy = v1alpha1.RolloutWaiting, msg, failed
		return a.withSettings(overlays, o, held), "wait:" + msg
	}
	if !r.turn {
		// Once its turn came it stays: a host before it that fails
		// later does not make this one roll back.
		a.logf("rollout: this host's turn to apply %s (it holds %s)", target, held)
		r.turn, r.heldBy, r.message, r.upBefore = true, false, "", upPeers(a.lastTruth)
	}
	return overlays, "go:" + target
}

// staged records what the reconcile did for the rollout and checks the
// tunnels of a host that renegotiated. Called after done (a.lastTruth
// is this reconcile's).
func (a *Agent) staged(o *v1alpha1.Overlay, out Outcome) {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := a.roll
	if r == nil || o == nil || r.overlay != o.Name || r.state == v1alpha1.RolloutDone {
		return
	}
	held, has := a.heldSettings(o.Namespace + "/" + o.Name)
	now := time.Now()
	if !has || held.String() != r.target {
		// Its turn came and the new settings are not held: the apply
		// failed (and rolled back) or was refused.
		if r.turn && (out.Result == ResultFailed || out.Result == ResultRefused) {
			if r.state != v1alpha1.RolloutFailed {
				a.logf("rollout of %s failed on this host, the hosts after it wait: %s", r.target, out.Message)
				a.Metrics.rolloutFailures.Inc()
			}
			r.state, r.message = v1alpha1.RolloutFailed, "applying "+r.target+": "+out.Message
		}
		return
	}
	if r.applied.IsZero() {
		r.applied = now
		r.state, r.message = v1alpha1.RolloutProgressing, ""
	}
	up := upPeers(a.lastTruth)
	var down []string
	for _, p := range r.upBefore {
		if _, peer := a.firstSeen[p]; peer && !slices.Contains(up, p) {
			down = append(down, p) // a peer that left need not come back
		}
	}
	deadline := time.Duration(o.Spec.Rollout.ProgressDeadlineSeconds) * time.Second
	if deadline <= 0 {
		deadline = 10 * time.Minute
	}
	switch {
	case len(down) == 0:
		r.state, r.message = v1alpha1.RolloutDone, ""
		a.logf("rollout: %s applied, every tunnel that was up before is up again", r.target)
	case now.Sub(r.applied) > deadline:
		if r.state != v1alpha1.RolloutFailed {
			a.Metrics.rolloutFailures.Inc()
			a.logf("rollout of %s failed on this host: the tunnels to %s are not back up after %s; the hosts after it wait", r.target, strings.Join(down, ", "), deadline)
		}
		r.state = v1alpha1.RolloutFailed
		r.message = fmt.Sprintf("applied %s, but the tunnels to %s are not back up after %s (spec.rollout.progressDeadlineSeconds)", r.target, strings.Join(down, ", "), deadline)
	default:
		r.message = fmt.Sprintf("applied %s; waiting for the tunnels to %s to come back", r.target, strings.Join(down, ", "))
	}
}

// upPeers are the peers with their SA pair in the kernel.
func upPeers(ts []SATruth) []string {
	dirs := map[string]map[string]bool{}
	for _, t := range ts {
		if dirs[t.Peer] == nil {
			dirs[t.Peer] = map[string]bool{}
		}
		dirs[t.Peer][t.Dir] = true
	}
	var up []string
	for p, d := range dirs {
		if d["in"] && d["out"] {
			up = append(up, p)
		}
	}
	sort.Strings(up)
	return up
}

// rolloutStatus is the host's status.rollout (nil: in no rollout).
func (a *Agent) rolloutStatus() *v1alpha1.HostRollout {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := a.roll
	if r == nil {
		return nil
	}
	settings := r.target
	if r.state == v1alpha1.RolloutWaiting || r.state == v1alpha1.RolloutFailed {
		if a.rec != nil && a.rec.last != nil {
			if h, ok := a.heldSettings(a.rec.last.Overlay); ok {
				settings = h.String()
			}
		}
	}
	return &v1alpha1.HostRollout{Overlay: r.overlay, Settings: settings, State: r.state, Message: clip(r.message, 1024)}
}

// rolloutState is the state the metric and the condition show: Held is
// Waiting behind a host that failed ("" : in no rollout).
func (a *Agent) rolloutState() (state, message string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.roll == nil {
		return "", ""
	}
	if a.roll.state == v1alpha1.RolloutWaiting && a.roll.heldBy {
		return "Held", a.roll.message
	}
	return a.roll.state, a.roll.message
}

// rolloutCondition is the Rollout condition: True when the host holds its
// overlay's settings with its tunnels back up; False with the state as
// the reason (Waiting, Held, Progressing, Failed). ok false: in no
// rollout.
func (a *Agent) rolloutCondition(gen int64) (metav1.Condition, bool) {
	state, msg := a.rolloutState()
	if state == "" {
		return metav1.Condition{}, false
	}
	c := metav1.Condition{Type: "Rollout", Status: metav1.ConditionFalse, Reason: state, Message: clip(msg, 32768), ObservedGeneration: gen}
	if state == v1alpha1.RolloutDone {
		c.Status, c.Message = metav1.ConditionTrue, "the host holds its overlay's settings"
	}
	if c.Message == "" {
		c.Message = state
	}
	return c, true
}
