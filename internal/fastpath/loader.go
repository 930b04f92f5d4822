// SPDX-License-Identifier: Apache-2.0

package fastpath

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// Datapath is a loaded fast path: the XDP program, its explain twin and
// the maps they share.
type Datapath struct {
	objs    fastpathObjects
	explain *ebpf.Program // same code with explain_mode=1: reports, never counts
	// explainOut is the twin's own result map, never pinned or shared:
	// two explain runs against one gateway (two processes adopting the
	// same pins) each read their own answer. explainMu makes runs of
	// one Datapath take turns on it.
	explainOut *ebpf.Map
	explainMu  sync.Mutex
	innerSpec  *ebpf.MapSpec // shape of one generation's policy table (IPv6)
	innerSpec4 *ebpf.MapSpec // ... and of its IPv4 table

	// mu serialises read-modify-writes of the config word set: the
	// mirror's Apply, the lease renewal and the route epoch run in
	// different goroutines, and a lost update could undo a generation
	// flip.
	mu sync.Mutex
	// ifMu makes SetIfaces calls take turns: each writes the half of
	// iface_slots the program does not read, then flips to it.
	ifMu sync.Mutex
	// ownWords: the own_nets words this process set (setOwnAddrs; under ifMu).
	ownWords map[uint32]uint64
	// policyL4 (the active tables select on protocol or ports) and fibL4
	// (the FIB may route or hash on them) decide config.flow_l4.
	policyL4, fibL4 bool
	// fwd_dsts (fwddsts.go): the last applied tables' bits, whether some
	// interface forwards inbound and whether counters are on (which
	// decide the bits used), the map's memory and what it holds.
	dstSets                dstSets
	inboundAny, countersOn bool
	dstMem                 *ebpf.Memory
	dsts                   []uint64
	// didxMem: the destination index's maps, mapped (didx.go; under mu).
	didxMem didxMaps
	// slots: the per-policy counter slots (counterslots.go; under mu).
	slots counterSlots
	// saRefs: what sa_refs holds, by counter slot (saref.go; under mu).
	saRefs map[uint32]fastpathFpSaRef
	// saSlots: the slots whose entry names each SA, for WithdrawSA.
	saSlots map[saID][]uint32

	// links are the XDP links Attach made or adopted, by interface name,
	// held open so that removing their pins cannot detach the program
	// under a running daemon. linksMu guards the map: the daemon's
	// attachment watcher re-attaches while status reads it.
	linksMu sync.Mutex
	links   map[string]link.Link
}

// LoadOptions select where the maps live.
type LoadOptions struct {
	// PinPath, when set, pins the maps there and reuses maps already
	// pinned (a restarted daemon adopts its predecessor's state).
	PinPath string
	// AdoptOnly uses the maps pinned at PinPath and never creates or pins
	// one: for readers (explain, show) that must not race the daemon.
	AdoptOnly bool
}

// Load loads the fast path into the kernel. The program is not attached.
func Load(opts LoadOptions) (*Datapath, error) {
	spec, err := loadFastpath()
	if err != nil {
		return nil, fmt.Errorf("fastpath: reading the embedded BPF object: %w", err)
	}
	if err := sizeExactMatchCache(spec); err != nil {
		return nil, err
	}
	var mapOpts ebpf.MapOptions
	var repl map[string]*ebpf.Map
	if opts.AdoptOnly {
		if repl, err = loadPinnedMaps(spec, opts.PinPath); err != nil {
			return nil, err
		}
	} else if opts.PinPath != "" {
		mapOpts.PinPath = opts.PinPath
		for _, m := range spec.Maps {
			if m.Name != ".rodata" && m.Name != ".bss" && m.Name != ".data" {
				m.Pinning = ebpf.PinByName
			}
		}
	}
	dp := &Datapath{innerSpec: spec.Maps["policy_tables"].InnerMap.Copy(),
		innerSpec4: spec.Maps["policy_tables4"].InnerMap.Copy()}
	err = spec.LoadAndAssign(&dp.objs, &ebpf.CollectionOptions{Maps: mapOpts, MapReplacements: repl})
	for _, m := range repl {
		m.Close() // LoadAndAssign holds its own references
	}
	if errors.Is(err, ebpf.ErrMapIncompatible) && opts.PinPath != "" && !opts.AdoptOnly {
		// Pinned by another version of sluice with other map layouts:
		// replace them (the new daemon resyncs from the kernel anyway).
		RemovePinnedMaps(opts.PinPath)
		err = spec.LoadAndAssign(&dp.objs, &ebpf.CollectionOptions{Maps: mapOpts})
	}
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("fastpath: the kernel's verifier rejected the program: %+v", ve)
		}
		if errors.Is(err, unix.EPERM) {
			if perr := CheckPrivileges(); perr != nil {
				return nil, fmt.Errorf("fastpath: loading: %w", perr)
			}
		}
		return nil, fmt.Errorf("fastpath: loading: %w", err)
	}
	explain, out, err := loadExplain(spec, &dp.objs)
	if err != nil {
		dp.objs.Close()
		return nil, err
	}
	dp.explain, dp.explainOut = explain, out
	return dp, nil
}

