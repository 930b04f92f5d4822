// SPDX-License-Identifier: Apache-2.0

// Package agent is `sluice agent`: one per host, it keeps the host in its
// desired state with the overlay engine (plan, apply, verify) and reports
// the offload truth of every SA, as Host status and Prometheus metrics.
// The desired state comes from the Kubernetes API (Overlay and Host
// objects, rendered by internal/fleet into a host.yaml document) or from a
// local host.yaml; both go through the same Reconciler.
package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sluice/internal/fileread"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"sluice/internal/fleet"
	"sluice/internal/fleet/v1alpha1"
	"sluice/internal/overlay"
)

// Options configure an agent.
type Options struct {
	// Name is this host's name (its Host object).
	Name string
	// File runs the agent from a local host.yaml, without Kubernetes.
	File string
	// Kubeconfig (or REST, for tests) reaches the API; neither: in-cluster.
	Kubeconfig string
	REST       *rest.Config
	Namespace  string
	// Local holds this host's IKE credential paths and charon's socket.
	Local fleet.Local
	// Spec is what the agent offers as its Host spec (nil: the object is
	// made by an operator). A Host it creates has no labels (membership
	// is the administrator's); of an existing Host it updates only the
	// certificate and capabilities (deploy/rbac.yaml refuses the rest).
	Spec *v1alpha1.HostSpec
	// StateDir keeps the last good state and the rendered host documents
	// on disk, so a rebooted host starts from them before the API answers
	// (default DefaultStateDir; created 0700).
	StateDir string
	// RunDir holds the apply journal, which describes this boot's kernel
	// (tmpfs; default overlay.DefaultStateDir, where sluice teardown
	// looks).
	RunDir string
	// Interval is how often the host is compared with its desired state
	// even without an event (drift repair).
	Interval time.Duration
	// MaxBackoff caps the wait before a desired state that failed is
	// tried again (backoff.go; default 10 minutes, at least Interval).
	MaxBackoff time.Duration
	// Settle is how long a new desired state must stay the same before
	// it is applied: label churn and a namespace being deleted object by
	// object are seen as one change, or none.
	Settle time.Duration
	// MetricsAddr serves /metrics ("" : not served).
	MetricsAddr string
	// InNS runs the data-path work in the host's network namespace
	// (default: the agent's own).
	InNS func(f func() error) error
	Log  io.Writer
	// Instance identifies this agent's machine and boot in its Host's
	// status (claim.go; default "machine-id:boot-id").
	Instance string
	// Reconciled, when set, is called after each reconcile (tests).
	Reconciled func(Outcome)
}

// Agent is a running agent.
type Agent struct {
	o       Options
	rec     *Reconciler
	Metrics *Metrics
	src     *kubeSource
	trigger chan struct{}
	// full asks for a full reconcile (interval, settle and initiation
	// timers); trigger (watch events) reconciles only when the rendered
	// state changed: every status write is an event for every agent.
	full  chan struct{}
	truth *truthTracker

	mu          sync.Mutex
	firstSeen   map[string]time.Time
	initiated   map[string]time.Time
	pending     string
	pendingAt   time.Time
	lastStatus  []byte
	lastApply   *v1alpha1.LastApply
	conditions  []metav1.Condition
	registered  bool
	Reconciles  int
	lastOutcome Outcome
	lastTruth   []SATruth
	lastKey     string
	contenders  []string
	bo          backoff
	// roll is this host's part in a staged rollout (rollout.go).
	roll *rollout
}

// DefaultStateDir is where the agent keeps its last good state.
const DefaultStateDir = "/var/lib/sluice"

// privateDir creates dir 0700, or tightens it to 0700: it holds the
// rendered documents (peers, addresses; no keys).
func privateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("--state-dir %s: %w", dir, err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("--state-dir %s has mode %04o and cannot be made 0700: %w", dir, fi.Mode().Perm(), err)
		}
	}
	return nil
}

