// SPDX-License-Identifier: Apache-2.0

package testutil

import (
	"bytes"
	"sync"
)

// SyncBuffer is a log sink a test shares with what it runs (a daemon's
// stderr, a tier's logger): writes and reads may come from different
// goroutines.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
