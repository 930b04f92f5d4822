// SPDX-License-Identifier: Apache-2.0

package overlay

import (
	"strings"

	"sluice/internal/config"
	"sluice/internal/swan"
)

// kindIKEConn journals a strongSwan connection apply loaded.
const kindIKEConn = "ikeconn"

// ike unloads the connections of the file's IKE peers and terminates
// their SAs (charon removes the SAs and policies it installed). Without a
// journal, every connection named after this overlay and one of its peers
// is unloaded.
func (t *tearer) ike() {
	if !t.h.HasKeying(config.KeyingIKE) || t.h.IPsec.IKE == nil {
		return
	}
	il := t.live.IKE
	if il == nil || il.Err != nil {
		why := "not asked"
		if il != nil {
			why = il.Err.Error()
		}
		t.plan.Notes = append(t.plan.Notes, "charon could not be asked ("+why+"): its connections and SAs are left; start charon and run teardown again")
		return
	}
	uri := t.h.IPsec.IKE.VICI
	for _, pr := range t.h.IPsec.Peers {
		if pr.Keying != config.KeyingIKE {
			continue
		}
		for _, c := range il.Conns {
			if !strings.HasPrefix(c, connPrefix(t.h, pr.Name)) {
				continue
			}
			c := c
			if !t.ours(kindIKEConn, func(e entry) bool { return e.Name == c }, "IKE connection "+c) {
				continue
			}
			t.add(Step{Section: "ipsec", Action: "delete", Object: "IKE connection " + c, Why: "declared by the file",
				Commands: []string{"swanctl --unload-conn " + c + " && swanctl --terminate --ike " + c}, run: func(r *runner) error {
					if err := withVICI(uri, func(cl *swan.Client) error { return cl.UnloadOverlay(c) }); err != nil {
						return err
					}
					r.j.dropCreated(entry{Kind: kindIKEConn, Name: c})
					return nil
				}})
		}
	}
}
