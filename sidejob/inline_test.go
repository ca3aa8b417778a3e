package sidejob

// The gem's testing helpers (run_inline, drain_queue), for the tests.

import (
	"context"
	"errors"
	"fmt"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// inlineOpts are the options of runInline (the gem's testing helper
// run_inline). The zero value matches Ruby's defaults.
type inlineOpts struct {
	// KeepStatus leaves the status as it is (queue: false); by default it is
	// set to queued first, so a suspended or completed job runs.
	KeepStatus bool
	// SwallowErrors logs worker errors instead of returning them
	// (errors: false).
	SwallowErrors bool
	// Args are passed to Perform (Ruby passes [] unless told otherwise).
	Args []rubyjson.Value
}

// drainOpts are the options of drain.
type drainOpts struct {
	// Queues to drain; default every queue in the "queues" set.
	Queues []string
	// SwallowErrors logs worker errors instead of returning them.
	SwallowErrors bool
}

// drain takes the items of the immediate Sidekiq queues one by one and runs
// them inline until every queue is empty (the gem's drain_queue; the
// schedule set is not processed). Use a ctx with a deadline as the timeout.
// It returns the number of items run.
func (rt *jobRuntime) drain(ctx context.Context, o *drainOpts) (int, error) {
	if o == nil {
		o = &drainOpts{}
	}
	n := 0
	for {
		queues := o.Queues
		if len(queues) == 0 {
			var err error
			if queues, err = redis.Strings(rt.c.do(ctx, "SMEMBERS", contract.KeyQueues)); err != nil {
				return n, fmt.Errorf("sidejob: drain: %w", err)
			}
		}
		ran := false
		for _, q := range queues {
			for {
				if err := ctx.Err(); err != nil {
					return n, err
				}
				raw, err := redis.Bytes(rt.c.do(ctx, "RPOP", contract.QueueKey(q)))
				if errors.Is(err, redis.ErrNil) {
					break
				}
				if err != nil {
					return n, fmt.Errorf("sidejob: drain %s: %w", q, err)
				}
				job, err := wire.ParseJob(raw)
				if err != nil {
					return n, fmt.Errorf("sidejob: drain %s: %w", q, err)
				}
				ran = true
				n++
				id, _ := rubyToI(job.JID())
				if err := rt.execute(ctx, job.Class(), id, job.Args(), !o.SwallowErrors); err != nil {
					return n, err
				}
			}
		}
		if !ran {
			return n, nil
		}
	}
}

// runInline runs the job once in this goroutine through the middleware
// algorithm, with the worker of its class.
func (rt *jobRuntime) runInline(ctx context.Context, j *Job, o *inlineOpts) error {
	if o == nil {
		o = &inlineOpts{}
	}
	w, err := j.worker(ctx)
	if err != nil {
		return err
	}
	if !o.KeepStatus {
		if err := j.setStatus(ctx, statusQueued); err != nil {
			return err
		}
	}
	return rt.execute(ctx, w.class, j.id, o.Args, !o.SwallowErrors)
}
