// SPDX-License-Identifier: Apache-2.0

// Package fleet is sluice's Kubernetes side: the Overlay and Host objects
// (types in fleet/v1alpha1, CRDs in deploy/crds), and Render, which turns
// them into the host.yaml document one agent applies. Every agent renders
// its own document from the same objects: peers are computed on each host,
// no leader is needed for the data path.
package fleet

import "sluice/internal/fleet/v1alpha1"

// The resources, re-exported for the manifest applier and the agent.
var (
	OverlaysGVR = v1alpha1.OverlaysResource
	HostsGVR    = v1alpha1.HostsResource
)
