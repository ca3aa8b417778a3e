// Package clock provides the time source that gojob's logic reads, so tests
// can drive time instead of sleeping: a nil Clock in a config is the
// system clock.
package clock

import "time"

// Clock tells the current time.
type Clock interface {
	Now() time.Time
}