// sizeExactMatchCache gives every possible CPU its region of the exact-match
// cache and of the FIB result cache: compiled with one region each
// (FP_EMC_SLOTS, FP_FIBC_SLOTS), indexed by CPU number.
func sizeExactMatchCache(spec *ebpf.CollectionSpec) error {
	n, err := ebpf.PossibleCPU()
	if err != nil {
		return fmt.Errorf("fastpath: counting possible CPUs: %w", err)
	}
	spec.Maps["flow_emc"].MaxEntries *= uint32(n)
	spec.Maps["fib_cache"].MaxEntries *= uint32(n)
	return nil
}

// loadExplain loads the explain twin against the same maps, so explain
// sees exactly the state the live program sees.
func loadExplain(spec *ebpf.CollectionSpec, objs *fastpathObjects) (*ebpf.Program, *ebpf.Map, error) {
	es := spec.Copy()
	if err := es.Variables["explain_mode"].Set(uint32(1)); err != nil {
		return nil, nil, fmt.Errorf("fastpath: setting explain_mode: %w", err)
	}
	repl := objs.shared()
	for name, m := range es.Maps {
		if repl[name] == nil {
			m.Pinning = ebpf.PinNone // the twin's own maps (scratch, explain_out) are never pinned
		}
	}
	coll, err := ebpf.NewCollectionWithOptions(es, ebpf.CollectionOptions{MapReplacements: repl})
	if err != nil {
		return nil, nil, fmt.Errorf("fastpath: loading the explain program: %w", err)
	}
	prog, out := coll.Programs["xdp_fastpath"], coll.Maps["explain_out"]
	delete(coll.Programs, "xdp_fastpath")
	delete(coll.Maps, "explain_out")
	coll.Close()
	return prog, out, nil
}

// shared are the maps the live program, its explain twin and the stage probe
// (SharedMaps) read and write: everything but a twin's own scratch, output and
// use stamps.
func (objs *fastpathObjects) shared() map[string]*ebpf.Map {
	return map[string]*ebpf.Map{
		"config": objs.Config, "tuples": objs.Tuples, "policy_tables": objs.PolicyTables, "policy_tables4": objs.PolicyTables4,
		"ifaces": objs.Ifaces, "vlans": objs.Vlans, "own_addrs": objs.OwnAddrs, "tx_ports": objs.TxPorts, "port_of": objs.PortOf,
		"reason_counts": objs.ReasonCounts, "policy_counts": objs.PolicyCounts, "policy_slots": objs.PolicySlots,
		"flow_cache": objs.FlowCache, "flow_cache4": objs.FlowCache4, "flow_emc": objs.FlowEmc,
		"cache_gate": objs.CacheGate, "lease": objs.Lease, "fwd_dsts": objs.FwdDsts,
		"iface_slots": objs.IfaceSlots, "fib_cache": objs.FibCache, "own_nets": objs.OwnNets,
		"didx_blocks": objs.DidxBlocks, "didx_slots": objs.DidxSlots, "didx_rules4": objs.DidxRules4,
		"sa_refs": objs.SaRefs,
	}
}

// SharedMaps are the live program's maps by their C names, for a program
// built from the same stages that must see the same state (the bench's
// stage probe, bpf/stage_probe.c). The maps stay the Datapath's: do not
// close them.
func (dp *Datapath) SharedMaps() map[string]*ebpf.Map { return dp.objs.shared() }

// Program is the XDP program to attach.
func (dp *Datapath) Program() *ebpf.Program { return dp.objs.XdpFastpath }

// Close releases the file descriptors (pinned maps and links stay pinned,
// so the program stays attached).
func (dp *Datapath) Close() error {
	dp.linksMu.Lock()
	for _, l := range dp.links {
		l.Close()
	}
	dp.linksMu.Unlock()
	if dp.explain != nil {
		dp.explain.Close()
		dp.explainOut.Close()
	}
	return dp.objs.Close()
}

// RemovePinnedMaps removes the pinned maps under dir, leaving the links: the
// maps of another version, or of a start that failed after pinning them.
func RemovePinnedMaps(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), linkPinPrefix) {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

// loadPinnedMaps opens every map of the program from dir.
func loadPinnedMaps(spec *ebpf.CollectionSpec, dir string) (map[string]*ebpf.Map, error) {
	repl := map[string]*ebpf.Map{}
	for name := range spec.Maps {
		if strings.HasPrefix(name, ".") {
			continue // .rodata and friends belong to each program
		}
		m, err := ebpf.LoadPinnedMap(filepath.Join(dir, name), nil)
		if err != nil {
			for _, o := range repl {
				o.Close()
			}
			if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
				if perr := CheckPrivileges(); perr != nil {
					return nil, fmt.Errorf("fastpath: reading the gateway's maps in %s: %w", dir, perr)
				}
			}
			return nil, fmt.Errorf("fastpath: the gateway's map %s is not pinned in %s (is 'sluice gateway run' starting up?): %w", name, dir, err)
		}
		repl[name] = m
	}
	return repl, nil
}
