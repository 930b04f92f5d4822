// SPDX-License-Identifier: Apache-2.0

// Package v1alpha1 holds the Go types of sluice's Kubernetes API (group
// fleet.sluice.dev, version v1alpha1): Overlay, the intent shared by many
// hosts, and Host, one object per host. The CRDs that the API server
// validates them with are deploy/crds/*.yaml; these types mirror them for
// the agent, which reads them through client-go's dynamic client (no code
// generation, no DeepCopy: objects are converted from unstructured JSON).
// schema_test.go walks both together, so a field, a JSON type, a required
// property or an enum cannot differ between them.
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Group and version of the API.
const (
	Group   = "fleet.sluice.dev"
	Version = "v1alpha1"
)

// Resources.
var (
	OverlaysResource = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "overlays"}
	HostsResource    = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "hosts"}
)

// Offload policies of an overlay: what each SA must, or may, get.
const (
	// OffloadRequirePacket: packet offload or the tunnel is not set up.
	OffloadRequirePacket = "require-packet"
	// OffloadPreferPacket: packet, else crypto, else none (host.yaml's
	// auto), and the fallback is reported.
	OffloadPreferPacket = "prefer-packet"
	OffloadCrypto       = "crypto"
	OffloadNone         = "none"
)

// Deletion policies: what an agent does when its overlay disappears.
const (
	// DeletionOrphan (the default) leaves the data path as it is: a
	// deleted CRD, namespace or object must not cut a running host off.
	DeletionOrphan = "Orphan"
	// DeletionTeardown removes what the agent applied for the overlay.
	DeletionTeardown = "Teardown"
)

// Overlay is the intent shared by the hosts it selects.
type Overlay struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              OverlaySpec `json:"spec"`
}

// OverlaySpec is what every member host must hold.
type OverlaySpec struct {
	// Members selects the Host objects (by their labels) that peer with
	// each other.
	Members metav1.LabelSelector `json:"members"`
	// VTEPPool is the network every member's VTEP must lie in (a CIDR).
	// The administrator owns it; a Host outside it is refused by the
	// admission policy and left out by every agent.
	VTEPPool string `json:"vtepPool"`
	// Segments are the overlay networks; each is one VTEP device per host.
	Segments []Segment `json:"segments"`
	// Encapsulation is vxlan or geneve.
	Encapsulation string `json:"encapsulation,omitempty"`
	// IPsecMode is transport or tunnel.
	IPsecMode string `json:"ipsecMode,omitempty"`
	// KeyBits is 128 or 256 (AES-GCM).
	KeyBits int           `json:"keyBits,omitempty"`
	Keying  OverlayKeying `json:"keying"`
	// Offload is require-packet, prefer-packet, crypto or none.
	Offload string    `json:"offload,omitempty"`
	MTU     MTUPolicy `json:"mtu,omitempty"`
	// DeletionPolicy is Orphan (default) or Teardown.
	DeletionPolicy string `json:"deletionPolicy,omitempty"`
	// InitiationWindow spreads the IKE initiations of a mesh over this
	// many seconds (each pair gets a fixed slot), so N hosts do not
	// negotiate N(N-1)/2 pairs at once.
	InitiationWindowSeconds int `json:"initiationWindowSeconds,omitempty"`
	// Rollout stages an edit of the settings that renegotiate every SA of
	// a host (offload, keying.rekeyTime, keying.lifeTime): the members
	// take it in batches, in the order of their names.
	Rollout Rollout `json:"rollout,omitempty"`
}

// Rollout is how a renegotiating edit reaches the members: a batch of
// hosts applies it, and the next batch waits until every host before it
// reports the new settings with its tunnels back up. A host that fails
// stops the rollout behind it.
type Rollout struct {
	// MaxUnavailable is how many hosts renegotiate at once (default 1).
	MaxUnavailable int `json:"maxUnavailable,omitempty"`
	// ProgressDeadlineSeconds is how long a host's tunnels may stay down
	// after it applied the new settings before it fails the rollout
	// (default 600).
	ProgressDeadlineSeconds int `json:"progressDeadlineSeconds,omitempty"`
}

// Segment is one overlay network.
type Segment struct {
	Name string `json:"name"`
	VNI  uint32 `json:"vni"`
	// Port is the UDP port (default 4789 for vxlan, 6081 for geneve).
	Port uint16 `json:"port,omitempty"`
}

// OverlayKeying is how the SAs get their keys: only IKE with per-host
// certificates in the API (manual keys are a two-host, file-only feature).
type OverlayKeying struct {
	Mode string `json:"mode"`
	// RekeyTime and LifeTime are Go durations ("1h", "90m").
	RekeyTime string `json:"rekeyTime,omitempty"`
	LifeTime  string `json:"lifeTime,omitempty"`
}

// MTUPolicy says how the VTEP MTU is chosen.
type MTUPolicy struct {
	// Policy is "auto" (the largest that fits the underlay, computed) or
	// "fixed" (Value, refused when it does not fit).
	Policy string `json:"policy,omitempty"`
	Value  int    `json:"value,omitempty"`
}

// Host is one host's object: its addresses (spec, the administrator's;
// its agent adds only its certificate and capabilities) and what it holds
// (status, written by its agent only). Its labels, the administrator's,
// decide its overlay.
type Host struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              HostSpec   `json:"spec"`
	Status            HostStatus `json:"status,omitempty"`
}

