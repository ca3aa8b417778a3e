package clock

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
