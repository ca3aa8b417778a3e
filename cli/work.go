package cli

import (
	"fmt"
	"os"
	"runtime/pprof"

	ucli "github.com/urfave/cli/v2"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/tuning"
)

func workCommand(o *options) *ucli.Command {
	return &ucli.Command{
		Name:  "work",
		Usage: "process jobs from Sidekiq queues, as a Ruby Sidekiq process would",
		Description: `Fetches jobs from the given queues, runs them, retries failures with Sidekiq's
algorithm, polls the retry and schedule sets and keeps a heartbeat so that the
Sidekiq Web UI shows this process on its Busy page (Quiet and Stop work from
there). SIGTSTP quiets, SIGTERM/SIGINT stop gracefully (unfinished jobs go back
to their queue), SIGTTIN dumps goroutines.

Use the default fetch, reliable: a job moves atomically from its queue to an
in-progress list of this process (working:queue:NAME:IDENTITY) and leaves it
only once its outcome is written; if the process dies (kill -9, OOM, a lost
node), live processes push its jobs back, so none is lost. It drains faster
than BasicFetch with one queue or several, and about as fast with 10 KB jobs
(docs/benchmarks.md). A job whose process died --max-recoveries times goes to
the dead set as a poison pill. Two other modes exist for two reasons: --fetch
basic is Sidekiq's BasicFetch byte for byte (BRPOP, Ruby's Redis traffic; a
crash loses the running jobs), and --fetch batch pops the jobs of all idle
slots with one BLMPOP (Redis 7+): the fewest Redis commands per job, for a
Redis shared by many processes, and as lossy as basic.

A stock binary has no Go handlers: use --exec CLASS=COMMAND (the payload JSON on
stdin; GOJOB_JID, GOJOB_CLASS, GOJOB_QUEUE in the environment; exit 0 = success,
otherwise the last line of stderr is the error message) or --http CLASS=URL
(POST of the payload; 2xx = success).

Ordered queues (jobs pushed with gojob push --key K) are worked by gojob
ordered work (docs/ordered.md).`,
		Flags: append([]ucli.Flag{
			newRedisFlag(),
			&ucli.StringSliceFlag{Name: "queue", Aliases: []string{"q"}, Usage: "queue to process, `NAME[,WEIGHT]`; repeat for several (default: default)"},
			&ucli.IntFlag{Name: "concurrency", Aliases: []string{"c"}, Value: 10, Usage: "jobs run at once"},
			&ucli.StringSliceFlag{Name: "queue-concurrency", Usage: "run at most N jobs of queue Q at once in this process, the other slots taking the other queues: `Q=N`; repeat (docs/queue-concurrency.md)"},
			&ucli.IntFlag{Name: "timeout", Aliases: []string{"t"}, Value: 25, Usage: "shutdown timeout in seconds"},
			&ucli.StringFlag{Name: "tag", Aliases: []string{"g"}, Usage: "process tag shown in the Web UI"},
			&ucli.StringSliceFlag{Name: "label", Usage: "process label shown in the Web UI (repeat)"},
			newVersionFlag(),
			&ucli.BoolFlag{Name: "force-version", Usage: "write an explicit --sidekiq-version even where live Ruby processes cannot read it (8.x over 7.x or 6.x readers)"},
			&ucli.StringSliceFlag{Name: "exec", Usage: "run `CLASS=COMMAND` (sh -c) for each job of CLASS; repeat"},
			&ucli.StringSliceFlag{Name: "http", Usage: "POST each job of CLASS to URL: `CLASS=URL`; repeat"},
			&ucli.StringFlag{Name: "fetch", Value: "reliable", Usage: "reliable (recommended: no job lost when a process dies), basic (Sidekiq's BasicFetch, Ruby's Redis traffic byte for byte) or batch (one BLMPOP for all idle slots, Redis 7+; loses what basic loses)"},
			&ucli.IntFlag{Name: "fetch-pipeline", Value: tuning.FetchPipeline, Usage: "basic fetch: idle slots whose BRPOPs share one connection, pipelined (1 = a connection per slot, as Ruby)"},
			&ucli.IntFlag{Name: "fetch-ahead", Value: tuning.FetchAhead, Usage: "reliable fetch: jobs a slot may hold ahead of the one it runs while every slot is busy and its jobs are short (0 = none; docs/reliable-fetch.md)"},
			&ucli.IntFlag{Name: "max-recoveries", Value: 3, Usage: "reliable fetch: a job whose process died this many times while running it goes to the dead set (poison pill)"},
			&ucli.IntFlag{Name: "max-retries", Value: 25, Usage: "retries for jobs with retry: true"},
			&ucli.DurationFlag{Name: "poll-interval", Usage: "average time between this process's polls of the retry and schedule sets (Sidekiq's average_scheduled_poll_interval; default: 5 s times the number of processes)"},
			&ucli.BoolFlag{Name: "log-json", Usage: "log JSON lines instead of text"},
			&ucli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn, error"},
			&ucli.StringFlag{Name: "cpuprofile", Usage: "write a CPU profile of the whole run to `FILE`, complete when the process stops (go tool pprof)", TakesFile: true},
		}, append(append(append(append(heartbeatWorkFlags(), durableWorkFlags()...), cronWorkFlags()...), limitWorkFlags()...), metricsWorkFlags()...)...),
		Action: func(c *ucli.Context) error {
			log := newLogger(c.App.ErrWriter, c.Bool("log-json"), c.String("log-level"))
			if path := c.String("cpuprofile"); path != "" {
				stop, err := startCPUProfile(path)
				if err != nil {
					return err
				}
				defer stop()
			}
			cfg, err := serverConfigFromFlags(c, log)
			if err != nil {
				return err
			}
			pool, err := openPool(c.Context, c.String("redis"), 0)
			if err != nil {
				return err
			}
			defer pool.Close()
			cfg.Pool = pool
			if isAuto(c.String("sidekiq-version")) {
				cfg.FollowVersion = true
			} else if cfg.Version, err = contract.ParseVersion(c.String("sidekiq-version")); err != nil {
				return ucli.Exit(err.Error(), exitUsage)
			}
			cfg.ForceVersion = c.Bool("force-version")
			srv, expired, stopHeartbeats, err := buildServer(c, cfg, o, log)
			if err != nil {
				return err
			}
			defer stopHeartbeats()
			if err := applyLimits(c, srv, pool); err != nil {
				return err
			}
			stopMetrics, err := startMetrics(c, srv, pool, log, expired)
			if err != nil {
				return err
			}
			defer stopMetrics()
			stopTracing, err := setupTracing(c.Context, log, srv)
			if err != nil {
				return err
			}
			defer stopTracing()
			stopDurable, err := setupDurable(c, srv, nil, log)
			if err != nil {
				return err
			}
			defer stopDurable()
			if err := serveCron(c, srv, log); err != nil {
				return err
			}
			return runServer(c.Context, srv, log)
		},
	}
}

// startCPUProfile profiles this process into path until the returned func
// runs.
func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, ucli.Exit(fmt.Sprintf("--cpuprofile: %v", err), exitUsage)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
