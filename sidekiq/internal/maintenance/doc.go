// Package maintenance holds the background services of a Sidekiq server
// process, each its own type with a Config:
//
//   - Heartbeat: the process registry entry, the work hash of running jobs,
//     the stat counters and (7.0+) the job metrics flushed with it, and the
//     signals the Web UI sends through Redis;
//   - Poller: moves due jobs from the retry and schedule sets to their
//     queues, with Ruby's own Lua script;
//   - ProcessCleaner: removes dead processes from the registry, as the
//     poller of each Sidekiq version does.
//
// The loops start with Start(ctx) and end with Stop(ctx); one pass of each
// is a method that tests call directly (Heartbeat.Beat, Poller.runOnce,
// ProcessCleaner.runOnce). The Redis facts they follow are in
// docs/sidekiq-wire.md (#heartbeat, #poller, #stats, #metrics).
package maintenance

import (
	"context"
	"sync"
	"time"
)

// loop is the life cycle shared by the services: a goroutine started once,
// asked to stop once, waited for.
type loop struct {
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
}

func newLoop() loop { return loop{stop: make(chan struct{}), done: make(chan struct{})} }

// start runs f in a goroutine; done is closed when it returns.
func (l *loop) start(f func()) {
	go func() {
		defer close(l.done)
		f()
	}()
}

// Stop asks the loop to end and waits until it has, or until ctx ends. A
// loop that was never started counts as stopped.
func (l *loop) Stop(ctx context.Context, started bool) error {
	l.stopOnce.Do(func() { close(l.stop) })
	if !started {
		return nil
	}
	select {
	case <-l.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// sleep waits d and reports false when the loop was asked to stop or quiet
// (nil: never) was closed meanwhile.
func (l *loop) sleep(d time.Duration, quiet <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-l.stop:
		return false
	case <-quiet:
		return false
	}
}
