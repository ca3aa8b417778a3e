package cli

import (
	"context"
	"errors"
	"fmt"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/rs/zerolog"
	ucli "github.com/urfave/cli/v2"

	"github.com/gojob/gojob/internal/orderedstore"
	"github.com/gojob/gojob/ordered"
	"github.com/gojob/gojob/sidekiq"
)

// orderedWorkCommand is gojob ordered work QUEUE: one ordered queue per
// process, handlers as for Sidekiq queues (Go, --exec, --http), run job by
// job in each key's order. Its flags are only those an ordered worker
// uses; gojob work's fetch, retry, cron, durable, limit and metrics flags
// have no meaning for it.
func orderedWorkCommand(o *options) *ucli.Command {
	return &ucli.Command{
		Name:      "work",
		Usage:     "work an ordered queue: each key's jobs one after the other in push order, keys in parallel",
		ArgsUsage: "QUEUE",
		Description: `Works the ordered queue QUEUE (jobs pushed with gojob push -q QUEUE --key K):
each key's jobs run one after the other in push order, across any number of
processes, different keys in parallel. The queue's shards are leased to the
live processes; a dead process's shards are taken over once its leases lapse
(--lease) and its unfinished jobs run again, in order. SIGTERM/SIGINT stop
gracefully: running batches get --timeout seconds, then what they did not
finish goes back. One process works one queue; run several for more.

Handlers are those of gojob work: Go handlers of a custom binary,
--exec CLASS=COMMAND (the payload JSON on stdin; exit 0 = success) or
--http CLASS=URL (POST of the payload; 2xx = success). A failed job waits for
its key's retry with the jobs behind it; after --max-retry-count failures
the oldest goes to the morgue (gojob ordered morgue). Flags go before QUEUE.
See docs/ordered.md.`,
		Flags: []ucli.Flag{
			newRedisFlag(),
			&ucli.IntFlag{Name: "concurrency", Aliases: []string{"c"}, Value: 10, Usage: "slots: shards worked at once, one batch each"},
			&ucli.IntFlag{Name: "timeout", Aliases: []string{"t"}, Value: 25, Usage: "shutdown timeout in seconds"},
			&ucli.IntFlag{Name: "shards", Usage: "the queue's shard count (default: the queue's own, 16 for a new queue; it cannot change)"},
			&ucli.DurationFlag{Name: "lease", Value: 10 * time.Second, Usage: "shard lease TTL; a dead process's shards are taken over after at most this long"},
			&ucli.IntFlag{Name: "max-retry-count", Value: 25, Usage: "failures of a key before its oldest job goes to the morgue (Lowkiq's max_retry_count)"},
			&ucli.IntFlag{Name: "batch-keys", Value: 1, Usage: "due keys of one shard taken per fetch (Lowkiq's batch_size)"},
			&ucli.StringSliceFlag{Name: "exec", Usage: "run `CLASS=COMMAND` (sh -c) for each job of CLASS; repeat"},
			&ucli.StringSliceFlag{Name: "http", Usage: "POST each job of CLASS to URL: `CLASS=URL`; repeat"},
			&ucli.BoolFlag{Name: "log-json", Usage: "log JSON lines instead of text"},
			&ucli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn, error"},
		},
		Action: func(c *ucli.Context) error {
			return runOrdered(c, o, newLogger(c.App.ErrWriter, c.Bool("log-json"), c.String("log-level")))
		},
	}
}

