// Command embedded runs a gojob server inside a Go program, without the
// cli package: typed handlers, durable jobs (a SQL row per job and the
// reconciler), batches with a success callback, a periodic job, job
// control, and OpenTelemetry traces when the OTEL_* variables ask for
// them. Each feature is one Extend or Serve:
//
//	REDIS_URL=redis://127.0.0.1:6379/0 go run ./examples/embedded -db sqlite:embedded.db
//
// With -demo it pushes a durable job and a batch of three jobs, waits for
// the batch's callback and for the durable job's row to be gone, and
// exits.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/gojob/gojob/batch"
	"github.com/gojob/gojob/cron"
	"github.com/gojob/gojob/durable"
	"github.com/gojob/gojob/jobctl"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/api"
	"github.com/gojob/gojob/sidekiq/typed"
	"github.com/gojob/gojob/sidekiq/wire"
	"github.com/gojob/gojob/tracing"
)

// ChargeArgs are Ruby's ChargeCard#perform(account_id, cents).
type ChargeArgs struct {
	typed.Positional
	AccountID int64
	Cents     int
}

// ImportArgs are ImportPart#perform(file).
type ImportArgs struct {
	typed.Positional
	File string
}

func main() {
	db := flag.String("db", "sqlite:embedded.db", "durable jobs' database: sqlite:PATH or postgres://…")
	demo := flag.Bool("demo", false, "push a durable job and a batch, wait for them, exit")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	url := os.Getenv("REDIS_URL")
	if url == "" {
		url = "redis://127.0.0.1:6379/0"
	}
	if err := run(ctx, url, *db, *demo, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "embedded:", err)
		os.Exit(1)
	}
}

// run runs the server until ctx ends (or, with demo, until the demo's
// jobs are done).
func run(ctx context.Context, redisURL, dbURL string, demo bool, out io.Writer) error {
	log := zerolog.New(zerolog.ConsoleWriter{Out: out, NoColor: true}).With().Timestamp().Logger()
	pool, err := sidekiq.NewPool(redisURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	srv, err := sidekiq.NewServer(&sidekiq.ServerConfig{Pool: pool, Concurrency: 10, Logger: log,
		Queues: []wire.QueueWeight{{Name: "critical", Weight: 2}, {Name: "default", Weight: 1}}})
	if err != nil {
		return err
	}

	// Traces, when OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_TRACES_EXPORTER=otlp) is set.
	tr, flushSpans, err := tracing.FromEnv(ctx)
	if err != nil {
		return err
	}
	defer flushSpans(context.Background())
	if tr != nil {
		srv.Extend(tr) // first: the durable row records the traceparent
	}

	// Durable jobs: ChargeCard's rows, the outbox relay and the reconciler.
	d, err := durable.New(&durable.Config{URLs: []string{dbURL}, Classes: map[string]time.Duration{"ChargeCard": 0}})
	if err != nil {
		return err
	}
	defer func() {
		// After the server stopped: row writes an outage held back, once
		// more, then the databases close.
		if err := d.Close(); err != nil {
			log.Error().Err(err).Msg("durable rows left to settle by hand")
		}
	}()
	if _, err := d.Migrate(ctx); err != nil {
		return err
	}
	srv.Extend(d)
	relay, err := durable.NewRelay(&durable.RelayConfig{Durable: d, Client: srv.Client()})
	if err != nil {
		return err
	}
	admin, err := api.New(&api.Config{Pool: pool, Client: srv.Client()})
	if err != nil {
		return err
	}
	rec, err := durable.NewReconciler(&durable.ReconcilerConfig{Durable: d, API: admin})
	if err != nil {
		return err
	}
	poller, err := durable.NewPoller(&durable.PollerConfig{Reconciler: rec, Pool: pool, Identity: srv.Identity()})
	if err != nil {
		return err
	}
	srv.Serve(relay, poller)

	// Batches, and their watch of the dead set.
	batches, err := batch.New(&batch.Config{Client: srv.Client(), Logger: log})
	if err != nil {
		return err
	}
	srv.Extend(batches)
	srv.Serve(sidekiq.Loop(batches.Watch))

	// Cancel on request (gojob cancel, the dashboard, Ruby's cancel!).
	ctl, err := jobctl.New(&jobctl.Config{Pool: pool, Server: srv, Logger: log})
	if err != nil {
		return err
	}
	srv.Serve(ctl)

	// A periodic job on sidekiq-cron's keys, and the scheduler that pushes its ticks.
	schedule := &cron.Store{Client: srv.Client()}
	nightly, err := cron.NewJob("nightly-report", "0 3 * * *", "NightlyReport", "")
	if err != nil {
		return err
	}
	if err := schedule.Save(ctx, nightly); err != nil {
		return err
	}
	srv.Serve(sidekiq.Loop((&cron.Scheduler{Store: schedule, Logger: log}).Run))

	// The handlers.
	done := make(chan string, 8)
	srv.Handle("ChargeCard", typed.Handler(func(ctx context.Context, job *wire.Job, a ChargeArgs) error {
		fmt.Fprintf(out, "charged account %d %d cents\n", a.AccountID, a.Cents)
		done <- "ChargeCard"
		return nil
	}), nil)
	srv.Handle("ImportPart", typed.Handler(func(ctx context.Context, job *wire.Job, a ImportArgs) error {
		fmt.Fprintf(out, "imported %s\n", a.File)
		return nil
	}), nil)
	srv.Handle("ImportDone", sidekiq.HandlerFunc(func(ctx context.Context, job *wire.Job) error {
		fmt.Fprintln(out, "import done")
		done <- "ImportDone"
		return nil
	}), nil)
	srv.Handle("NightlyReport", sidekiq.HandlerFunc(func(ctx context.Context, job *wire.Job) error { return nil }), nil)

	if !demo {
		return srv.Run(ctx)
	}
	if err := srv.Start(ctx); err != nil {
		return err
	}
	defer srv.Stop(context.Background())
	return runDemo(ctx, srv.Client(), batches, done)
}

// runDemo pushes a durable job and a batch, and waits for both.
func runDemo(ctx context.Context, client *sidekiq.Client, batches *batch.Batches, done <-chan string) error {
	charge, err := typed.NewJob("ChargeCard", ChargeArgs{AccountID: 42, Cents: 1999})
	if err != nil {
		return err
	}
	charge.SetQueue("critical")
	if _, err := client.Push(ctx, charge, nil); err != nil {
		return err
	}
	st, err := batches.Create(ctx, &batch.CreateParams{Description: "import", OnSuccess: "ImportDone"})
	if err != nil {
		return err
	}
	for _, file := range []string{"a.csv", "b.csv", "c.csv"} {
		job, err := typed.NewJob("ImportPart", ImportArgs{File: file})
		if err != nil {
			return err
		}
		if _, _, err := batches.Push(ctx, st.BID, job); err != nil {
			return err
		}
	}
	if err := batches.Seal(ctx, st.BID); err != nil {
		return err
	}
	seen := map[string]bool{}
	for !seen["ChargeCard"] || !seen["ImportDone"] {
		select {
		case <-ctx.Done():
			return errors.New("the demo's jobs did not finish")
		case class := <-done:
			seen[class] = true
		}
	}
	return nil
}
