// Package iterable runs long jobs that walk a cursor, as Sidekiq's
// iterable jobs do (Sidekiq::IterableJob, 7.3+): the job's progress lives
// in Redis under it-<jid>, byte for byte as Sidekiq writes it, so that a
// job interrupted at a shutdown, or after its run time, resumes from its
// cursor on any process, Ruby's or gojob's; Sidekiq's cancel! (and gojob
// cancel) stops it; and Sidekiq 8.1's Busy page shows its cursor,
// executions and run time.
//
//	srv.Handle("Backfill", &iterable.Job[int]{
//		Each: func(ctx context.Context, job *wire.Job, cursor int) (int, bool, error) {
//			done, err := backfillPage(ctx, cursor)
//			return cursor + 1, done, err
//		},
//	}, nil)
//
// The state, it-<jid> (a hash, kept 30 days from its first write):
// "ex", the executions so far; "c", the cursor of the next item as JSON;
// "rt", the run time of the ended executions in seconds (Ruby's
// Float#to_s; "0" during the first); "cancelled", epoch seconds, set by a
// cancel. It is written every 5 s (as Sidekiq), when an
// item fails, and at an interruption; it is deleted when the job
// completes or is cancelled.
package iterable

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/rubyfloat"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/wire"
)

// flushInterval is how often a running job's state is written and its
// cancel looked for (Sidekiq's STATE_FLUSH_INTERVAL).
const flushInterval = 5 * time.Second

var (
	//go:embed lua/flush.lua
	flushLua    string
	flushScript = redis.NewScript(1, flushLua)
)

// Job is the handler of an iterable job class, with cursors of type C
// (JSON-encoded in the state: an int for an index, a string, a struct).
type Job[C any] struct {
	// Pool is the Redis pool of the state. Required.
	Pool *redis.Pool
	// Each runs the item at cursor (C's zero value for a job that starts)
	// and returns the cursor of the next item, or done when there is
	// none. An error fails the job as any error does (retry, dead), with
	// the state saved: the retry resumes at the failed item.
	Each func(ctx context.Context, job *wire.Job, cursor C) (next C, done bool, err error)
	// MaxRuntime interrupts an execution that ran this long (Sidekiq's
	// max_iteration_runtime): the job goes back to its queue and resumes
	// from its cursor. 0: only a stopping server interrupts it.
	MaxRuntime time.Duration
	// Clock is the time source (default the system clock).
	Clock func() time.Time
}

// state is it-<jid>.
type state[C any] struct {
	executions int
	cursor     C
	runtime    float64 // of the ended executions, seconds
}

// errNoPool is Perform's error for a Job without a Pool.
var errNoPool = errors.New("iterable: Job.Pool is required")

// Perform runs the job from its saved cursor (sidekiq.Handler).
func (j *Job[C]) Perform(ctx context.Context, job *wire.Job) error {
	if j.Pool == nil {
		return errNoPool
	}
	now := time.Now
	if j.Clock != nil {
		now = j.Clock
	}
	jid := job.JID()
	key := contract.IterationKey(jid)
	st, cancelled, err := j.load(ctx, key)
	if err != nil {
		return err
	}
	if cancelled {
		return j.end(ctx, key) // cancelled before it started: done
	}
	st.executions++
	start := now()
	lastFlush := start
	stopping := sidekiq.Stopping(ctx)
	for {
		if now().Sub(lastFlush) >= flushInterval {
			lastFlush = now()
			cancelled, err := j.flush(ctx, key, st, 0)
			if err != nil {
				return err
			}
			if cancelled {
				return j.end(ctx, key)
			}
		}
		interrupted := ctx.Err() != nil || (j.MaxRuntime > 0 && now().Sub(start) >= j.MaxRuntime)
		select {
		case <-stopping:
			interrupted = true
		default:
		}
		if interrupted {
			// The state first, with this execution's run time; a cancel
			// (Sidekiq's cancel!, gojob cancel, which also ends the job's
			// context) ends the job as done instead.
			cancelled, err := j.flush(context.WithoutCancel(ctx), key, st, now().Sub(start))
			if err != nil {
				return err
			}
			if cancelled {
				return j.end(ctx, key)
			}
			return sidekiq.Interrupt()
		}
		next, done, err := j.Each(ctx, job, st.cursor)
		if err != nil {
			if _, ferr := j.flush(context.WithoutCancel(ctx), key, st, 0); ferr != nil {
				return errors.Join(err, ferr)
			}
			return err
		}
		if done {
			return j.end(ctx, key)
		}
		st.cursor = next
	}
}

// load reads the saved state; a job never run has none.
func (j *Job[C]) load(ctx context.Context, key string) (*state[C], bool, error) {
	conn, err := j.Pool.GetContext(ctx)
	if err != nil {
		return nil, false, err
	}
	defer conn.Close()
	fields, err := redis.StringMap(redis.DoContext(conn, ctx, "HGETALL", key))
	if err != nil {
		return nil, false, fmt.Errorf("iterable: read %s: %w", key, err)
	}
	st := &state[C]{}
	_, cancelled := fields[contract.IterationCancelled]
	if c, ok := fields["c"]; ok {
		if err := json.Unmarshal([]byte(c), &st.cursor); err != nil {
			return nil, false, fmt.Errorf("iterable: cursor %q of %s is not a %T: %w", c, key, st.cursor, err)
		}
	}
	if ex, ok := fields["ex"]; ok {
		st.executions, _ = strconv.Atoi(ex)
	}
	if rt, ok := fields["rt"]; ok {
		st.runtime, _ = strconv.ParseFloat(rt, 64)
	}
	return st, cancelled, nil
}

// flush writes the state, with ran added to the run time (an ended
// execution), and reports whether the job is cancelled.
func (j *Job[C]) flush(ctx context.Context, key string, st *state[C], ran time.Duration) (bool, error) {
	c, err := json.Marshal(st.cursor)
	if err != nil {
		return false, fmt.Errorf("iterable: encode cursor: %w", err)
	}
	rt := "0" // Ruby's Integer 0 until an execution has ended
	if total := st.runtime + ran.Seconds(); total > 0 {
		rt = rubyfloat.Format(total)
	}
	conn, err := j.Pool.GetContext(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	reply, err := flushScript.DoContext(ctx, conn, key, st.executions, c, rt, contract.IterationTTL)
	if err != nil {
		return false, fmt.Errorf("iterable: write %s: %w", key, err)
	}
	return reply != nil, nil
}

// end removes the state of a job that completed or was cancelled: it
// ends as done, as Sidekiq's does.
func (j *Job[C]) end(ctx context.Context, key string) error {
	conn, err := j.Pool.GetContext(context.WithoutCancel(ctx))
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.Do("UNLINK", key); err != nil {
		return fmt.Errorf("iterable: remove %s: %w", key, err)
	}
	return nil
}