// New prepares an agent (loads its last good state).
func New(o Options) (*Agent, error) {
	if o.Name == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, err
		}
		o.Name = h
	}
	if o.StateDir == "" {
		o.StateDir = DefaultStateDir
	}
	if o.RunDir == "" {
		o.RunDir = overlay.DefaultStateDir
	}
	if err := privateDir(o.StateDir); err != nil {
		return nil, err
	}
	if o.Interval <= 0 {
		o.Interval = 30 * time.Second
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 10 * time.Minute
	}
	o.MaxBackoff = max(o.MaxBackoff, o.Interval)
	if o.Settle < 0 {
		o.Settle = 0
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.Instance == "" {
		o.Instance = instanceID()
	}
	a := &Agent{o: o, bo: backoff{base: o.Interval, max: o.MaxBackoff}, Metrics: NewMetrics(), trigger: make(chan struct{}, 1), full: make(chan struct{}, 1), truth: newTruthTracker(), firstSeen: map[string]time.Time{}, initiated: map[string]time.Time{}}
	var err error
	if a.rec, err = NewReconciler(o.StateDir, o.RunDir, o.Name, a.logf); err != nil {
		return nil, err
	}
	if o.InNS != nil {
		a.rec.InNS = o.InNS
	}
	return a, nil
}

func (a *Agent) logf(format string, args ...any) {
	fmt.Fprintf(a.o.Log, "%s agent %s: %s\n", time.Now().UTC().Format(time.RFC3339), a.o.Name, fmt.Sprintf(format, args...))
}

func (a *Agent) kick() {
	select {
	case a.trigger <- struct{}{}:
	default:
	}
}

func (a *Agent) kickAfter(d time.Duration) {
	time.AfterFunc(d, func() {
		select {
		case a.full <- struct{}{}:
		default:
		}
	})
}

// WatchEvents is the number of watch events received (benchmarks).
func (a *Agent) WatchEvents() int64 {
	if a.src == nil {
		return 0
	}
	return a.src.events.Load()
}

// ReconcileCount is the number of reconciles done.
func (a *Agent) ReconcileCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.Reconciles
}