// HostSpec is a host's VTEP, underlay, capabilities and certificate.
type HostSpec struct {
	// VTEP is the tunnel endpoint address (on lo, /32 or /128).
	VTEP     string   `json:"vtep"`
	Underlay Underlay `json:"underlay"`
	// Capabilities are what the agent found the host can offload.
	Capabilities Capabilities `json:"capabilities,omitempty"`
	// Certificate is the host's X.509 certificate (PEM, public). The
	// private key never leaves the host and is refused here.
	Certificate string `json:"certificate,omitempty"`
}

// Underlay is how the host is reached.
type Underlay struct {
	// Address is the underlay address with its prefix (192.0.2.1/24).
	Address string `json:"address"`
	// Interface is the uplink (also the offload device).
	Interface string `json:"interface,omitempty"`
	// Gateway is the next hop to VTEPs outside Address's subnet.
	Gateway string `json:"gateway,omitempty"`
	MTU     int    `json:"mtu,omitempty"`
}

// Capabilities are the offload modes the host's device accepts.
type Capabilities struct {
	Offload []string `json:"offload,omitempty"`
	Kernel  string   `json:"kernel,omitempty"`
}

// HostStatus is what the agent found and did.
type HostStatus struct {
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
	LastApply          *LastApply         `json:"lastApply,omitempty"`
	Tunnels            []Tunnel           `json:"tunnels,omitempty"`
	Errors             []string           `json:"errors,omitempty"`
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
	// Agent is the claim of the agent acting for this Host: two agents
	// with one Host name are detected by it (internal/agent/claim.go).
	Agent *AgentClaim `json:"agent,omitempty"`
	// Rollout is where this host is in its overlay's staged rollout; the
	// other members read it to know when their turn comes.
	Rollout *HostRollout `json:"rollout,omitempty"`
	// Offload is the offload truth of the host's SAs, counted.
	Offload *OffloadSummary `json:"offload,omitempty"`
}

// Rollout states of a host (HostRollout.State).
const (
	// RolloutDone: the host holds the overlay's settings and every
	// tunnel that was up before it renegotiated is up again.
	RolloutDone = "Done"
	// RolloutWaiting: the host holds older settings; its turn has not
	// come (a host before it has not finished, or failed).
	RolloutWaiting = "Waiting"
	// RolloutProgressing: applied, waiting for its tunnels to come back.
	RolloutProgressing = "Progressing"
	// RolloutFailed: the apply failed, or the tunnels did not come back
	// within the deadline; the hosts after it wait.
	RolloutFailed = "Failed"
)

// HostRollout is one host's part of a staged rollout.
type HostRollout struct {
	// Overlay is the overlay's name (in the Host's namespace).
	Overlay string `json:"overlay"`
	// Settings are the renegotiating settings the host holds
	// ("offload=prefer-packet rekeyTime=1h0m0s lifeTime=default").
	Settings string `json:"settings"`
	State    string `json:"state"`
	Message  string `json:"message,omitempty"`
}

// AgentClaim names the agent instance acting for a Host ("machine-id:
// boot-id") and the instances of other machines that claim the same name
// and refuse to act. Contenders stay until an administrator clears them.
type AgentClaim struct {
	Instance   string   `json:"instance"`
	Contenders []string `json:"contenders,omitempty"`
}

// LastApply is the last reconcile that changed, or tried to change, the
// host.
type LastApply struct {
	Time   metav1.Time `json:"time"`
	Result string      `json:"result"` // Applied, NothingToDo, Refused, Failed, Orphaned, TornDown, Held
	Steps  int         `json:"steps"`
	// Digest identifies the desired state applied (sha256 of the host
	// document, 12 hex digits).
	Digest  string `json:"digest,omitempty"`
	Message string `json:"message,omitempty"`
}

// Tunnel is one peer's state and its SAs' offload truth.
type Tunnel struct {
	Peer  string `json:"peer"`
	VTEP  string `json:"vtep"`
	State string `json:"state"` // Up, Connecting, Down
	SAs   []SA   `json:"sas,omitempty"`
}

// SA is the offload truth of one SA: what was asked, what the kernel
// holds, and whether the hardware counts the traffic.
type SA struct {
	Dir    string `json:"dir"`
	SPI    string `json:"spi"`
	Asked  string `json:"asked"`
	Mode   string `json:"mode"` // packet, crypto, none: from the kernel
	Device string `json:"device,omitempty"`
	// Counting says whether the SA's own packet counter moved since the
	// agent's previous look (absent: first look).
	Counting *bool `json:"counting,omitempty"`
	// Evidence says who counts the SA's packets: device (packet offload:
	// the driver reports them), kernel (crypto offload: the kernel counts,
	// the driver has no per-SA counter), software (no offload).
	Evidence string   `json:"evidence,omitempty"`
	Fallback bool     `json:"fallback,omitempty"`
	WhyNot   []string `json:"whyNot,omitempty"`
}

// OffloadSummary is a host's offload truth in a few numbers: its SAs by
// the offload the kernel holds (the xfrm state's offload attribute), by
// whether their own counters moved since the previous look, and the SAs
// that do not hold the offload asked, with the reason.
type OffloadSummary struct {
	Packet   int `json:"packet"`
	Crypto   int `json:"crypto"`
	None     int `json:"none"`
	Counting int `json:"counting"`
	Idle     int `json:"idle"`
	// NotAsAsked lists at most 32 SAs.
	NotAsAsked []SAOffload `json:"notAsAsked,omitempty"`
}

// SAOffload is one SA that does not hold the offload asked.
type SAOffload struct {
	Peer   string `json:"peer"`
	Dir    string `json:"dir"`
	SPI    string `json:"spi"`
	Asked  string `json:"asked"`
	Mode   string `json:"mode"`
	Device string `json:"device,omitempty"`
	Reason string `json:"reason,omitempty"`
}
