// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sluice/internal/fleet"
	"sluice/internal/fleet/v1alpha1"
)

// ConfirmRemovalAnnotation confirms a change to an Overlay (or to its
// hosts' labels) that removes more than half of its members at once: its
// value is the Overlay's metadata.generation the change is meant for, so
// a confirmation does not outlive the next edit of the spec.
const ConfirmRemovalAnnotation = "sluice.dev/confirm-removal"

// massRemoval guards against a typo in the member selector (or a label
// removed from most hosts): a desired state of overlay o that keeps only
// the peers named in kept, and drops more than half of the members this
// host last applied (this host included when leaving), is held unless
// confirmed. It returns why it holds ("" : go ahead). A host removing
// fewer members (one retired host, one relabelled) is never held.
func (a *Agent) massRemoval(o *v1alpha1.Overlay, kept []string, leaving bool) string {
	last := a.rec.last
	if last == nil || last.Overlay != o.Namespace+"/"+o.Name {
		return ""
	}
	h, _, err := parse(last.Doc, last.File)
	if err != nil || h.IPsec == nil {
		return ""
	}
	keep := map[string]bool{}
	for _, n := range kept {
		keep[n] = true
	}
	var removed []string
	for _, p := range h.IPsec.Peers {
		if !keep[p.Name] {
			removed = append(removed, p.Name)
		}
	}
	if leaving {
		removed = append(removed, a.o.Name+" (this host)")
	}
	members := len(h.IPsec.Peers) + 1
	if 2*len(removed) <= members {
		return ""
	}
	if g := o.Annotations[ConfirmRemovalAnnotation]; g != "" && g == strconv.FormatInt(o.Generation, 10) {
		a.logf("overlay %s/%s removes %d of %d members: confirmed by %s=%s", o.Namespace, o.Name, len(removed), members, ConfirmRemovalAnnotation, g)
		return ""
	}
	sort.Strings(removed)
	if len(removed) > 8 {
		removed = append(removed[:8], fmt.Sprintf("and %d more", len(removed)-8))
	}
	return fmt.Sprintf("held: overlay %s/%s now removes %d of the %d members this host applied at once (%s), which looks like a mistake in spec.members or in the hosts' labels; the last applied state stays. Fix the selector, or confirm: kubectl -n %s annotate --overwrite overlay %s %s=%d",
		o.Namespace, o.Name, len(removed), members, strings.Join(removed, ", "), o.Namespace, o.Name, ConfirmRemovalAnnotation, o.Generation)
}

func peerNames(ps []fleet.Peer) []string {
	var n []string
	for _, p := range ps {
		n = append(n, p.Name)
	}
	return n
}

// selected names the hosts overlay o selects now, other than self.
func selected(o *v1alpha1.Overlay, hosts []v1alpha1.Host, self string) []string {
	sel, err := metav1.LabelSelectorAsSelector(&o.Spec.Members)
	if err != nil {
		return nil
	}
	var n []string
	for i := range hosts {
		if hosts[i].Name != self && fleet.Selects(sel, &hosts[i]) {
			n = append(n, hosts[i].Name)
		}
	}
	return n
}

// find is the overlay named ns/name in overlays (nil: none).
func find(overlays []v1alpha1.Overlay, nsName string) *v1alpha1.Overlay {
	for i := range overlays {
		if overlays[i].Namespace+"/"+overlays[i].Name == nsName {
			return &overlays[i]
		}
	}
	return nil
}
