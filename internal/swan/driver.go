// SPDX-License-Identifier: Apache-2.0

package swan

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Progress is reported while children are initiated or SAs terminated.
type Progress struct {
	Total       int
	Done        int
	Established int
	Failed      int
	Elapsed     time.Duration
}

// UpOptions tune Up.
type UpOptions struct {
	Initiate    bool          // initiate every child after loading (gw0 in the BlueField-3 benchmark)
	Concurrency int           // initiations in flight (each holds one charon worker thread)
	Timeout     time.Duration // per initiation
	Progress    func(Progress)
}

// Failure names a tunnel that did not come up and charon's reason.
type Failure struct {
	Conn  string `json:"conn"`
	Child string `json:"child"`
	Error string `json:"error"`
}

// UpResult is what Up did.
type UpResult struct {
	Daemon      string    `json:"daemon"`
	Loaded      int       `json:"conns_loaded"`
	Secrets     int       `json:"secrets_loaded"`
	LoadSeconds float64   `json:"load_seconds"`
	Concurrency int       `json:"concurrency,omitempty"`
	AlreadyUp   int       `json:"already_up"`
	Initiated   int       `json:"initiated"`
	Established int       `json:"established"`
	Failed      int       `json:"failed"`
	InitSeconds float64   `json:"initiate_seconds"`
	Failures    []Failure `json:"failures,omitempty"` // the first 20
}

const maxFailures = 20

// Up loads every connection and secret of the spec into charon and, with
// o.Initiate, initiates every child with bounded concurrency.
func Up(ctx context.Context, uri string, s *Spec, key PSK, o UpOptions) (UpResult, error) {
	var res UpResult
	c, err := Connect(ctx, uri)
	if err != nil {
		return res, err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	if v, err := c.Version(); err == nil {
		res.Daemon = v.Daemon + " " + v.Version
	}
	start := time.Now()
	tunnels := s.All()
	for _, t := range tunnels {
		if err := c.LoadConn(s, t); err != nil {
			return res, fmt.Errorf("load-conn %w (%d of %d loaded)", err, res.Loaded, len(tunnels))
		}
		res.Loaded++
		if err := c.LoadShared(t, key); err != nil {
			return res, fmt.Errorf("load-shared %w (%d of %d loaded)", err, res.Secrets, len(tunnels))
		}
		res.Secrets++
	}
	res.LoadSeconds = time.Since(start).Seconds()
	if !o.Initiate {
		return res, ctx.Err()
	}
	conc := o.Concurrency
	if conc < 1 {
		conc = 8
	}
	// A blocking initiate holds one of charon's worker threads until the
	// CHILD_SA is up; leave at least half of them for the IKE exchanges.
	if st, err := c.Stats(); err == nil && st.Workers > 0 && conc > st.Workers/2 {
		conc = max(1, st.Workers/2)
	}
	res.Concurrency = conc
	// Initiating a child that is already installed would make a duplicate
	// CHILD_SA: skip those, so up can be run again after a partial failure.
	sas, err := c.ListSAs()
	if err != nil {
		return res, err
	}
	installed := map[string]bool{}
	for _, sa := range sas {
		for _, ch := range sa.Children {
			if sa.State == "ESTABLISHED" && ch.State == "INSTALLED" {
				installed[sa.Name+"/"+ch.Name] = true
			}
		}
	}
	todo := tunnels[:0:0]
	for _, t := range tunnels {
		if installed[t.Conn+"/"+t.Child] {
			res.AlreadyUp++
		} else {
			todo = append(todo, t)
		}
	}
	tunnels = todo
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = 60 * time.Second
	}
	start = time.Now()
	var done, ok, failed atomic.Int64
	var mu sync.Mutex
	report := func() {
		if o.Progress != nil {
			mu.Lock()
			o.Progress(Progress{Total: len(tunnels), Done: int(done.Load()), Established: int(ok.Load()), Failed: int(failed.Load()), Elapsed: time.Since(start)})
			mu.Unlock()
		}
	}
	jobs := make(chan Tunnel)
	var wg sync.WaitGroup
	var connErr error
	started := 0
	for w := 0; w < conc; w++ {
		wc, err := Connect(ctx, uri)
		if err != nil {
			connErr = err
			break
		}
		started++
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer wc.Close()
			for t := range jobs {
				err := wc.Initiate(t.Conn, t.Child, timeout)
				if err != nil {
					failed.Add(1)
					mu.Lock()
					if len(res.Failures) < maxFailures {
						res.Failures = append(res.Failures, Failure{Conn: t.Conn, Child: t.Child, Error: err.Error()})
					}
					mu.Unlock()
				} else {
					ok.Add(1)
				}
				done.Add(1)
				report()
			}
		}()
	}
	if started == 0 {
		close(jobs)
		return res, connErr
	}
