package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"
	ucli "github.com/urfave/cli/v2"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/orderedstore"
	"github.com/gojob/gojob/ordered"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/wire"
)

// lowkiqMSPerJob is Lowkiq's published figure: 100,000 blank jobs on 5
// threads in 155 s (its README, "Sidekiq comparison").
const lowkiqMSPerJob = 1.55

// OrderedResult is what `gojob bench --ordered --json` prints.
type OrderedResult struct {
	Jobs        int     `json:"jobs"`
	Keys        int     `json:"keys"`
	Shards      int     `json:"shards"`
	Concurrency int     `json:"concurrency"`
	PushPerSec  float64 `json:"push_jobs_per_sec"`
	Seconds     float64 `json:"seconds"`
	JobsPerSec  float64 `json:"jobs_per_sec"`
	MSPerJob    float64 `json:"ms_per_job"`
	BatchKeys   int     `json:"batch_keys"`
	Batches     int64   `json:"batches"`
	// Ordering: every key's jobs ran exactly once, in push order, never two
	// at once.
	OrderVerified bool `json:"order_verified"`

	PlainJobsPerSec float64 `json:"plain_jobs_per_sec"`
	RatioVsPlain    float64 `json:"ratio_vs_plain"`
	TimesLowkiq     float64 `json:"times_faster_than_lowkiq"`
}

func orderedBenchFlags() []ucli.Flag {
	return []ucli.Flag{
		&ucli.BoolFlag{Name: "ordered", Usage: "bench an ordered queue (gojob ordered work): --jobs over --keys keys, ordering verified, against a plain run in the same invocation"},
		&ucli.IntFlag{Name: "keys", Value: 1000, Usage: "--ordered: ordering keys"},
		&ucli.IntFlag{Name: "shards", Usage: "--ordered: shards (default: --concurrency)"},
		&ucli.IntFlag{Name: "batch-keys", Value: 1, Usage: "--ordered: due keys of one shard taken per fetch (Lowkiq's batch_size)"},
	}
}

