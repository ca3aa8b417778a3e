package cli

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"
	ucli "github.com/urfave/cli/v2"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/redisflag"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/api"
	"github.com/gojob/gojob/sidekiq/wire"
)

// Flags are built fresh for every App: urfave/cli writes into a flag when
// it parses, so sharing one between concurrent Apps (tests) would race.

func newRedisFlag() *ucli.StringFlag { return redisflag.Flag() }

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
	return redisflag.Open(ctx, url, maxActive, exitUsage, exitUnreachable)
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
	v, err := contract.ParseVersion(flag)
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

// withRedis opens the --redis pool, settles the wire format (openRedis)
// and runs f.
func withRedis(c *ucli.Context, f func(e *cmdEnv) error) error {
	pool, v, err := openRedis(c, 4, newLogger(c.App.ErrWriter, false, "warn"))
	if err != nil {
		return err
	}
	defer pool.Close()
	return f(&cmdEnv{c: c, pool: pool, version: v, out: c.App.Writer, json: c.Bool("json")})
}

// openRedis opens the --redis pool (maxActive connections at the most)
// and settles the wire format: the --sidekiq-version flag when the
// command has one and it is set, otherwise the oldest live process's
// (resolveVersion, which logs its decision to log).
func openRedis(c *ucli.Context, maxActive int, log zerolog.Logger) (*redis.Pool, wire.Version, error) {
	pool, err := openPool(c.Context, c.String("redis"), maxActive)
	if err != nil {
		return nil, wire.Version{}, err
	}
	v, err := resolveVersion(c.Context, pool, c.String("sidekiq-version"), log)
	if err != nil {
		pool.Close()
		return nil, wire.Version{}, err
	}
	return pool, v, nil
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
