// Command sidejob-pipeline is a small SideJob pipeline connected by
// channels, served by gojob:
//
//	numbers ──/pipeline/numbers──▶ Square ──/pipeline/squares──▶ Total ──/pipeline/total──▶
//
// A parent Pipeline job owns two children: "square" (inport in subscribed to
// /pipeline/numbers, outport out publishing to /pipeline/squares) and
// "total" (inport in subscribed to /pipeline/squares, outport total
// publishing the running sum to /pipeline/total). The program registers the
// workers in queue "pipeline", serves it with a gojob Sidekiq server,
// creates the jobs, publishes 1..n and waits for the sum of the squares.
//
// Try it against `gojob dev` (an embedded Redis on 127.0.0.1:6379):
//
//	gojob dev &
//	go run ./examples/sidejob-pipeline -n 5 -serve
//	gojob sidejob tree
//	gojob sidejob log --follow
//	gojob sidejob publish /pipeline/numbers 10
//
// It uses $REDIS_URL when set (gojob dev prints the export line when it
// does not listen on 6379), or any Redis with -r URL. The jobs and their data stay in Redis, shared
// with Ruby processes that run the sidejob gem.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"

	"github.com/gojob/gojob/sidejob"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// Queue is the queue the pipeline's workers are served from.
const Queue = "pipeline"

// logger receives the server's logs (-v).
var logger = zerolog.Nop()

func main() {
	defaultURL := "redis://127.0.0.1:6379/0"
	if env := os.Getenv("REDIS_URL"); env != "" {
		defaultURL = env // as every gojob command
	}
	url := flag.String("r", defaultURL, "Redis URL (default $REDIS_URL, else redis://127.0.0.1:6379/0)")
	n := flag.Int("n", 5, "publish the numbers 1..n")
	serve := flag.Bool("serve", false, "keep serving the workers after the result (Ctrl-C to stop)")
	verbose := flag.Bool("v", false, "log the server's activity to stderr")
	flag.Parse()
	if *verbose {
		logger = zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr}).With().Timestamp().Logger()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *url, *n, *serve, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "sidejob-pipeline:", err)
		os.Exit(1)
	}
}

// square writes x*x to out for every value on in.
type square struct{}

// Perform squares every waiting input.
func (square) Perform(ctx context.Context, j *sidejob.Job, _ []rubyjson.Value) error {
	in, err := j.Input(ctx, "in")
	if err != nil {
		return err
	}
	out, err := j.Output(ctx, "out")
	if err != nil {
		return err
	}
	return in.Each(ctx, func(d *sidejob.Data) error {
		x, _ := d.Value.Int()
		return out.Write(ctx, x*x)
	})
}

// total adds every value on in to its state and writes the running total.
type total struct{}

// Perform adds the waiting inputs to the running sum.
func (total) Perform(ctx context.Context, j *sidejob.Job, _ []rubyjson.Value) error {
	in, err := j.Input(ctx, "in")
	if err != nil {
		return err
	}
	out, err := j.Output(ctx, "total")
	if err != nil {
		return err
	}
	state, err := j.State(ctx)
	if err != nil {
		return err
	}
	v, _ := state.Get("sum")
	sum, _ := v.Int()
	seen := false
	if err := in.Each(ctx, func(d *sidejob.Data) error {
		x, _ := d.Value.Int()
		sum += x
		seen = true
		return nil
	}); err != nil || !seen {
		return err
	}
	if err := j.Set(ctx, "sum", sum); err != nil {
		return err
	}
	return out.Write(ctx, sum)
}

// pipeline is the parent: it runs whenever a child writes an output and
// records the latest total in its state; it stays suspended, waiting.
type pipeline struct{}

// Perform records the latest total and suspends.
func (pipeline) Perform(ctx context.Context, j *sidejob.Job, _ []rubyjson.Value) error {
	children, err := j.Children(ctx)
	child := children["total"]
	if err != nil || child == nil {
		return err
	}
	out, err := child.Output(ctx, "total")
	if err != nil {
		return err
	}
	var last *sidejob.Data
	if err := out.Each(ctx, func(d *sidejob.Data) error { last = d; return nil }); err != nil {
		return err
	}
	if last != nil {
		if err := j.Set(ctx, "total", last.Value); err != nil {
			return err
		}
	}
	return sidejob.Suspend()
}

