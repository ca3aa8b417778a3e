// Package clock provides the time source that gojob's logic reads, so tests
// can drive time instead of sleeping.
package clock

import (
	"sync/atomic"
	"time"
)

// Clock tells the current time.
type Clock interface {
	Now() time.Time
}

// system is the system clock.
type system struct{}

func (system) Now() time.Time { return time.Now() }

// Or returns c, or the system clock (time.Now) when c is nil: Or(nil) is
// the real clock.
func Or(c Clock) Clock {
	if c == nil {
		return system{}
	}
	return c
}

// IsSystem reports whether c is the system clock (Or(nil)).
func IsSystem(c Clock) bool {
	_, ok := c.(system)
	return ok
}

// Since returns the time elapsed on c since t. On the system clock it
// reads only the monotonic clock (time.Since), which costs half of Now.
func Since(c Clock, t time.Time) time.Duration {
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
func Stamp(c Clock) time.Time {
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
