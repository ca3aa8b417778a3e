// Package clock provides the time source that gojob's logic reads, so tests
// can drive time instead of sleeping.
package clock

import "time"

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