// Registry returns the pipeline's workers.
func Registry() (*sidejob.Registry, error) {
	reg := &sidejob.Registry{}
	for _, w := range []struct {
		class  string
		worker sidejob.Worker
		config string
	}{
		{"Pipeline", pipeline{}, `{"description":"owns the square and total jobs"}`},
		{"Square", square{}, `{"description":"squares numbers","inports":{"in":{}},"outports":{"out":{}}}`},
		{"Total", total{}, `{"description":"running sum","inports":{"in":{}},"outports":{"total":{}}}`},
	} {
		if err := reg.Register(w.class, w.worker, w.config); err != nil {
			return nil, err
		}
	}
	return reg, nil
}

func run(ctx context.Context, url string, n int, serve bool, out io.Writer) error {
	pool, err := sidekiq.NewPool(url)
	if err != nil {
		return err
	}
	defer pool.Close()
	reg, err := Registry()
	if err != nil {
		return err
	}
	srv, err := sidekiq.NewServer(&sidekiq.ServerConfig{
		Pool: pool, Queues: []wire.QueueWeight{{Name: Queue}}, Concurrency: 4,
		PollIntervalAverage: time.Second, Tag: "sidejob-pipeline", Logger: logger,
	})
	if err != nil {
		return err
	}
	reg.ReapInterval, reg.Logger = time.Minute, logger
	if err := sidejob.ServerSetup(Queue, reg)(srv); err != nil {
		return err
	}
	c, err := sidejob.NewClient(&sidejob.Config{Pool: pool, Sidekiq: srv.Client()})
	if err != nil {
		return err
	}
	// Listen for totals before anything is published.
	totals, closeSub, err := subscribe(ctx, url, "/pipeline/total")
	if err != nil {
		return err
	}
	defer closeSub()
	if err := srv.Start(ctx); err != nil {
		return err
	}
	defer srv.Stop(context.Background())

	parent, err := c.Queue(ctx, Queue, "Pipeline", &sidejob.QueueOpts{By: "sidejob-pipeline"})
	if err != nil {
		return err
	}
	if _, err := parent.Queue(ctx, Queue, "Square", &sidejob.QueueOpts{Name: "square",
		Inports:  `{"in":{"channels":["/pipeline/numbers"]}}`,
		Outports: `{"out":{"channels":["/pipeline/squares"]}}`,
	}); err != nil {
		return err
	}
	if _, err := parent.Queue(ctx, Queue, "Total", &sidejob.QueueOpts{Name: "total",
		Inports:  `{"in":{"channels":["/pipeline/squares"]}}`,
		Outports: `{"total":{"channels":["/pipeline/total"]}}`,
	}); err != nil {
		return err
	}
	fmt.Fprintf(out, "pipeline job %d created; watch it with:\n  gojob sidejob tree -r %s\n  gojob sidejob log --follow -r %s\n", parent.ID(), url, url)
	want := int64(0)
	for i := 1; i <= n; i++ {
		want += int64(i * i)
		if err := c.Publish(ctx, "/pipeline/numbers", i); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "published 1..%d to /pipeline/numbers, waiting for %d on /pipeline/total\n", n, want)
	for got := int64(-1); got != want; {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case s, ok := <-totals:
			if !ok {
				return errors.New("subscription closed")
			}
			got, _ = strconv.ParseInt(s, 10, 64)
			fmt.Fprintf(out, "total: %d\n", got)
		}
	}
	fmt.Fprintf(out, "sum of squares of 1..%d = %d\n", n, want)
	if serve {
		fmt.Fprintln(out, "serving queue pipeline; publish more with: gojob sidejob publish /pipeline/numbers 7")
		for {
			select {
			case <-ctx.Done():
				return nil
			case s := <-totals:
				fmt.Fprintf(out, "total: %s\n", s)
			}
		}
	}
	return nil
}

// subscribe returns the messages of a Redis channel, read on a connection
// of its own (a subscribed connection cannot go back to a pool).
func subscribe(ctx context.Context, url, channel string) (<-chan string, func(), error) {
	pool, err := sidekiq.NewPool(url)
	if err != nil {
		return nil, nil, err
	}
	conn, err := pool.DialContext(ctx)
	if err != nil {
		return nil, nil, err
	}
	psc := redis.PubSubConn{Conn: conn}
	if err := psc.Subscribe(channel); err != nil {
		conn.Close()
		return nil, nil, err
	}
	if _, ok := psc.Receive().(redis.Subscription); !ok {
		conn.Close()
		return nil, nil, errors.New("subscribe failed")
	}
	ch := make(chan string, 64)
	go func() {
		defer close(ch)
		for {
			switch v := psc.Receive().(type) {
			case redis.Message:
				ch <- string(v.Data)
			case error:
				return
			}
		}
	}()
	return ch, func() { conn.Close() }, nil
}