// runOrdered works the ordered queue named by the one argument until a
// SIGTERM or SIGINT.
func runOrdered(c *ucli.Context, o *options, log zerolog.Logger) error {
	switch {
	case c.NArg() == 0:
		return usageError("gojob ordered work", "ordered work: QUEUE is required")
	case c.NArg() > 1:
		return usageError("gojob ordered work", fmt.Sprintf("ordered work: want one QUEUE; got %q", strings.Join(c.Args().Slice(), " ")))
	}
	queue := c.Args().First()
	if c.Int("concurrency") <= 0 || c.Int("shards") < 0 || c.Int("max-retry-count") <= 0 || c.Int("batch-keys") <= 0 {
		return ucli.Exit("--concurrency, --max-retry-count and --batch-keys must be at least 1, --shards not negative", exitUsage)
	}
	handlers, err := orderedHandlers(o, c.StringSlice("exec"), c.StringSlice("http"), log)
	if err != nil {
		return err
	}
	if len(handlers) == 0 {
		return ucli.Exit("gojob ordered work needs handlers: --exec CLASS=COMMAND, --http CLASS=URL or Go handlers", exitUsage)
	}
	pool, err := openPool(c.Context, c.String("redis"), 0)
	if err != nil {
		return err
	}
	defer pool.Close()
	w, err := ordered.NewWorker(&ordered.Config{
		Pool: pool, Queue: queue, Shards: c.Int("shards"), Concurrency: c.Int("concurrency"),
		Handler: handlers, MaxRetryCount: c.Int("max-retry-count"), BatchKeys: c.Int("batch-keys"),
		LeaseTTL: c.Duration("lease"), ShutdownTimeout: time.Duration(c.Int("timeout")) * time.Second, Logger: log,
	})
	if err != nil {
		return ucli.Exit(err.Error(), exitUsage)
	}
	ctx, stop := signal.NotifyContext(c.Context, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := w.Start(ctx); err != nil {
		if errors.Is(err, orderedstore.ErrShardsMismatch) || errors.Is(err, orderedstore.ErrBadQueueName) {
			return ucli.Exit(err.Error(), exitUsage)
		}
		return err
	}
	log.Info().Str("queue", queue).Msg("working ordered queue")
	<-ctx.Done()
	log.Info().Msg("stopping: running batches finish, then the leases are given back")
	return w.Stop(context.Background())
}

// classHandlers runs each job of an ordered batch with the sidekiq.Handler
// of its class, in order, stopping at the first failure (a
// *ordered.PartialError).
type classHandlers map[string]sidekiq.Handler

// errNoHandler fails a job whose class has no handler.
var errNoHandler = errors.New("ordered: no handler for class")

// Perform runs the batch job by job.
func (m classHandlers) Perform(ctx context.Context, b *ordered.Batch) error {
	for i, job := range b.Jobs {
		h := m[job.Class()]
		if h == nil {
			return &ordered.PartialError{Done: i, Err: fmt.Errorf("%w %q", errNoHandler, job.Class())}
		}
		if err := h.Perform(ctx, job); err != nil {
			return &ordered.PartialError{Done: i, Err: err}
		}
	}
	return nil
}

// orderedHandlers maps job classes to the Go, --exec and --http handlers.
func orderedHandlers(o *options, execs, https []string, log zerolog.Logger) (classHandlers, error) {
	m := classHandlers{}
	for _, h := range o.handlers {
		m[h.class] = h.h
	}
	for _, spec := range execs {
		class, command, ok := strings.Cut(spec, "=")
		if !ok || class == "" || command == "" {
			return nil, ucli.Exit(fmt.Sprintf("--exec %q: want CLASS=COMMAND", spec), 2)
		}
		m[class] = &execHandler{Command: command, Log: log}
	}
	for _, spec := range https {
		class, url, ok := strings.Cut(spec, "=")
		if !ok || class == "" || url == "" {
			return nil, ucli.Exit(fmt.Sprintf("--http %q: want CLASS=URL", spec), 2)
		}
		m[class] = &httpHandler{URL: url}
	}
	return m, nil
}

// orderedCommand is gojob ordered work|status|morgue|requeue|delete.
func orderedCommand(o *options) *ucli.Command {
	flags := func(extra ...ucli.Flag) []ucli.Flag {
		return append([]ucli.Flag{newRedisFlag(), newJSONFlag()}, extra...)
	}
	return &ucli.Command{
		Name:  "ordered",
		Usage: "work and inspect ordered queues (jobs pushed with gojob push --key): lag, morgue, shard owners",
		Subcommands: []*ucli.Command{
			orderedWorkCommand(o),
			{Name: "status", Usage: "per queue: pending, in flight, morgue, lag and each shard's owner", ArgsUsage: "[QUEUE...]",
				Flags: flags(), Action: withAPI(orderedStatusAction)},
			{Name: "morgue", Usage: "keys whose oldest job exhausted its retries", ArgsUsage: "QUEUE",
				Flags:  flags(&ucli.IntFlag{Name: "limit", Value: 25, Usage: "entries to show"}, &ucli.IntFlag{Name: "offset", Usage: "entries to skip"}),
				Action: withAPI(orderedMorgueAction)},
			{Name: "requeue", Usage: "move buried jobs back to their keys' queues (retry_count -1, due now)", ArgsUsage: "[--all] QUEUE [KEY...]",
				Flags: flags(&ucli.BoolFlag{Name: "all", Usage: "every key of the morgue"}), Action: withAPI(orderedMorgueApply(orderedstore.MorgueRequeue))},
			{Name: "delete", Usage: "delete buried jobs", ArgsUsage: "[--all] QUEUE [KEY...]",
				Flags: flags(&ucli.BoolFlag{Name: "all", Usage: "every key of the morgue"}), Action: withAPI(orderedMorgueApply(orderedstore.MorgueDelete))},
		},
	}
}

func orderedStatusAction(ctx context.Context, e *adminEnv) error {
	queues := e.c.Args().Slice()
	if len(queues) == 0 {
		var err error
		if queues, err = orderedstore.Queues(ctx, e.pool); err != nil {
			return err
		}
	}
	var all []*orderedstore.QueueStatus
	for _, q := range queues {
		st, err := orderedstore.Status(ctx, e.pool, q, time.Now())
		if err != nil {
			if errors.Is(err, orderedstore.ErrNoQueue) || errors.Is(err, orderedstore.ErrBadQueueName) {
				return ucli.Exit(fmt.Sprintf("ordered status: no ordered queue %q", q), 2)
			}
			return err
		}
		all = append(all, st)
	}
	if e.json {
		return e.printJSON(all)
	}
	if len(all) == 0 {
		fmt.Fprintln(e.out, "no ordered queues")
		return nil
	}
	for i, st := range all {
		if i > 0 {
			fmt.Fprintln(e.out)
		}
		fmt.Fprintf(e.out, "%s: %d shards, %d pending, %d in flight, morgue %d (%d keys), lag %s, processed %d, failed batches %d, %d processes\n",
			st.Queue, st.Shards, st.Pending, st.Processing, st.Morgue, st.MorgueKeys, st.Lag.Round(time.Millisecond),
			st.Processed, st.Failed, len(st.Members))
		tw := tabwriter.NewWriter(e.out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "shard\towner\ttoken\tlease\tkeys\tbusy\tlag")
		for _, ss := range st.ShardSet {
			owner := ss.Owner
			if owner == "" {
				owner = "-"
			}
			fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%d\t%v\t%s\n", ss.Shard, owner, ss.Token, ss.LeaseTTL.Round(time.Millisecond),
				ss.Keys, ss.Busy, ss.Lag.Round(time.Millisecond))
		}
		tw.Flush()
	}
	return nil
}

