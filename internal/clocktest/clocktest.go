// Package clocktest holds the clocks of gojob's own tests: a settable
// one, and one that replays recorded runs.
package clocktest

import (
	"sync"
	"time"
)

// Sequence is a clock for tests that returns its times in turn, then the
// last one forever: it replays the clock readings of a recorded run (Ruby
// reads the clock for created_at, then again for enqueued_at). It is safe
// for concurrent use.
type Sequence struct {
	mu    sync.Mutex
	times []time.Time
}

// NewSequence returns a Sequence of times; it needs at least one.
func NewSequence(times ...time.Time) *Sequence {
	if len(times) == 0 {
		panic("clock: NewSequence needs a time")
	}
	return &Sequence{times: times}
}

// Now returns the next time.
func (s *Sequence) Now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.times[0]
	if len(s.times) > 1 {
		s.times = s.times[1:]
	}
	return t
}

// Fake is a settable clock for tests. It is safe for concurrent use.
type Fake struct {
	mu sync.Mutex
	t  time.Time
}

// NewFake returns a Fake set to t.
func NewFake(t time.Time) *Fake { return &Fake{t: t} }

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.t
}

// Set sets the fake time.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	f.t = t
	f.mu.Unlock()
}

// Advance moves the fake time forward by d.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	f.t = f.t.Add(d)
	f.mu.Unlock()
}
