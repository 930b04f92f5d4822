// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sluice/internal/fleet/v1alpha1"
)

// Duplicate host names. Two machines running an agent with one Host name
// (a cloned VM, a copied --name) would both apply the Host's desired
// state: the same VTEP address on two machines. Each agent claims its Host
// in status.agent.instance with an id made of the machine id and the boot
// id. On each reconcile it reads the claim: its own, none, or one from
// this machine (an earlier process or boot) and it acts; another
// machine's and it refuses, logs why, and adds itself to
// status.agent.contenders, which the acting agent turns into the
// DuplicateName condition. docs/fleet.md "Duplicate host names".

// instanceID is "machine-id:boot-id" ("" when neither can be read).
func instanceID() string {
	read := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(b))
	}
	m, b := read("/etc/machine-id"), read("/proc/sys/kernel/random/boot_id")
	if m == "" {
		// No machine id (a container without /etc/machine-id mounted):
		// the boot id tells machines apart, but not a reboot from
		// another machine.
		m = "boot-" + b
	}
	return m + ":" + b
}

// machineOf is the machine part of an instance id.
func machineOf(id string) string {
	m, _, _ := strings.Cut(id, ":")
	return m
}

// claim reads this Host's claim and says why this agent must not act
// ("" : it may). The acting agent's contenders are kept for its status.
func (a *Agent) claim(ctx context.Context) string {
	if a.o.Instance == "" {
		return ""
	}
	c := a.src.hostsClient()
	cur, err := c.Get(ctx, a.o.Name, metav1.GetOptions{})
	if err != nil {
		return "" // the status write reports the API's trouble
	}
	var st v1alpha1.HostStatus
	if raw, ok := cur.Object["status"]; ok {
		b, _ := json.Marshal(raw)
		_ = json.Unmarshal(b, &st)
	}
	cl := st.Agent
	if cl == nil || cl.Instance == "" || cl.Instance == a.o.Instance || machineOf(cl.Instance) == machineOf(a.o.Instance) {
		a.mu.Lock()
		a.contenders = nil
		if cl != nil {
			a.contenders = slices.DeleteFunc(slices.Clone(cl.Contenders), func(x string) bool { return machineOf(x) == machineOf(a.o.Instance) })
		}
		a.mu.Unlock()
		return ""
	}
	why := fmt.Sprintf("Host %s is claimed by the agent of another machine (instance %s; this one is %s): this agent does not act. "+
		"Two machines run an agent named %s: give each its own --name. If %s moved to this machine, clear the claim: "+
		"kubectl -n %s patch host %s --subresource status --type merge -p '{\"status\":{\"agent\":null}}'",
		a.o.Name, cl.Instance, a.o.Instance, a.o.Name, a.o.Name, a.o.Namespace, a.o.Name)
	if !slices.Contains(cl.Contenders, a.o.Instance) && len(cl.Contenders) < 16 {
		cl.Contenders = append(cl.Contenders, a.o.Instance)
		var m map[string]any
		b, _ := json.Marshal(cl)
		_ = json.Unmarshal(b, &m)
		status, _ := cur.Object["status"].(map[string]any)
		if status == nil {
			status = map[string]any{}
		}
		status["agent"] = m
		cur.Object["status"] = status
		if _, err := c.UpdateStatus(ctx, cur, metav1.UpdateOptions{FieldManager: "sluice-agent"}); err != nil {
			a.logf("status (contender): %v", err)
		}
	}
	return why
}

// duplicateCondition is DuplicateName from the contenders the acting
// agent read with its claim.
func (a *Agent) duplicateCondition(gen int64) metav1.Condition {
	c := metav1.Condition{Type: "DuplicateName", Status: metav1.ConditionFalse, Reason: "Unique", Message: "no other machine claims this Host name", ObservedGeneration: gen}
	a.mu.Lock()
	others := slices.Clone(a.contenders)
	a.mu.Unlock()
	if len(others) > 0 {
		c.Status, c.Reason = metav1.ConditionTrue, "OtherMachines"
		c.Message = clip(fmt.Sprintf("agent(s) %s on other machines also run as Host %s and refuse to act; only %s acts. Give each machine its own --name, then clear status.agent.contenders", strings.Join(others, ", "), a.o.Name, a.o.Instance), 32768)
	}
	return c
}
