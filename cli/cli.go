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
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"
	ucli "github.com/urfave/cli/v2"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/gctune"
	"github.com/gojob/gojob/internal/redact"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/api"
	"github.com/gojob/gojob/sidekiq/wire"
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

// Flags are built fresh for every App: urfave/cli writes into a flag when
// it parses, so sharing one between concurrent Apps (tests) would race.

func newRedisFlag() *ucli.StringFlag {
	return &ucli.StringFlag{
		Name:    "redis",
		Aliases: []string{"r"},
		Usage:   "Redis URL (redis://host:port/db, rediss://…, unix:///path, redis+sentinel://host:port[,host:port…]/MASTER[/DB])",
		EnvVars: []string{"REDIS_URL"},
		Value:   "redis://127.0.0.1:6379/0",
	}
}

func newVersionFlag() *ucli.StringFlag {
	return &ucli.StringFlag{
		Name:  "sidekiq-version",
		Usage: "Sidekiq wire format to write: 6, 7, 8, x.y.z, or auto (the oldest live Ruby process; with none, the version recorded when one was last seen, else what Ruby left in Redis, else a format every Web UI reads; see docs/version-follow.md)",
		Value: "auto",
	}
}

func newJSONFlag() *ucli.BoolFlag {
	return &ucli.BoolFlag{Name: "json", Usage: "print JSON for scripts"}
}

// newLogger returns a human-readable logger on w (JSON with --log-json).
func newLogger(w io.Writer, jsonLogs bool, level string) zerolog.Logger {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil || level == "" {
		lvl = zerolog.InfoLevel
	}
	if jsonLogs {
		return zerolog.New(w).Level(lvl).With().Timestamp().Logger()
	}
	cw := zerolog.ConsoleWriter{Out: w, TimeFormat: time.RFC3339, NoColor: !isTerminal(w)}
	return zerolog.New(cw).Level(lvl).With().Timestamp().Logger()
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// openPool opens a pool for the --redis flag and checks it answers.
func openPool(ctx context.Context, url string, maxActive int) (*redis.Pool, error) {
	pool, err := sidekiq.NewPool(url, &sidekiq.PoolOptions{MaxActive: maxActive})
	if err != nil {
		return nil, ucli.Exit(redact.String(err.Error(), url), exitUsage)
	}
	conn, err := pool.GetContext(ctx)
	if err == nil {
		_, err = redis.DoContext(conn, ctx, "PING")
		conn.Close()
	}
	if err != nil {
		pool.Close()
		return nil, ucli.Exit(redact.String(fmt.Sprintf("cannot reach Redis at %s: %v", redact.URL(url), err), url), exitUnreachable)
	}
	return pool, nil
}

// resolveVersion turns the --sidekiq-version flag into the version a
// one-off command writes: the flag's, or with auto contract.DecideFormat's
// decision (read only: a command records nothing).
func resolveVersion(ctx context.Context, pool *redis.Pool, flag string, log zerolog.Logger) (wire.Version, error) {
	if isAuto(flag) {
		d, err := contract.DecideFormat(ctx, pool, time.Now())
		if err != nil {
			return wire.Version{}, err
		}
		log.Info().Str("sidekiq_version", d.Format.Version.String()).Str("source", d.Source).Strs("processes", d.Ruby).Msg(d.Reason())
		return d.Format.Version, nil
	}
	v, err := wire.ParseVersion(flag)
	if err != nil {
		return wire.Version{}, ucli.Exit(err.Error(), exitUsage)
	}
	return v, nil
}

// isAuto reports whether a --sidekiq-version value asks to follow the
// cluster.
func isAuto(flag string) bool { return flag == "" || strings.EqualFold(flag, "auto") }

// cmdEnv is what a command that talks to Redis works with: the parsed
// flags, a pool, the wire format to write and where to print.
type cmdEnv struct {
	c       *ucli.Context
	pool    *redis.Pool
	version wire.Version
	out     io.Writer
	json    bool
}

// withRedis opens the --redis pool, settles the wire format (the
// --sidekiq-version flag when the command has one and it is set, otherwise
// the oldest live process's) and runs f.
func withRedis(c *ucli.Context, f func(e *cmdEnv) error) error {
	pool, err := openPool(c.Context, c.String("redis"), 4)
	if err != nil {
		return err
	}
	defer pool.Close()
	log := newLogger(c.App.ErrWriter, false, "warn")
	v, err := resolveVersion(c.Context, pool, c.String("sidekiq-version"), log)
	if err != nil {
		return err
	}
	return f(&cmdEnv{c: c, pool: pool, version: v, out: c.App.Writer, json: c.Bool("json")})
}

// printJSON prints v indented, without HTML escapes.
func (e *cmdEnv) printJSON(v any) error {
	enc := json.NewEncoder(e.out)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// adminEnv is what a command built on the admin API works with.
type adminEnv struct {
	*cmdEnv
	api *api.API
}

func withAPI(f func(ctx context.Context, e *adminEnv) error) ucli.ActionFunc {
	return func(c *ucli.Context) error {
		return withRedis(c, func(base *cmdEnv) error {
			client, err := sidekiq.NewClient(&sidekiq.ClientConfig{Pool: base.pool, Version: base.version})
			if err != nil {
				return err
			}
			admin, err := api.New(&api.Config{Pool: base.pool, Version: base.version, Client: client})
			if err != nil {
				return err
			}
			return f(c.Context, &adminEnv{cmdEnv: base, api: admin})
		})
	}
}

// set returns the sorted set named by its key.
func (e *adminEnv) set(name string) *api.JobSet {
	switch name {
	case contract.KeyRetry:
		return e.api.RetrySet()
	case contract.KeySchedule:
		return e.api.ScheduledSet()
	}
	return e.api.DeadSet()
}
