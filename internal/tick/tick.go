// Package tick runs the periodic loops of the background services: a step
// every period until the service's context ends.
package tick

import (
	"context"
	"time"
)

// Every calls step once a period (the first call one period from now)
// until ctx ends or step returns false.
func Every(ctx context.Context, period time.Duration, step func() bool) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !step() {
			return
		}
	}
}
