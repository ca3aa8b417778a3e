package cli

import (
	ucli "github.com/urfave/cli/v2"

	"github.com/gojob/gojob/sidekiq"
)

// Option customizes Run.
type Option func(*options)

type options struct {
	handlers []handlerReg
	setup    []func(*sidekiq.Server) error
	commands []*ucli.Command
}

type handlerReg struct {
	class string
	h     sidekiq.Handler
	opts  *sidekiq.HandlerOptions
}

// WithHandler registers a Go handler for a job class in `gojob work`,
// `gojob ordered work` and `gojob dev`.
func WithHandler(class string, h sidekiq.Handler, opts *sidekiq.HandlerOptions) Option {
	return func(o *options) { o.handlers = append(o.handlers, handlerReg{class, h, opts}) }
}

// WithServerSetup runs f on every server the CLI builds, before it starts
// (to add middleware, death handlers, or handlers that need the server).
func WithServerSetup(f func(*sidekiq.Server) error) Option {
	return func(o *options) { o.setup = append(o.setup, f) }
}

// WithCommand adds a command to the application, listed after gojob's own
// commands and before version. It gets gojob's usage conventions (a bad
// flag exits 2 with a one-line hint) and exit codes. Give every Run a
// command built for it: urfave/cli writes into a flag when it parses.
func WithCommand(cmd *ucli.Command) Option {
	return func(o *options) { o.commands = append(o.commands, cmd) }
}
