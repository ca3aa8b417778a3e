package sidejob

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/gojob/gojob/sidekiq"
)

// ServeOpts are the options of ServerSetup.
type ServeOpts struct {
	// Logger receives the runtime's logs.
	Logger zerolog.Logger
	// ReapInterval, when positive, is how often the server looks for jobs
	// left running by a dead process and queues them again
	// (docs/sidejob.md#weakness-3-job-stuck-in-running).
	ReapInterval time.Duration
}

// ServerSetup returns a setup function for a sidekiq.Server (for example
// cli.WithServerSetup) that serves the workers of reg on queue: it writes
// the registry to workers:<queue> (replacing it; one process type should own
// a queue), and registers the runtime for every class. The SideJob client
// shares the server's Redis pool and Sidekiq client. The server should
// fetch only from queue, as SideJob requires one queue per process.
func ServerSetup(queue string, reg *Registry, o *ServeOpts) func(*sidekiq.Server) error {
	if o == nil {
		o = &ServeOpts{}
	}
	return func(srv *sidekiq.Server) error {
		sk := srv.Client()
		c, err := NewClient(&Config{Pool: sk.Pool(), Sidekiq: sk})
		if err != nil {
			return err
		}
		rt, err := newJobRuntime(&runtimeConfig{Client: c, Registry: reg, Logger: o.Logger})
		if err != nil {
			return err
		}
		if err := c.registerAll(context.Background(), queue, reg); err != nil {
			return err
		}
		rt.mount(srv)
		if o.ReapInterval > 0 {
			ctx, cancel := context.WithCancel(context.Background())
			go func() {
				<-srv.Done()
				cancel()
			}()
			go rt.reapLoop(ctx, o.ReapInterval)
		}
		return nil
	}
}
