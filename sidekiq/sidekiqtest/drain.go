package sidekiqtest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/wire"
)

// Outcome is one job a drain ran.
type Outcome struct {
	// Job is the job as it ran.
	Job *wire.Job
	// Err is what its run returned (nil for a success): a failed job went
	// to the retry or dead set as in production.
	Err error
}

// drainTimeout is how long DrainQueues waits for the queues to empty.
const drainTimeout = time.Minute

// DrainQueues runs a real sidekiq.Server with cfg (cfg.Pool and cfg.Queues
// required: a Redis and queues the test owns) until cfg.Queues are empty
// and no job runs, then stops it and returns what ran; setup registers
// the handlers (and middleware, extensions) on the server before it
// starts. What ran is returned in the order the jobs finished. Jobs the
// drained jobs push to these queues are drained too; scheduled jobs and
// retries are not waited for. It fails the test after a minute.
func DrainQueues(t testing.TB, cfg sidekiq.ServerConfig, setup func(*sidekiq.Server)) []Outcome {
	t.Helper()
	if cfg.Pool == nil || len(cfg.Queues) == 0 {
		t.Fatal("sidekiqtest: DrainQueues needs cfg.Pool and cfg.Queues")
	}
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = drainTimeout
	}
	rec := &recorder{}
	deadline := time.Now().Add(drainTimeout)
	for {
		c := cfg
		c.Extensions = append([]sidekiq.Extension{rec}, cfg.Extensions...)
		srv, err := sidekiq.NewServer(&c)
		if err != nil {
			t.Fatalf("sidekiqtest: %v", err)
		}
		if setup != nil {
			setup(srv)
		}
		ctx := context.Background()
		if err := srv.Start(ctx); err != nil {
			t.Fatalf("sidekiqtest: start: %v", err)
		}
		for !(rec.running.Load() == 0 && queuesEmpty(t, cfg.Pool, cfg.Queues)) {
			if time.Now().After(deadline) {
				srv.Stop(ctx)
				t.Fatalf("sidekiqtest: queues not drained after %s", drainTimeout)
			}
			time.Sleep(5 * time.Millisecond)
		}
		if err := srv.Stop(ctx); err != nil {
			t.Fatalf("sidekiqtest: stop: %v", err)
		}
		// A job fetched as the server went quiet went back to its queue:
		// drain again.
		if queuesEmpty(t, cfg.Pool, cfg.Queues) {
			break
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]Outcome(nil), rec.outcomes...)
}

func queuesEmpty(t testing.TB, pool *redis.Pool, queues []wire.QueueWeight) bool {
	t.Helper()
	conn := pool.Get()
	defer conn.Close()
	for _, q := range queues {
		n, err := redis.Int(conn.Do("LLEN", contract.QueueKey(q.Name)))
		if err != nil {
			t.Fatalf("sidekiqtest: %v", err)
		}
		if n > 0 {
			return false
		}
	}
	return true
}

// recorder is a RunHook that counts running jobs and records outcomes.
type recorder struct {
	running  atomic.Int64
	mu       sync.Mutex
	outcomes []Outcome
}

func (r *recorder) Run(ctx context.Context, run *sidekiq.Run, next func(context.Context) error) error {
	r.running.Add(1)
	defer r.running.Add(-1)
	err := next(ctx)
	r.mu.Lock()
	r.outcomes = append(r.outcomes, Outcome{Job: run.Job.Clone(), Err: err})
	r.mu.Unlock()
	return err
}
