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

// Since returns the time elapsed on c since t. On the system clock it
// reads only the monotonic clock (time.Since), which costs half of Now.
func Since(c Clock, t time.Time) time.Duration {
	if _, ok := c.(system); ok {
		return time.Since(t)
	}
	return c.Now().Sub(t)
}
