package sidekiq

import (
	"context"
	"errors"
	"sync"
)

// Service is a feature's background work beside a server's jobs: a
// poller, a relay, a watch, a scheduler. The server starts its services
// in the order they were added when it starts, before it takes a job, and
// stops them in the reverse order when it stops, after its last job has
// ended and its fetch has closed, so a service that acts on running jobs
// (job control) or pushes jobs (a relay, a scheduler) does so for the
// server's whole life. A Go program runs gojob work's features with one
// Serve each.
type Service interface {
	// Start starts the service's work in the background and returns; an
	// error fails the server's Start.
	Start(ctx context.Context) error
	// Stop stops it, waiting within ctx for its work to end.
	Stop(ctx context.Context) error
}

// Loop is a Service that runs loop in a goroutine from Start until Stop
// cancels loop's context, and waits for loop to return.
func Loop(loop func(ctx context.Context)) Service { return &loopService{loop: loop} }

type loopService struct {
	loop   func(ctx context.Context)
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

func (l *loopService) Start(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cancel != nil {
		return errors.New("already started")
	}
	ctx, l.cancel = context.WithCancel(context.WithoutCancel(ctx))
	l.done = make(chan struct{})
	go func() {
		defer close(l.done)
		l.loop(ctx)
	}()
	return nil
}

func (l *loopService) Stop(ctx context.Context) error {
	l.mu.Lock()
	cancel, done := l.cancel, l.done
	l.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
