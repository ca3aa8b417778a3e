// Package cli is gojob's command line. The stock binary (cmd/gojob) calls
// Run, adding `gojob bench` with WithCommand; a Go program that has its own
// handlers calls Run with options that register them, and gets the same
// commands:
//
//	func main() {
//		os.Exit(cli.Run(context.Background(), os.Args, os.Stdout, os.Stderr,
//			cli.WithHandler("HardJob", sidekiq.HandlerFunc(hardJob), nil)))
//	}
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	ucli "github.com/urfave/cli/v2"

	"github.com/gojob/gojob/internal/gctune"
)

// Run runs the command line and returns the process exit code.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer, opts ...Option) int {
	gctune.Apply()
	o := &options{}
	for _, f := range opts {
		f(o)
	}
	app := newApp(stdout, stderr, o)
	if err := app.RunContext(ctx, interspersed(app, args)); err != nil {
		var ec ucli.ExitCoder
		if errors.As(err, &ec) {
			code := ec.ExitCode()
			msg := err.Error()
			if code == exitUnreachable && strings.HasPrefix(msg, "No help topic for ") {
				// `gojob help NOSUCH`: urfave/cli's help command exits 3,
				// our code for an unreachable Redis.
				name := strings.Trim(strings.TrimPrefix(msg, "No help topic for "), "'")
				msg, code = fmt.Sprintf("unknown command %q\nRun 'gojob --help' for usage.", name), exitUsage
			}
			if msg != "" {
				fmt.Fprintln(stderr, "gojob:", msg)
			}
			return code
		}
		fmt.Fprintln(stderr, "gojob:", err)
		return exitFailed
	}
	return exitOK
}

// newApp builds the urfave/cli application.
func newApp(stdout, stderr io.Writer, o *options) *ucli.App {
	if o == nil {
		o = &options{}
	}
	cmds := []*ucli.Command{
		workCommand(o),
		devCommand(o),
		durableCommand(o),
		sidejobCommand(o),
		cronCommand(),
		webCommand(),
		topCommand(),
		orderedCommand(o),
	}
	cmds = append(cmds, adminCommands()...)
	cmds = append(cmds, jobControlCommands()...)
	cmds = append(cmds, batchCommand())
	cmds = append(cmds, o.commands...)
	cmds = append(cmds, versionCommand())
	app := &ucli.App{
		Name:                      "gojob",
		Usage:                     "run and inspect Sidekiq jobs from Go, sharing Redis with Ruby Sidekiq",
		Version:                   versionString(),
		CustomAppHelpTemplate:     appHelpTemplate,
		Writer:                    stdout,
		ErrWriter:                 stderr,
		DisableSliceFlagSeparator: true,
		ExitErrHandler:            func(*ucli.Context, error) {}, // Run reports errors
		Commands:                  cmds,
		// -r before the command: interspersed hands it to the command.
		Flags: []ucli.Flag{newRedisFlag()},
	}
	applyUsageConventions(app)
	return app
}
