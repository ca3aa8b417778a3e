package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/rs/zerolog"
	ucli "github.com/urfave/cli/v2"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// defaultDevAddr is where `gojob dev` listens unless told otherwise: the
// address Sidekiq and its Web UI use by default.
var defaultDevAddr = "127.0.0.1:6379"

func devCommand(o *options) *ucli.Command {
	return &ucli.Command{
		Name:  "dev",
		Usage: "start an embedded Redis-protocol server with a worker and demo jobs",
		Description: `Starts an in-process Redis-protocol server (miniredis; nothing is saved),
a gojob worker on it, and pushes a few demo jobs (DemoJob succeeds, FlakyJob
fails now and then and goes to the retry set, LaterJob is scheduled); it
also runs HardJob, which works for its first argument's seconds
(gojob push HardJob 5), unless --exec or --http names a class. Point
the Sidekiq Web UI or any gojob command at the printed URL (on another address
than 127.0.0.1:6379, export the REDIS_URL it prints). Use --redis to
run the worker and demo against a real Redis instead. --durable
--durable-class '*' keeps durable rows in an SQLite file (gojob-durable.db).`,
		Flags: append([]ucli.Flag{
			&ucli.StringFlag{Name: "addr", Value: defaultDevAddr, Usage: "address of the embedded server (when it is taken, dev exits 5: it does not move on its own; with another address it prints the REDIS_URL to export)"},
			&ucli.StringFlag{Name: "redis", Aliases: []string{"r"}, Usage: "use this Redis instead of an embedded one"},
			&ucli.StringSliceFlag{Name: "queue", Aliases: []string{"q"}, Usage: "queue to process, `NAME[,WEIGHT]` (default: default)"},
			&ucli.IntFlag{Name: "concurrency", Aliases: []string{"c"}, Value: 5, Usage: "jobs run at once"},
			&ucli.IntFlag{Name: "timeout", Aliases: []string{"t"}, Value: 25, Usage: "shutdown timeout in seconds"},
			&ucli.StringFlag{Name: "tag", Aliases: []string{"g"}, Value: "gojob-dev", Usage: "process tag"},
			&ucli.StringSliceFlag{Name: "label", Usage: "process label"},
			&ucli.StringFlag{Name: "sidekiq-version", Value: "auto", Usage: "wire format: 6, 7, 8, x.y.z or auto (on the embedded server, 7.3.10's layout that every Web UI from 6.4.1 to 8.x reads, with job metrics; see docs/version-follow.md)"},
			&ucli.StringSliceFlag{Name: "exec", Usage: "run `CLASS=COMMAND` for each job of CLASS"},
			&ucli.StringSliceFlag{Name: "http", Usage: "POST each job of CLASS to URL: `CLASS=URL`"},
			&ucli.IntFlag{Name: "max-retries", Value: 25, Usage: "retries for retry: true"},
			&ucli.StringFlag{Name: "fetch", Value: "reliable", Usage: "reliable, basic or batch (see gojob work --help)"},
			&ucli.BoolFlag{Name: "no-demo", Usage: "do not push demo jobs"},
			&ucli.BoolFlag{Name: "log-json", Usage: "log JSON lines"},
			&ucli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn, error"},
		}, append(append(heartbeatWorkFlags(), durableWorkFlags()...), devWebFlags()...)...),
		Action: func(c *ucli.Context) error {
			log := newLogger(c.App.ErrWriter, c.Bool("log-json"), c.String("log-level"))
			url := c.String("redis")
			if url == "" {
				mr, u, err := startEmbedded(c.String("addr"))
				if err != nil {
					return err
				}
				defer mr.Close()
				url = u
				fmt.Fprintf(c.App.Writer, "embedded Redis-protocol server listening on %s (nothing is saved)\n", url)
			}
			printDevHints(c.App.Writer, url)
			cfg, err := serverConfigFromFlags(c, log)
			if err != nil {
				return err
			}
			if isAuto(c.String("sidekiq-version")) {
				cfg.FollowVersion = true
			} else if cfg.Version, err = contract.ParseVersion(c.String("sidekiq-version")); err != nil {
				return ucli.Exit(err.Error(), exitUsage)
			}
			cfg.PollIntervalAverage = 2 * time.Second
			pool, err := openPool(c.Context, url, 0)
			if err != nil {
				return err
			}
			defer pool.Close()
			cfg.Pool = pool
			srv, _, stopHeartbeats, err := buildServer(c, cfg, o, log)
			if err != nil {
				return err
			}
			defer stopHeartbeats()
			// --durable works here too; its default store is an SQLite file,
			// so no database server is needed.
			stopDurable, err := setupDurable(c, srv, nil, log)
			if err != nil {
				return err
			}
			defer stopDurable()
			stopWeb, err := startDevWeb(c, srv, pool, log)
			if err != nil {
				return err
			}
			defer stopWeb()
			registerDemo(srv, log, execClasses(c))
			if !c.Bool("no-demo") {
				if err := pushDemo(c.Context, srv.Client()); err != nil {
					if c.Context.Err() != nil {
						return nil // stopped while starting: nothing runs yet
					}
					return err
				}
			}
			return runServer(c.Context, srv, log)
		},
	}
}

