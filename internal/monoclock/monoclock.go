// Package monoclock reads a clock.Clock on the runtime's hot paths: on the
// system clock it reads the monotonic clock where it can, which costs
// half of time.Now.
package monoclock

import (
	"sync/atomic"
	"time"

	"github.com/gojob/gojob/clock"
)

// systemClock is the system clock (time.Now).
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// system is the system clock, Or(nil).
var system clock.Clock = systemClock{}

// Or returns c, or the system clock when c is nil: Or(nil) is the real
// clock, what a nil Clock in a config means.
func Or(c clock.Clock) clock.Clock {
	if c == nil {
		return system
	}
	return c
}

// IsSystem reports whether c is the system clock (Or(nil)).
func IsSystem(c clock.Clock) bool { return c == system }

// Since returns the time elapsed on c since t. On the system clock it
// reads only the monotonic clock (time.Since), which costs half of Now.
func Since(c clock.Clock, t time.Time) time.Duration {
	if IsSystem(c) {
		return time.Since(t)
	}
	return c.Now().Sub(t)
}

// Stamp returns the time on c, for a timestamp taken on a hot path (when
// a job starts). On the system clock it reads only the monotonic clock:
// the wall time is that of a time.Now read at most stampRefresh earlier,
// plus the monotonic time elapsed since, so a step of the wall clock
// shows within stampRefresh. Durations measured from a stamp (Since) are
// exact.
func Stamp(c clock.Clock) time.Time {
	if !IsSystem(c) {
		return c.Now()
	}
	if b := stampBase.Load(); b != nil {
		if d := time.Since(*b); d >= 0 && d < stampRefresh {
			return b.Add(d)
		}
	}
	now := time.Now()
	stampBase.Store(&now)
	return now
}

// stampRefresh is how long Stamp's wall clock reading is reused.
const stampRefresh = time.Second

var stampBase atomic.Pointer[time.Time]