func orderedMorgueAction(ctx context.Context, e *adminEnv) error {
	q := e.c.Args().First()
	if q == "" {
		return ucli.Exit("ordered morgue: QUEUE is required", 2)
	}
	entries, err := orderedstore.Morgue(ctx, e.pool, q, &orderedstore.MorgueParams{Offset: e.c.Int("offset"), Limit: e.c.Int("limit")})
	if err != nil {
		return err
	}
	if e.json {
		return e.printJSON(entries)
	}
	tw := tabwriter.NewWriter(e.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "key\tjobs\tburied\terror")
	for _, m := range entries {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", m.Key, m.Payloads, textTime(m.At), m.Error)
	}
	return tw.Flush()
}

func orderedMorgueApply(action orderedstore.MorgueAction) func(ctx context.Context, e *adminEnv) error {
	return func(ctx context.Context, e *adminEnv) error {
		args := e.c.Args().Slice()
		if len(args) == 0 || (len(args) == 1) != e.c.Bool("all") {
			return ucli.Exit(fmt.Sprintf("ordered %s: want QUEUE KEY... or --all QUEUE", action), 2)
		}
		n, err := orderedstore.MorgueApply(ctx, e.pool, args[0], action, args[1:], time.Now())
		if err != nil {
			if errors.Is(err, orderedstore.ErrNoQueue) {
				return ucli.Exit(fmt.Sprintf("ordered %s: no ordered queue %q", action, args[0]), 2)
			}
			return err
		}
		if e.json {
			return e.printJSON(map[string]any{"queue": args[0], "action": action, "jobs": n})
		}
		verb := "requeued"
		if action == orderedstore.MorgueDelete {
			verb = "deleted"
		}
		fmt.Fprintf(e.out, "%s %d jobs of ordered queue %s\n", verb, n, args[0])
		return nil
	}
}
