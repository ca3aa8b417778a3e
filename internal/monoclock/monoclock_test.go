package monoclock

import (
	"testing"
	"time"
)

type fixed struct{ t time.Time }

func (f fixed) Now() time.Time { return f.t }

// Since reads the clock it is given: the system clock's monotonic
// reading, or a test's clock.
func TestSinceReadsItsClock(t *testing.T) {
	start := time.Now().Add(-time.Second)
	if d := Since(Or(nil), start); d < time.Second || d > time.Minute {
		t.Fatalf("system clock: %v since a second ago", d)
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if d := Since(fixed{at}, at.Add(-90*time.Second)); d != 90*time.Second {
		t.Fatalf("test clock: %v, want 1m30s", d)
	}
}

// Stamp is the test's clock, or on the system clock a time within the
// wall clock's reads around it whose monotonic reading moves on.
func TestStampReadsItsClock(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if got := Stamp(fixed{at}); !got.Equal(at) {
		t.Fatalf("test clock: %v, want %v", got, at)
	}
	stampBase.Store(nil)
	var last time.Time
	for i := range 3 {
		before := time.Now()
		s := Stamp(Or(nil))
		after := time.Now()
		// A reused reading is late by the wall clock's slew at most.
		if s.Round(0).Before(before.Round(0).Add(-time.Millisecond)) || s.Round(0).After(after.Round(0).Add(time.Millisecond)) {
			t.Fatalf("stamp %d: %v outside [%v, %v]", i, s, before, after)
		}
		if s.Before(last) || s.Equal(last) && i > 0 {
			t.Fatalf("stamp %d: %v not after %v", i, s, last)
		}
		if d := Since(Or(nil), s); d < 0 || d > time.Minute {
			t.Fatalf("stamp %d: %v since it", i, d)
		}
		last = s
		time.Sleep(2 * time.Millisecond)
	}
	// An old reading is replaced by the wall clock's.
	old := time.Now().Add(-2 * stampRefresh)
	stampBase.Store(&old)
	if s := Stamp(Or(nil)); time.Since(s) > stampRefresh {
		t.Fatalf("stamp %v kept a reading older than %v", s, stampRefresh)
	}
}