// runOrderedBenchCommand is gojob bench --ordered: the plain bench (same
// jobs, concurrency and fetch mode), then the ordered one, and the ratio.
func runOrderedBenchCommand(c *ucli.Context, pool *redis.Pool, mode string) error {
	n, conc, keys := c.Int("jobs"), c.Int("concurrency"), c.Int("keys")
	shards := c.Int("shards")
	if shards == 0 {
		shards = conc
	}
	if keys <= 0 || shards <= 0 || c.Int("batch-keys") <= 0 {
		return ucli.Exit("--keys, --shards and --batch-keys must be positive", exitUsage)
	}
	plain, err := runBench(c.Context, pool, benchSpec{jobs: n, conc: conc, mode: mode, pipeline: c.Int("fetch-pipeline")})
	if err != nil {
		return err
	}
	res, err := runOrderedBench(c.Context, pool, n, keys, shards, conc, c.Int("batch-keys"))
	if err != nil {
		return err
	}
	res.PlainJobsPerSec = plain.JobsPerSec
	res.RatioVsPlain = res.JobsPerSec / plain.JobsPerSec
	if c.Bool("json") {
		enc := json.NewEncoder(c.App.Writer)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	printOrderedBench(c.App.Writer, res, mode)
	return nil
}

func runOrderedBench(ctx context.Context, pool *redis.Pool, n, keys, shards, conc, batchKeys int) (*OrderedResult, error) {
	queue := "gojob-bench-ordered-" + contract.NewJID()[:8]
	defer cleanupOrderedBench(pool, queue)
	res := &OrderedResult{Jobs: n, Keys: keys, Shards: shards, Concurrency: conc, BatchKeys: batchKeys}
	client, err := ordered.NewClient(&ordered.ClientConfig{Pool: pool, Shards: shards})
	if err != nil {
		return nil, err
	}
	pushStart := time.Now()
	const chunk = 1000
	for i := 0; i < n; i += chunk {
		items := make([]ordered.PushItem, 0, chunk)
		for j := i; j < min(i+chunk, n); j++ {
			key := "key-" + strconv.Itoa(j%keys)
			job, err := wire.NewJob("BenchJob", key, j/keys)
			if err != nil {
				return nil, err
			}
			job.SetQueue(queue)
			items = append(items, ordered.PushItem{Job: job, Opts: ordered.PushOpts{Key: key}})
		}
		if _, err := client.PushBulk(ctx, items); err != nil {
			return nil, err
		}
	}
	res.PushPerSec = float64(n) / time.Since(pushStart).Seconds()

	next := make([]atomic.Int64, keys)
	busy := make([]atomic.Bool, keys)
	var done, disorder, overlap, batches atomic.Int64
	var firstErr atomic.Value
	finished := make(chan struct{})
	perJob := sidekiq.HandlerFunc(func(ctx context.Context, job *wire.Job) error {
		args := job.Args()
		ks, _ := args[0].Str()
		idx, _ := args[1].Int()
		k, _ := strconv.Atoi(strings.TrimPrefix(ks, "key-"))
		if !busy[k].CompareAndSwap(false, true) {
			overlap.Add(1)
		}
		if next[k].Load() != idx {
			if disorder.Add(1) == 1 {
				firstErr.Store(fmt.Sprintf("key %s: job %d ran, %d expected", ks, idx, next[k].Load()))
			}
		}
		next[k].Store(idx + 1)
		busy[k].Store(false)
		if done.Add(1) == int64(n) {
			close(finished)
		}
		return nil
	})
	w, err := ordered.NewWorker(&ordered.Config{
		Pool: pool, Queue: queue, Shards: shards, Concurrency: conc, BatchKeys: batchKeys, Logger: zerolog.Nop(),
		PollInterval: 5 * time.Millisecond, ShutdownTimeout: 5 * time.Second,
		Handler: ordered.HandlerFunc(func(ctx context.Context, b *ordered.Batch) error {
			batches.Add(1)
			for i, job := range b.Jobs {
				if err := perJob.Perform(ctx, job); err != nil {
					return &ordered.PartialError{Done: i, Err: err}
				}
			}
			return nil
		}),
	})
	if err != nil {
		return nil, err
	}
	start := time.Now()
	if err := w.Start(ctx); err != nil {
		return nil, err
	}
	select {
	case <-finished:
	case <-ctx.Done():
		w.Stop(context.Background())
		return nil, ctx.Err()
	case <-time.After(10 * time.Minute):
		w.Stop(context.Background())
		return nil, fmt.Errorf("ordered bench: %d of %d jobs ran in 10 minutes", done.Load(), n)
	}
	elapsed := time.Since(start)
	if err := w.Stop(context.Background()); err != nil {
		return nil, err
	}
	res.Seconds = elapsed.Seconds()
	res.JobsPerSec = float64(n) / res.Seconds
	res.MSPerJob = res.Seconds * 1000 / float64(n)
	res.TimesLowkiq = lowkiqMSPerJob / res.MSPerJob
	res.Batches = batches.Load()
	if d, o := disorder.Load(), overlap.Load(); d > 0 || o > 0 {
		msg, _ := firstErr.Load().(string)
		return res, fmt.Errorf("ordered bench: ORDER VIOLATED: %d jobs out of order, %d overlaps (%s)", d, o, msg)
	}
	for k := range next {
		if want := int64(n/keys + btoi(k < n%keys)); next[k].Load() != want {
			return res, fmt.Errorf("ordered bench: key-%d ran %d jobs, %d pushed", k, next[k].Load(), want)
		}
	}
	res.OrderVerified = true
	return res, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// cleanupOrderedBench deletes the bench queue's keys.
func cleanupOrderedBench(pool *redis.Pool, queue string) {
	conn := pool.Get()
	defer conn.Close()
	cursor := "0"
	for {
		vals, err := redis.Values(conn.Do("SCAN", cursor, "MATCH", "gojob:ordered:{"+queue+"}:*", "COUNT", 1000))
		if err != nil || len(vals) != 2 {
			return
		}
		cursor, _ = redis.String(vals[0], nil)
		keys, _ := redis.Strings(vals[1], nil)
		for _, k := range keys {
			conn.Send("DEL", k)
		}
		conn.Flush()
		for range keys {
			conn.Receive()
		}
		if cursor == "0" {
			break
		}
	}
	conn.Do("SREM", orderedstore.KeyQueues, queue)
}

func printOrderedBench(w io.Writer, r *OrderedResult, fetch string) {
	fmt.Fprintf(w, "jobs:            %d over %d keys, %d shards, concurrency %d\n", r.Jobs, r.Keys, r.Shards, r.Concurrency)
	fmt.Fprintf(w, "push:            %.0f jobs/s (1000 per round trip)\n", r.PushPerSec)
	fmt.Fprintf(w, "ordered:         %.0f jobs/s (%.2f s, %.4f ms/job, %d key batches, up to %d keys per fetch)\n", r.JobsPerSec, r.Seconds, r.MSPerJob, r.Batches, r.BatchKeys)
	fmt.Fprintf(w, "ordering:        verified: every key's jobs ran once, in push order, never two at once\n")
	fmt.Fprintf(w, "plain gojob:     %.0f jobs/s (fetch %s, same run) → ordered reaches %.0f%% of it\n", r.PlainJobsPerSec, fetch, r.RatioVsPlain*100)
	fmt.Fprintf(w, "lowkiq:          %.2f ms/job published → ordered is %.0fx faster\n", lowkiqMSPerJob, r.TimesLowkiq)
}
