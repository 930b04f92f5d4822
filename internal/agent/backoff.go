// SPDX-License-Identifier: Apache-2.0

package agent

import "time"

// Failed reconciles back off. A reconcile that fails runs apply and then
// the rollback: on a desired state that fails every time (a Host with a
// bad address), retrying at each --interval churns the data path of the
// host and writes to the API for nothing. After n failures in a row the
// same desired state is tried again after interval * 2^(n-1), at most
// --max-backoff; a changed desired state is tried at once, and a success
// resets the count.
type backoff struct {
	base, max time.Duration
	n         int
	until     time.Time
	// key identifies the desired state that failed.
	key string
}

// failed records a failure of key at now and returns the wait before the
// next attempt.
func (b *backoff) failed(key string, now time.Time) time.Duration {
	if key != b.key {
		b.n = 0
	}
	b.key = key
	b.n++
	d := b.base
	for i := 1; i < b.n && d < b.max; i++ {
		d *= 2
	}
	d = min(d, b.max)
	b.until = now.Add(d)
	return d
}

func (b *backoff) reset() { b.n, b.until, b.key = 0, time.Time{}, "" }

// holds says whether key must not be tried at now: it is the state that
// failed and its wait has not passed.
func (b *backoff) holds(key string, now time.Time) bool {
	return b.n > 0 && key == b.key && now.Before(b.until)
}

// after records an outcome of key: a failure backs off, a success (or
// nothing to do) resets. It returns the wait after a failure (0 else).
func (b *backoff) after(out Outcome, key string, now time.Time) time.Duration {
	switch out.Result {
	case ResultFailed:
		return b.failed(key, now)
	case ResultApplied, ResultNothingToDo, ResultTornDown:
		b.reset()
	}
	return 0
}