// Run reconciles until ctx ends.
func (a *Agent) Run(ctx context.Context) error {
	if a.o.MetricsAddr != "" {
		ln, err := net.Listen("tcp", a.o.MetricsAddr)
		if err != nil {
			return fmt.Errorf("--metrics %s: %w", a.o.MetricsAddr, err)
		}
		srv := &http.Server{Handler: a.Metrics.Handler(), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		go func() { <-ctx.Done(); _ = srv.Close() }()
		a.logf("metrics on http://%s/metrics", ln.Addr())
	}
	if a.o.File != "" {
		return a.runFile(ctx)
	}
	return a.runKube(ctx)
}

// runFile is the agent without Kubernetes: the same reconcile, from a
// host.yaml read again at every interval.
func (a *Agent) runFile(ctx context.Context) error {
	t := time.NewTicker(a.o.Interval)
	defer t.Stop()
	for {
		doc, err := fileread.Read(a.o.File, fileread.ConfigLimit)
		start := time.Now()
		key := string(doc)
		if !a.bo.holds(key, start) {
			var out Outcome
			if err != nil {
				out = Outcome{Result: ResultRefused, Message: err.Error()}
			} else {
				out = a.rec.Reconcile(Desired{Doc: doc, File: a.o.File})
			}
			a.done(out, time.Since(start), nil)
			a.backedOff(out, key)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-a.trigger:
		}
	}
}

// done records a reconcile: metrics, logs, the truth for the status.
// peers are the desired state's peers (nil: not known, the file agent).
func (a *Agent) done(out Outcome, d time.Duration, peers []string) {
	var ts []SATruth
	if out.Report != nil {
		_ = a.rec.InNS(func() error { ts = a.truth.look(out.Report, out.OffloadNotes); return nil })
	}
	a.Metrics.observe(out, d, len(peers))
	a.Metrics.truth(ts, peers)
	a.mu.Lock()
	repeat := out.Result == ResultHeld && a.lastOutcome.Result == ResultHeld && a.lastOutcome.Message == out.Message
	a.mu.Unlock()
	if (out.Result != ResultNothingToDo || out.Message != "") && !repeat {
		a.logf("%s (%d step(s), state %s) %s", out.Result, out.Steps, out.Digest, out.Message)
	}
	for _, t := range ts {
		if t.Fallback {
			a.logf("offload fallback: SA %s/%s spi 0x%08x asked %s, kernel holds %s on %q; %s", t.Peer, t.Dir, t.SPI, t.Asked, t.Got, t.Dev, strings.Join(t.WhyNot, "; "))
		}
	}
	a.mu.Lock()
	a.Reconciles++
	a.lastOutcome = out
	a.mu.Unlock()
	if a.o.Reconciled != nil {
		a.o.Reconciled(out)
	}
	a.lastTruth = ts
}

// runKube is the agent driven by the Kubernetes API.
func (a *Agent) runKube(ctx context.Context) error {
	cfg := a.o.REST
	if cfg == nil {
		var err error
		if cfg, err = RESTConfig(a.o.Kubeconfig); err != nil {
			return err
		}
	}
	src, err := newKubeSource(cfg, a.o.Namespace, 10*time.Minute, a.kick)
	if err != nil {
		return err
	}
	a.src = src
	// Before the API answers (a reboot, an outage): hold the last good
	// state, so the data path does not wait for the control plane.
	if d, ov := a.rec.LastGood(); d != "" {
		a.logf("holding the last good state %s (overlay %s) until the API answers", d, ov)
		start := time.Now()
		a.done(a.rec.Reconcile(Desired{Doc: a.rec.last.Doc, File: a.rec.last.File, Overlay: a.rec.last.Overlay, DeletionPolicy: a.rec.last.DeletionPolicy, Settings: a.rec.last.Settings}), time.Since(start), nil)
	}
	synced := make(chan bool, 1)
	go func() { synced <- src.start(ctx) }()
	t := time.NewTicker(a.o.Interval)
	defer t.Stop()
	ready := false
	for {
		full := true
		select {
		case <-ctx.Done():
			return nil
		case ok := <-synced:
			ready = ok
			a.logf("watching overlays and hosts in namespace %s", a.o.Namespace)
		case <-t.C:
		case <-a.full:
		case <-a.trigger:
			full = false
		}
		if !ready {
			continue
		}
		if ctx.Err() != nil {
			// select picks at random among ready cases: a pending timer
			// must not start another reconcile after the agent was told
			// to stop.
			return nil
		}
		a.step(ctx, full)
	}
}

// step renders the desired state from the objects and reconciles.
func (a *Agent) step(ctx context.Context, full bool) {
	if !a.registered && a.o.Spec != nil {
		if why := a.claim(ctx); why != "" {
			// Not even the certificate of another machine's Host.
			a.done(Outcome{Result: ResultRefused, Message: why}, 0, nil)
			return
		}
		if err := a.src.register(ctx, a.o.Name, *a.o.Spec, a.logf); err != nil {
			a.logf("registering Host %s: %v (retried)", a.o.Name, err)
			a.Metrics.apiUp.Set(0)
		} else {
			a.registered = true
		}
	}
	overlays, hosts := a.src.snapshot()
	start := time.Now()
	d := fleet.Render(a.o.Name, overlays, hosts, a.o.Local)
	// A renegotiating edit waits for this host's turn (rollout.go):
	// until then the host renders its overlay with the settings it holds.
	staged, rollKey := a.stage(overlays, hosts, d)
	if strings.HasPrefix(rollKey, "wait:") {
		overlays = staged
		d = fleet.Render(a.o.Name, overlays, hosts, a.o.Local)
	}
	var me *v1alpha1.Host
	for i := range hosts {
		if hosts[i].Name == a.o.Name {
			me = &hosts[i]
		}
	}
	if me != nil {
		d = a.leaveOutRouteClashes(d, me.Spec.VTEP, func(l fleet.Local) fleet.Desired { return fleet.Render(a.o.Name, overlays, hosts, l) })
	}
	key := fmt.Sprintf("%s|%v|%v|%s|%v|%s", d.Digest, d.Refused, d.Overlay != nil, strings.Join(d.Problems, ";"), me != nil, rollKey)
	for _, o := range overlays {
		// A confirmation of a held mass removal is acted on at once.
		key += "|" + o.Annotations[ConfirmRemovalAnnotation]
	}
	if a.unchanged(full, key) {
		return
	}
	a.lastKey = key
	if a.bo.holds(key, time.Now()) {
		return // backoff.go: the same desired state failed; kickAfter wakes us
	}
	if me != nil {
		if why := a.claim(ctx); why != "" {
			// Another machine acts for this Host: neither apply nor
			// write its status; checked again each --interval (claim.go).
			a.done(Outcome{Result: ResultRefused, Message: why}, time.Since(start), nil)
			return
		}
	}
	var out Outcome
	switch {
	case d.Refused:
		out = Outcome{Result: ResultRefused, Message: "nothing applied, the last good state stays: " + strings.Join(d.Problems, "; ")}
	case d.Overlay == nil:
		out = a.notMember(overlays, hosts, me)
	case len(d.Peers) == 0:
		// Alone (the first member, or every other one gone at once, as
		// when a namespace is being deleted): nothing to set up, and what
		// is set up stays.
		out = Outcome{Result: ResultNothingToDo, Message: "no other member in overlay " + d.Overlay.Name + " yet: nothing to set up"}
	default:
		if why := a.massRemoval(d.Overlay, peerNames(d.Peers), false); why != "" {
			dg, _ := a.rec.LastGood()
			out = Outcome{Result: ResultHeld, Digest: dg, Message: why}
			break
		}
		now := time.Now()
		if dg, _ := a.rec.LastGood(); d.Digest == dg {
			// Back to what is applied (label churn that ended where it
			// began): nothing pending any more.
			a.mu.Lock()
			a.pending = ""
			a.mu.Unlock()
		} else {
			a.mu.Lock()
			if a.pending != d.Digest {
				a.pending, a.pendingAt = d.Digest, now
			}
			wait := a.o.Settle - now.Sub(a.pendingAt)
			a.mu.Unlock()
			if wait > 0 {
				a.kickAfter(wait)
				return
			}
		}
		// Initiation slots count from when a peer was first seen; a peer
		// that left and comes back gets a new slot.
		due := map[string]time.Time{}
		seen := map[string]time.Time{}
		for _, p := range d.Peers {
			first, ok := a.firstSeen[p.Name]
			if !ok {
				first = now
			}
			seen[p.Name] = first
			if p.Initiator {
				due[p.Name] = first.Add(p.Slot)
			}
		}
		a.firstSeen = seen
		var next time.Time
		gate := func(peer string) bool {
			at, ok := due[peer]
			if !ok {
				return false // the peer initiates
			}
			if last, ok := a.initiated[peer]; ok && now.Sub(last) < a.o.Interval {
				at = last.Add(a.o.Interval) // retried once per interval
			}
			if !now.Before(at) {
				a.initiated[peer] = now
				return true
			}
			if next.IsZero() || at.Before(next) {
				next = at
			}
			return false
		}
		file := filepath.Join(a.o.StateDir, fleet.OverlayName(d.Overlay)+".yaml")
		// The rendered document, for operators: sluice plan -f it.
		_ = os.MkdirAll(a.o.StateDir, 0o700)
		_ = os.WriteFile(file, d.Doc, 0o600)
		out = a.rec.Reconcile(Desired{Doc: d.Doc, File: file, Overlay: d.Overlay.Namespace + "/" + d.Overlay.Name,
			DeletionPolicy: d.Overlay.Spec.DeletionPolicy, Settings: rawOf(d.Overlay), Gate: gate})
		if !next.IsZero() {
			a.kickAfter(time.Until(next)) // the next initiation slot
		}
		if out.Result == ResultApplied && len(d.Problems) > 0 {
			out.Message = strings.TrimPrefix(out.Message+"; "+strings.Join(d.Problems, "; "), "; ")
		}
	}
	names := make([]string, len(d.Peers))
	for i, p := range d.Peers {
		names[i] = p.Name
	}
	a.done(out, time.Since(start), names)
	a.staged(d.Overlay, out)
	a.Metrics.rollout(a.rolloutState())
	a.backedOff(out, key)
	if me != nil {
		st := a.status(me, d, out)
		if err := a.src.writeStatus(ctx, a.o.Name, st, &a.lastStatus); err != nil {
			a.logf("status: %v", err)
			a.Metrics.apiUp.Set(0)
		} else {
			a.Metrics.apiUp.Set(1)
		}
	}
}

// backedOff records out for the backoff and, after a failure, says
// when the same desired state is tried again.
func (a *Agent) backedOff(out Outcome, key string) {
	if d := a.bo.after(out, key, time.Now()); d > 0 {
		a.logf("reconcile failed %d time(s) in a row: the same desired state is tried again in %s (at once if it changes)", a.bo.n, d)
		if a.o.File == "" {
			a.kickAfter(d)
		} else {
			time.AfterFunc(d, a.kick)
		}
	}
}

// unchanged says a watch event (not a full reconcile) brought nothing new
// to render: it is skipped. A failed reconcile is no exception: it is
// retried every --interval, never on each event, since every status write
// of every host is an event for every agent, and a desired state that
// fails on all members (one bad Host) would otherwise turn into a
// fleet-wide loop of reconciles and status writes.
func (a *Agent) unchanged(full bool, key string) bool {
	return !full && key == a.lastKey
}

// notMember decides what a host that is in no overlay does with what it
// applied: if its overlay still exists and no longer selects it, it was
// removed on purpose, and it tears down. If the overlay is gone (deleted,
// its namespace or CRD deleted), the overlay's deletionPolicy decides:
// Orphan (the default) changes nothing.
func (a *Agent) notMember(overlays []v1alpha1.Overlay, hosts []v1alpha1.Host, me *v1alpha1.Host) Outcome {
	dg, ov := a.rec.LastGood()
	if dg == "" {
		return Outcome{Result: ResultNothingToDo}
	}
	exists := false
	for _, o := range overlays {
		if o.Namespace+"/"+o.Name == ov {
			exists = true
		}
	}
	switch {
	case exists && me != nil:
		if o := find(overlays, ov); o != nil {
			if why := a.massRemoval(o, selected(o, hosts, a.o.Name), true); why != "" {
				return Outcome{Result: ResultHeld, Digest: dg, Message: why}
			}
		}
		// Leaving is a change like any other: it must settle (a label
		// that flaps must not tear the host down and up again).
		now := time.Now()
		a.mu.Lock()
		if a.pending != "leave" {
			a.pending, a.pendingAt = "leave", now
		}
		wait := a.o.Settle - now.Sub(a.pendingAt)
		a.mu.Unlock()
		if wait > 0 {
			a.kickAfter(wait)
			return Outcome{Result: ResultNothingToDo, Digest: dg, Message: "no longer selected by overlay " + ov + ": tearing down once that settles"}
		}
		a.logf("no longer selected by overlay %s: tearing down", ov)
		return a.rec.Teardown()
	case a.rec.LastDeletionPolicy() == v1alpha1.DeletionTeardown:
		a.logf("overlay %s is gone and its deletionPolicy is Teardown: tearing down", ov)
		return a.rec.Teardown()
	default:
		return Outcome{Result: ResultOrphaned, Digest: dg,
			Message: fmt.Sprintf("overlay %s is gone (or this host's object): deletionPolicy Orphan keeps the data path as it is", ov)}
	}
}

func (a *Agent) status(me *v1alpha1.Host, d fleet.Desired, out Outcome) v1alpha1.HostStatus {
	st := v1alpha1.HostStatus{ObservedGeneration: me.Generation}
	if (out.Result != ResultNothingToDo && !a.sameFailure(out)) || a.lastApply == nil {
		a.lastApply = &v1alpha1.LastApply{Time: metav1.Now(), Result: out.Result, Steps: out.Steps, Digest: out.Digest, Message: clip(out.Message, 4096)}
	}
	st.LastApply = a.lastApply
	bySA := map[string][]v1alpha1.SA{}
	for _, t := range a.lastTruth {
		bySA[t.Peer] = append(bySA[t.Peer], apiSA(t))
	}
	for _, p := range d.Peers {
		state := "Connecting"
		if len(bySA[p.Name]) >= 2 {
			state = "Up"
		}
		st.Tunnels = append(st.Tunnels, v1alpha1.Tunnel{Peer: p.Name, VTEP: p.VTEP.String(), State: state, SAs: bySA[p.Name]})
	}
	for _, pr := range d.Problems {
		if len(st.Errors) < 64 {
			st.Errors = append(st.Errors, clip(pr, 1024))
		}
	}
	ready := metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: out.Result, Message: "the host holds its desired state", ObservedGeneration: me.Generation}
	switch out.Result {
	case ResultRefused, ResultFailed:
		ready.Status, ready.Message = metav1.ConditionFalse, clip(out.Message, 32768)
		if len(st.Errors) < 64 {
			st.Errors = append(st.Errors, clip(out.Message, 1024))
		}
	case ResultOrphaned, ResultHeld:
		ready.Status, ready.Message = metav1.ConditionFalse, out.Message
	}
	// Ready means the tunnels are up, not only applied: a peer without
	// its SA pair in the kernel (IKE not up yet, or down) is not ready.
	if ready.Status == metav1.ConditionTrue {
		var down []string
		for _, tu := range st.Tunnels {
			if tu.State != "Up" {
				down = append(down, tu.Peer+" ("+tu.State+")")
			}
		}
		if len(down) > 0 {
			ready.Status, ready.Reason = metav1.ConditionFalse, "TunnelsDown"
			ready.Message = clip(fmt.Sprintf("applied; %d of %d tunnel(s) not up: %s", len(down), len(st.Tunnels), strings.Join(down, ", ")), 32768)
		}
	}
	if out.Report != nil && !out.Report.OK && ready.Status == metav1.ConditionTrue {
		for _, c := range out.Report.Checks {
			if !c.OK {
				ready.Message = "verify: " + clip(c.Name+": "+c.Detail, 1000)
				break
			}
		}
	}
	meta.SetStatusCondition(&a.conditions, ready)
	off := metav1.Condition{Type: "OffloadAsAsked", Status: metav1.ConditionTrue, Reason: "AsAsked", Message: "every SA holds the offload asked", ObservedGeneration: me.Generation}
	for _, t := range a.lastTruth {
		if t.Fallback {
			off.Status, off.Reason = metav1.ConditionFalse, "Fallback"
			off.Message = fmt.Sprintf("SA %s/%s asked %s, kernel holds %s", t.Peer, t.Dir, t.Asked, t.Got)
			break
		}
	}
	meta.SetStatusCondition(&a.conditions, off)
	peers := metav1.Condition{Type: "PeersComplete", Status: metav1.ConditionTrue, Reason: "AllMembers", Message: "every other member of the overlay is a peer", ObservedGeneration: me.Generation}
	if len(d.LeftOut) > 0 {
		peers.Status, peers.Reason = metav1.ConditionFalse, "PeersLeftOut"
		peers.Message = clip(fmt.Sprintf("%d member(s) left out, the other pairs are applied: %s", len(d.LeftOut), strings.Join(d.LeftOut, "; ")), 32768)
	}
	meta.SetStatusCondition(&a.conditions, peers)
	guard := metav1.Condition{Type: "MassRemovalHeld", Status: metav1.ConditionFalse, Reason: "NoMassRemoval", Message: "no change removing more than half of the members is held", ObservedGeneration: me.Generation}
	if out.Result == ResultHeld {
		guard.Status, guard.Reason, guard.Message = metav1.ConditionTrue, "MassRemoval", clip(out.Message, 32768)
	}
	meta.SetStatusCondition(&a.conditions, guard)
	meta.SetStatusCondition(&a.conditions, a.duplicateCondition(me.Generation))
	if c, ok := a.rolloutCondition(me.Generation); ok {
		meta.SetStatusCondition(&a.conditions, c)
	}
	st.Rollout = a.rolloutStatus()
	st.Offload = summary(a.lastTruth)
	if a.o.Instance != "" {
		a.mu.Lock()
		st.Agent = &v1alpha1.AgentClaim{Instance: a.o.Instance, Contenders: slices.Clone(a.contenders)}
		a.mu.Unlock()
	}
	st.Conditions = append([]metav1.Condition(nil), a.conditions...)
	return st
}

// sameFailure says out repeats the last Failed, Refused or Held outcome: its
// lastApply (and time) stays, so the status is unchanged and not written
// again (each write is a watch event for every agent).
func (a *Agent) sameFailure(out Outcome) bool {
	l := a.lastApply
	return l != nil && (out.Result == ResultFailed || out.Result == ResultRefused || out.Result == ResultHeld) && l.Result == out.Result &&
		l.Digest == out.Digest && l.Steps == out.Steps && l.Message == clip(out.Message, 4096)
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

// ErrNoSource is returned when neither a file nor the API is given.
var ErrNoSource = errors.New("agent: no desired state: give -f host.yaml, or run with a kubeconfig or in a pod")
