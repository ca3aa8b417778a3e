package sidekiq

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq/internal/redisx"
)

// running reports whether the server has started and not stopped.
func (s *Server) running() bool { return s.life.state.Load() == stateRunning }

// redisDown reports whether the server is in a Redis outage: its last
// command failed and none has succeeded since, or its fetch fails (a fetch
// that fails while other connections succeed takes no job all the same).
func (s *Server) redisDown() bool {
	since, _ := s.fetch.health.Failing()
	return s.redis.outage.Down() || !since.IsZero()
}

// stuckAfter is how long slots may stay free while jobs wait in the
// server's queues before Ready says so.
const stuckAfter = 5 * time.Second

// Ready reports why the server cannot take and finish jobs now, or nil:
// it is not running or quiet; its fetch fails (Status.RedisDown: the last round
// trip failed, and none has succeeded since); or slots are free and jobs
// wait in its unpaused queues, yet no job has started for stuckAfter. It
// is ready again after a successful fetch round trip.
func (s *Server) Ready(ctx context.Context) error { return s.readyAt(ctx, s.proc.started()) }

// readyAt is Ready with the count of jobs started so far.
func (s *Server) readyAt(ctx context.Context, started int64) error {
	if !s.running() {
		return errors.New("not running")
	}
	if !s.fetch.running.Load() {
		return errors.New("starting")
	}
	if s.isQuiet() {
		return errors.New("quiet: takes no new jobs")
	}
	if since, err := s.fetch.health.Failing(); !since.IsZero() {
		return fmt.Errorf("fetching from redis has failed for %s: %v", redisx.LogDuration(time.Since(since)), err)
	}
	if s.redis.outage.Down() {
		return errors.New("redis unavailable")
	}
	idle := s.fetch.progress.idle(started)
	if idle < stuckAfter || s.proc.busy() >= s.cfg.Concurrency {
		return nil
	}
	waiting, queue, err := s.waitingJobs(ctx)
	if err != nil {
		return fmt.Errorf("redis unavailable: %v", err)
	}
	if waiting > 0 {
		return fmt.Errorf("%d jobs wait in queue %s with slots free, but no job has started for %s", waiting, queue,
			redisx.LogDuration(idle))
	}
	return nil
}

// waitingJobs returns the jobs waiting in the server's unpaused queues and
// the fullest of them.
func (s *Server) waitingJobs(ctx context.Context) (int, string, error) {
	names := s.fetch.order.Names()
	conn, err := s.cfg.Pool.GetContext(ctx)
	if err != nil {
		return 0, "", err
	}
	defer conn.Close()
	var asked []string
	for _, q := range names {
		if !s.fetch.order.Paused(q) {
			conn.Send("LLEN", contract.QueueKey(q))
			asked = append(asked, q)
		}
	}
	if len(asked) == 0 {
		return 0, "", nil
	}
	lens, err := redis.Ints(redis.DoContext(conn, ctx, ""))
	if err != nil {
		return 0, "", err
	}
	total, most, fullest := 0, 0, ""
	for i, n := range lens {
		total += n
		if n > most {
			most, fullest = n, asked[i]
		}
	}
	return total, fullest, nil
}

// Status is a snapshot of a server: what health checks and metrics
// exporters read (package metrics).
type Status struct {
	// Running: started and not stopped. Quiet: takes no new jobs.
	Running, Quiet bool
	// RedisDown: in a Redis outage (the last command failed and none has
	// succeeded since), or the fetch fails.
	RedisDown bool
	// Busy is how many jobs run now, of Concurrency slots.
	Busy, Concurrency int
	// Recovered is how many jobs this process pushed back to their queue
	// from the in-progress lists of processes that are gone (reliable fetch).
	Recovered int64
	// PoisonPills is how many recovered jobs it moved to the dead set
	// instead, recovered too often.
	PoisonPills int64
	// RedisErrors is how many Redis commands failed; RedisOutages how many
	// outages began (a failure or a stall after a success).
	RedisErrors, RedisOutages int64
	// FetchPipeline is how many BRPOPs each fetch connection carries at
	// most, once started: ServerConfig.FetchPipeline capped by the
	// concurrency, 1 where Redis refuses CLIENT UNBLOCK, 0 with the batch fetch.
	FetchPipeline int
}

// Status returns the server's state and counters now.
func (s *Server) Status() Status {
	errs, outages := s.redis.outage.Counts()
	return Status{
		Running:       s.running(),
		Quiet:         s.isQuiet(),
		RedisDown:     s.redisDown(),
		Busy:          s.proc.busy(),
		Concurrency:   s.cfg.Concurrency,
		Recovered:     s.fetch.stats.Recovered.Load(),
		PoisonPills:   s.fetch.stats.PoisonPills.Load(),
		RedisErrors:   errs,
		RedisOutages:  outages,
		FetchPipeline: int(s.fetch.depth.Load()),
	}
}
