// Command riverbench drains N no-op River jobs at concurrency C on
// PostgreSQL and prints jobs/s, for the side-by-side figure of
// docs/benchmarks.md (scripts/benchmarks.sh runs it). It is a module of its
// own so that gojob does not depend on River. It creates a database of its
// own on the server of DATABASE_URL and drops it when done.
//
//	go run . -database-url postgres://… -n 50000 -c 25
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

type noopArgs struct{}

func (noopArgs) Kind() string { return "noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
	done *atomic.Int64
}

func (w *noopWorker) Work(context.Context, *river.Job[noopArgs]) error {
	w.done.Add(1)
	return nil
}

func main() {
	dbURL := flag.String("database-url", os.Getenv("DATABASE_URL"), "PostgreSQL server (a database of its own is created there)")
	n := flag.Int("n", 50000, "jobs")
	c := flag.Int("c", 25, "concurrency (River MaxWorkers)")
	flag.Parse()
	if err := run(*dbURL, *n, *c); err != nil {
		fmt.Fprintln(os.Stderr, "riverbench:", err)
		os.Exit(1)
	}
}

func run(dbURL string, n, c int) error {
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return err
	}
	defer admin.Close(ctx)
	name := fmt.Sprintf("riverbench_%d_%06d", os.Getpid(), rand.IntN(1_000_000))
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return err
	}
	defer admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	u, err := url.Parse(dbURL)
	if err != nil {
		return err
	}
	u.Path = "/" + name
	pool, err := pgxpool.New(ctx, u.String())
	if err != nil {
		return err
	}
	defer pool.Close()
	drv := riverpgxv5.New(pool)
	m, err := rivermigrate.New(drv, nil)
	if err != nil {
		return err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return err
	}
	var done atomic.Int64
	workers := river.NewWorkers()
	river.AddWorker(workers, &noopWorker{done: &done})
	// River's defaults fetch at most every 100 ms (FetchCooldown), which
	// caps a drain at MaxWorkers jobs per 100 ms; its lowest cooldown and
	// a short poll are its fastest settings for a backlog.
	client, err := river.NewClient(drv, &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: c}},
		Workers:           workers,
		FetchCooldown:     time.Millisecond,
		FetchPollInterval: 50 * time.Millisecond,
	})
	if err != nil {
		return err
	}
	params := make([]river.InsertManyParams, 0, 1000)
	for i := 0; i < n; i += 1000 {
		params = params[:0]
		for k := 0; k < 1000 && i+k < n; k++ {
			params = append(params, river.InsertManyParams{Args: noopArgs{}})
		}
		if _, err := client.InsertManyFast(ctx, params); err != nil {
			return err
		}
	}
	start := time.Now()
	if err := client.Start(ctx); err != nil {
		return err
	}
	for done.Load() < int64(n) {
		time.Sleep(time.Millisecond)
	}
	el := time.Since(start)
	fmt.Printf("river %d jobs at concurrency %d: %.0f jobs/s (%.2f s)\n", n, c, float64(n)/el.Seconds(), el.Seconds())
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return client.Stop(stopCtx)
}
