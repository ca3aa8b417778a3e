package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	ucli "github.com/urfave/cli/v2"

	"github.com/gojob/gojob/batch"
	"github.com/gojob/gojob/expiry"
	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/fetchmode"
	"github.com/gojob/gojob/internal/tuning"
	"github.com/gojob/gojob/jobctl"
	"github.com/gojob/gojob/sidekiq"
)

// serverConfigFromFlags reads the flags shared by work and dev.
func serverConfigFromFlags(c *ucli.Context, log zerolog.Logger) (*sidekiq.ServerConfig, error) {
	cfg := &sidekiq.ServerConfig{
		Concurrency:         c.Int("concurrency"),
		ShutdownTimeout:     time.Duration(c.Int("timeout")) * time.Second,
		Tag:                 c.String("tag"),
		Labels:              c.StringSlice("label"),
		JobTimeout:          c.Duration("job-timeout"),
		CancelGrace:         c.Duration("cancel-grace"),
		MaxRetries:          c.Int("max-retries"),
		FetchPipeline:       c.Int("fetch-pipeline"),
		RecoveryLimit:       c.Int("max-recoveries"),
		Logger:              log,
		PollIntervalAverage: c.Duration("poll-interval"),
	}
	if cfg.PollIntervalAverage < 0 {
		return nil, ucli.Exit("--poll-interval must not be negative", exitUsage)
	}
	if c.IsSet("fetch") || c.String("fetch") != "" {
		mode, err := fetchmode.Parse(c.String("fetch"))
		if err != nil {
			return nil, ucli.Exit(err.Error(), exitUsage)
		}
		cfg.Fetch = mode
	}
	if cfg.Concurrency <= 0 {
		return nil, ucli.Exit("--concurrency must be at least 1", exitUsage)
	}
	if cfg.JobTimeout < 0 || cfg.CancelGrace < 0 {
		return nil, ucli.Exit("--job-timeout and --cancel-grace must not be negative", 2)
	}
	if c.IsSet("max-recoveries") && cfg.RecoveryLimit <= 0 {
		return nil, ucli.Exit("--max-recoveries must be at least 1", exitUsage)
	}
	if c.IsSet("fetch-pipeline") && cfg.FetchPipeline <= 0 {
		return nil, ucli.Exit("--fetch-pipeline must be at least 1", exitUsage)
	}
	switch n := c.Int("fetch-ahead"); {
	case n < 0:
		return nil, ucli.Exit("--fetch-ahead must not be negative", exitUsage)
	case n == 0:
		cfg.FetchAhead = -1
	default:
		cfg.FetchAhead = n
	}
	for _, q := range c.StringSlice("queue") {
		qw, err := contract.ParseQueueWeight(q)
		if err != nil {
			return nil, ucli.Exit(err.Error(), exitUsage)
		}
		cfg.Queues = append(cfg.Queues, qw)
	}
	for _, spec := range c.StringSlice("queue-concurrency") {
		q, n, ok := strings.Cut(spec, "=")
		max, err := strconv.Atoi(n)
		if !ok || q == "" || err != nil {
			return nil, ucli.Exit(fmt.Sprintf("--queue-concurrency %q: want QUEUE=N", spec), exitUsage)
		}
		if cfg.QueueConcurrency == nil {
			cfg.QueueConcurrency = map[string]int{}
		}
		if _, dup := cfg.QueueConcurrency[q]; dup {
			return nil, ucli.Exit(fmt.Sprintf("--queue-concurrency: queue %s given twice", q), exitUsage)
		}
		cfg.QueueConcurrency[q] = max
	}
	return cfg, nil
}