feed:
	for _, t := range tunnels {
		select {
		case jobs <- t:
			res.Initiated++
		case <-ctx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	res.Established, res.Failed = int(ok.Load()), int(failed.Load())
	res.InitSeconds = time.Since(start).Seconds()
	return res, ctx.Err()
}

// DownOptions tune Down.
type DownOptions struct {
	KeepConfig  bool // only terminate; leave connections and secrets loaded
	Concurrency int
	Timeout     time.Duration
	Progress    func(Progress)
}

// DownResult is what Down did.
type DownResult struct {
	Terminated      int       `json:"terminated"`
	Failed          int       `json:"failed"`
	UnloadedConns   int       `json:"unloaded_conns"`
	UnloadedSecrets int       `json:"unloaded_secrets"`
	Seconds         float64   `json:"seconds"`
	Failures        []Failure `json:"failures,omitempty"`
}

// Down terminates the spec's IKE_SAs that exist and, unless KeepConfig,
// unloads its connections and secrets.
func Down(ctx context.Context, uri string, s *Spec, o DownOptions) (DownResult, error) {
	var res DownResult
	start := time.Now()
	c, err := Connect(ctx, uri)
	if err != nil {
		return res, err
	}
	defer c.Close()
	sas, err := c.ListSAs()
	if err != nil {
		return res, err
	}
	want := map[string]Tunnel{}
	for _, t := range s.All() {
		want[t.Conn] = t
	}
	var names []string
	seen := map[string]bool{}
	for _, sa := range sas {
		if _, ok := want[sa.Name]; ok && !seen[sa.Name] {
			seen[sa.Name] = true
			names = append(names, sa.Name)
		}
	}
	conc := max(o.Concurrency, 1)
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	var mu sync.Mutex
	jobs := make(chan string)
	var wg sync.WaitGroup
	started := 0
	var connErr error
	for w := 0; w < min(conc, len(names)); w++ {
		wc, err := Connect(ctx, uri)
		if err != nil {
			connErr = err
			break
		}
		started++
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer wc.Close()
			for n := range jobs {
				err := wc.Terminate(n, timeout)
				mu.Lock()
				if err != nil {
					res.Failed++
					if len(res.Failures) < maxFailures {
						res.Failures = append(res.Failures, Failure{Conn: n, Error: err.Error()})
					}
				} else {
					res.Terminated++
				}
				if o.Progress != nil {
					o.Progress(Progress{Total: len(names), Done: res.Terminated + res.Failed, Established: res.Terminated, Failed: res.Failed, Elapsed: time.Since(start)})
				}
				mu.Unlock()
			}
		}()
	}
	if started == 0 && len(names) > 0 {
		return res, connErr
	}
	for _, n := range names {
		jobs <- n
	}
	close(jobs)
	wg.Wait()
	if !o.KeepConfig {
		conns, err := c.ListConns()
		if err != nil {
			return res, err
		}
		for _, cn := range conns {
			if _, ok := want[cn.Name]; ok {
				if err := c.UnloadConn(cn.Name); err != nil {
					return res, err
				}
				res.UnloadedConns++
			}
		}
		// Not get-shared: charon 5.9.8 took minutes to answer it with 65,025
		// keys. A secret that is not loaded fails to unload, which is fine.
		for _, t := range s.All() {
			if c.UnloadShared(t.Secret) == nil {
				res.UnloadedSecrets++
			}
		}
	}
	res.Seconds = time.Since(start).Seconds()
	if res.Failed > 0 {
		return res, fmt.Errorf("%d of %d IKE_SAs did not terminate (first: %s: %s)", res.Failed, len(names), res.Failures[0].Conn, res.Failures[0].Error)
	}
	return res, nil
}

// Status is charon's view: loaded connections and SAs, optionally
// restricted to one spec's tunnels.
type Status struct {
	Daemon         string   `json:"daemon"`
	Workers        int      `json:"workers"`
	Expected       int      `json:"expected_tunnels,omitempty"` // with a spec
	ConnsLoaded    int      `json:"conns_loaded"`
	IKEEstablished int      `json:"ike_sas_established"`
	IKEOther       int      `json:"ike_sas_other"`
	ChildInstalled int      `json:"child_sas_installed"`
	Down           []string `json:"down,omitempty"` // spec children without an installed CHILD_SA (first 20)
	DownCount      int      `json:"down_count,omitempty"`
	SAs            []IKESA  `json:"sas,omitempty"`
}

// GetStatus reads charon's connections and SAs. With a spec, only its
// tunnels count and those without an installed CHILD_SA are named.
func GetStatus(ctx context.Context, uri string, s *Spec, withSAs bool) (Status, error) {
	var st Status
	c, err := Connect(ctx, uri)
	if err != nil {
		return st, err
	}
	defer c.Close()
	if v, err := c.Version(); err == nil {
		st.Daemon = v.Daemon + " " + v.Version
	}
	if ss, err := c.Stats(); err == nil {
		st.Workers = ss.Workers
	}
	conns, err := c.ListConns()
	if err != nil {
		return st, err
	}
	sas, err := c.ListSAs()
	if err != nil {
		return st, err
	}
	var want map[string]bool
	if s != nil {
		want = map[string]bool{}
		for _, t := range s.All() {
			want[t.Conn] = true
		}
		st.Expected = len(want)
	}
	in := func(name string) bool { return want == nil || want[name] }
	for _, cn := range conns {
		if in(cn.Name) {
			st.ConnsLoaded++
		}
	}
	up := map[string]bool{}
	for _, sa := range sas {
		if !in(sa.Name) {
			continue
		}
		if sa.State == "ESTABLISHED" {
			st.IKEEstablished++
		} else {
			st.IKEOther++
		}
		for _, ch := range sa.Children {
			if ch.State == "INSTALLED" {
				st.ChildInstalled++
				up[sa.Name] = true
			}
		}
		if withSAs {
			st.SAs = append(st.SAs, sa)
		}
	}
	sort.Slice(st.SAs, func(i, j int) bool { return st.SAs[i].Name < st.SAs[j].Name })
	if s != nil {
		for _, t := range s.All() {
			if !up[t.Conn] {
				st.DownCount++
				if len(st.Down) < maxFailures {
					st.Down = append(st.Down, t.Child)
				}
			}
		}
	}
	return st, nil
}

// IsNoCharon reports whether err says charon could not be reached.
func IsNoCharon(err error) bool { return errors.Is(err, ErrNoCharon) }
