// SPDX-License-Identifier: Apache-2.0

package overlay

import "sluice/internal/config"

// Load reads what plan, apply, verify and teardown start from: host.yaml
// at file, its key file (when needKeys and a peer is keyed manually) and
// the live host.
func Load(file string, needKeys bool) (*config.Host, *config.Keys, *Live, error) {
	h, err := config.LoadHost(file)
	if err != nil {
		return nil, nil, nil, err
	}
	var keys *config.Keys
	if needKeys {
		if keys, err = h.ManualKeys(); err != nil {
			return nil, nil, nil, err
		}
	}
	live, err := ReadLive(h)
	if err != nil {
		return nil, nil, nil, err
	}
	return h, keys, live, nil
}