// buildServer creates the server and registers Go, --exec and --http
// handlers. With --http handlers it starts their heartbeat endpoint, which
// the returned func stops.
func buildServer(c *ucli.Context, cfg *sidekiq.ServerConfig, o *options, log zerolog.Logger) (*sidekiq.Server, *expiry.Extension, func(), error) {
	noop := func() {}
	srv, err := sidekiq.NewServer(cfg)
	if err != nil {
		return nil, nil, noop, ucli.Exit(err.Error(), exitUsage)
	}
	batches, err := batch.New(&batch.Config{Client: srv.Client(), Logger: log})
	if err != nil {
		return nil, nil, noop, err
	}
	srv.Extend(batches)
	// Jobs a Sidekiq Pro client gave expires_in are dropped once expired,
	// as Pro's servers do (expiry); after batches, so that the batch
	// counts an expired job as a success.
	expired := expiry.New(expiry.Config{Logger: log, Clock: cfg.Clock})
	srv.Extend(expired)
	for _, h := range o.handlers {
		srv.Handle(h.class, h.h, h.opts)
	}
	for _, spec := range c.StringSlice("exec") {
		class, command, ok := strings.Cut(spec, "=")
		if !ok || class == "" || command == "" {
			return nil, nil, noop, ucli.Exit(fmt.Sprintf("--exec %q: want CLASS=COMMAND", spec), exitUsage)
		}
		srv.Handle(class, &execHandler{Command: command, Log: log, Pool: cfg.Pool, Grace: cfg.CancelGrace}, nil)
	}
	type httpSpec struct{ class, url string }
	var https []httpSpec
	for _, spec := range c.StringSlice("http") {
		class, url, ok := strings.Cut(spec, "=")
		if !ok || class == "" || url == "" {
			return nil, nil, noop, ucli.Exit(fmt.Sprintf("--http %q: want CLASS=URL", spec), exitUsage)
		}
		https = append(https, httpSpec{class, url})
	}
	if err := serveJobControl(srv, cfg, log); err != nil {
		return nil, nil, noop, err
	}
	// Batch jobs that reached the dead set unseen (batch/watch.go).
	srv.Serve(sidekiq.Loop(batches.Watch))
	stop := noop
	if len(https) > 0 {
		hb, err := newHeartbeatEndpoint(c.String("heartbeat-listen"), c.String("heartbeat-url"), log)
		if err != nil {
			stop()
			return nil, nil, noop, ucli.Exit("--heartbeat-listen: "+err.Error(), exitUsage)
		}
		stopRest := stop
		stop = func() { hb.Close(); stopRest() }
		for _, h := range https {
			srv.Handle(h.class, &httpHandler{URL: h.url, Heartbeats: hb, Pool: cfg.Pool}, nil)
		}
	}
	for _, f := range o.setup {
		if err := f(srv); err != nil {
			stop()
			return nil, nil, noop, err
		}
	}
	return srv, expired, stop, nil
}

// heartbeatWorkFlags are the per-job timeout flags of work and dev
// (docs/heartbeats.md).
func heartbeatWorkFlags() []ucli.Flag {
	return []ucli.Flag{
		&ucli.DurationFlag{Name: "job-timeout", Usage: "default total timeout of jobs whose payload has no timeout key: a job running longer is cancelled and retried as Gojob::Timeout (0 = none)"},
		&ucli.DurationFlag{Name: "cancel-grace", Value: tuning.CancelGrace, Usage: "how long a handler cancelled for a missed timeout or heartbeat has to return before its slot is freed and it is left running"},
		&ucli.StringFlag{Name: "heartbeat-listen", Value: "127.0.0.1:0", Usage: "`HOST:PORT` where --http handlers send heartbeats (a POST to the URL in X-Gojob-Heartbeat-Url); port 0 picks a free one"},
		&ucli.StringFlag{Name: "heartbeat-url", Usage: "base `URL` of --heartbeat-listen as the --http handlers reach it (default http://HOST:PORT)"},
	}
}

// runServer runs srv until ctx ends, a TERM/INT arrives (OS or Redis), and
// routes OS signals as Sidekiq does.
func runServer(ctx context.Context, srv *sidekiq.Server, log zerolog.Logger) error {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGTSTP, syscall.SIGTTIN)
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case sig := <-sigs:
				switch sig {
				case syscall.SIGTSTP:
					srv.Signal("TSTP")
				case syscall.SIGTTIN:
					srv.Signal("TTIN")
				case syscall.SIGTERM:
					srv.Signal("TERM")
				case syscall.SIGINT:
					srv.Signal("INT")
				}
			}
		}
	}()
	if err := srv.Run(ctx); err != nil {
		if errors.Is(err, contract.ErrVersionUnreadable) {
			return ucli.Exit(err.Error(), exitUsage)
		}
		log.Error().Err(err).Msg("shutdown finished with errors")
		return ucli.Exit("", exitFailed)
	}
	return nil
}

// serveJobControl makes the server's jobs cancellable on request
// (docs/job-control.md), for the server's life.
func serveJobControl(srv *sidekiq.Server, cfg *sidekiq.ServerConfig, log zerolog.Logger) error {
	ctl, err := jobctl.New(&jobctl.Config{Pool: cfg.Pool, Server: srv, Logger: log})
	if err != nil {
		return err
	}
	srv.Serve(ctl)
	return nil
}
