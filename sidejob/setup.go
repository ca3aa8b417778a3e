package sidejob

import (
	"context"

	"github.com/gojob/gojob/sidekiq"
)

// ServerSetup returns a setup function for a sidekiq.Server (for example
// cli.WithServerSetup) that serves the workers of reg on queue: it writes
// the registry to workers:<queue> (replacing it; one process type should own
// a queue), and registers the runtime for every class. The SideJob client
// shares the server's Redis pool and Sidekiq client. The server should
// fetch only from queue, as SideJob requires one queue per process.
// reg.Logger and reg.ReapInterval are read when the setup runs.
func ServerSetup(queue string, reg *Registry) func(*sidekiq.Server) error {
	return func(srv *sidekiq.Server) error {
		sk := srv.Client()
		c, err := NewClient(&Config{Pool: sk.Pool(), Sidekiq: sk})
		if err != nil {
			return err
		}
		rt, err := newJobRuntime(&runtimeConfig{Client: c, Registry: reg, Logger: reg.Logger})
		if err != nil {
			return err
		}
		if err := c.registerAll(context.Background(), queue, reg); err != nil {
			return err
		}
		rt.mount(srv)
		if reg.ReapInterval > 0 {
			srv.Serve(sidekiq.Loop(func(ctx context.Context) { rt.reapLoop(ctx, reg.ReapInterval) }))
		}
		return nil
	}
}
