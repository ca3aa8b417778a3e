package clocktest

import (
	"testing"
	"time"
)

// A Sequence replays its times in order, then holds the last one.
func TestSequenceReplaysThenHoldsTheLast(t *testing.T) {
	a, b := time.Unix(1, 0), time.Unix(2, 0)
	s := NewSequence(a, b)
	for i, want := range []time.Time{a, b, b, b} {
		if got := s.Now(); !got.Equal(want) {
			t.Fatalf("reading %d: %v, want %v", i, got, want)
		}
	}
}