// execClasses are the classes given to --exec and --http: their handlers
// are the user's, not the demo's.
func execClasses(c *ucli.Context) map[string]bool {
	out := map[string]bool{}
	for _, spec := range append(c.StringSlice("exec"), c.StringSlice("http")...) {
		if class, _, ok := strings.Cut(spec, "="); ok {
			out[strings.TrimSpace(class)] = true
		}
	}
	return out
}

// hardJobMax caps a HardJob's work.
const hardJobMax = 60 * time.Second

// registerDemo adds the demo handlers, those of the demo jobs and HardJob
// (the README's `gojob push HardJob 1`), except for the classes in skip.
func registerDemo(srv *sidekiq.Server, log zerolog.Logger, skip map[string]bool) {
	handle := func(class string, f func(ctx context.Context, job *wire.Job) error) {
		if !skip[class] {
			srv.Handle(class, sidekiq.HandlerFunc(f), nil)
		}
	}
	// HardJob works for its first argument's seconds (1 by default, at
	// most a minute), long enough to be seen on the Busy page.
	handle("HardJob", func(ctx context.Context, job *wire.Job) error {
		d := time.Second
		var args []any
		if v, ok := job.Get("args"); ok && json.Unmarshal(v.Encode(), &args) == nil && len(args) > 0 {
			if n, ok := args[0].(float64); ok && n >= 0 {
				d = min(time.Duration(n*float64(time.Second)), hardJobMax)
			}
		}
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return ctx.Err()
		}
		log.Info().Str("jid", job.JID()).RawJSON("args", argsJSON(job)).Str("worked", d.Round(time.Millisecond).String()).Msg("HardJob ran")
		return nil
	})
	handle("DemoJob", func(ctx context.Context, job *wire.Job) error {
		log.Info().Str("jid", job.JID()).RawJSON("args", argsJSON(job)).Msg("DemoJob ran")
		return nil
	})
	handle("FlakyJob", func(ctx context.Context, job *wire.Job) error {
		if rand.IntN(2) == 0 {
			return errors.New("flaky: failed this time, will be retried")
		}
		log.Info().Str("jid", job.JID()).Msg("FlakyJob succeeded")
		return nil
	})
	handle("LaterJob", func(ctx context.Context, job *wire.Job) error {
		log.Info().Str("jid", job.JID()).Msg("LaterJob ran (it was scheduled)")
		return nil
	})
}

func argsJSON(job *wire.Job) []byte {
	v, _ := job.Get("args")
	return v.Encode()
}

// pushDemo pushes the demo jobs.
func pushDemo(ctx context.Context, c *sidekiq.Client) error {
	for i := 1; i <= 3; i++ {
		if _, err := c.Enqueue(ctx, "", "DemoJob", i, "hello from gojob", map[string]any{"n": float64(i) / 2}); err != nil {
			return err
		}
	}
	for i := 0; i < 3; i++ {
		j, err := wire.NewJob("FlakyJob", i)
		if err != nil {
			return err
		}
		j.Set("retry", rubyjson.IntValue(3))
		if _, err := c.Push(ctx, j, nil); err != nil {
			return err
		}
	}
	j, err := wire.NewJob("LaterJob")
	if err != nil {
		return err
	}
	_, err = c.Push(ctx, j, &sidekiq.PushOpts{In: 10 * time.Second})
	return err
}
