package sidejob

import (
	"context"
	"errors"
	"fmt"

	"github.com/gojob/gojob/sidekiq/rubyjson"
)

// Worker runs the jobs of one class (the perform method of a class that
// includes SideJob::Worker). job gives access to everything JobMethods
// offers (ports, state, children, …); args are the job's Sidekiq args.
//
// A worker is a type (usually a struct holding what Perform needs), so it
// can also implement Starter and Stopper. Return nil to complete the job,
// Suspend() to suspend it until it is run again, or any other error to
// fail it. A panic fails it too.
type Worker interface {
	Perform(ctx context.Context, job *Job, args []rubyjson.Value) error
}

// Starter is implemented by workers with a startup hook, called before the
// first run only (while job:<id>:ran_at is missing). An error fails the job
// and leaves ran_at unset, so Startup runs again next time. Suspend()
// skips the run without failing it (the job stays queued, as in the gem).
type Starter interface {
	Startup(ctx context.Context, job *Job) error
}

// Stopper is implemented by workers with a shutdown hook, called when a
// terminating job is processed; its error is logged and ignored.
type Stopper interface {
	Shutdown(ctx context.Context, job *Job) error
}

// errSuspended is returned by Perform to suspend the job (Ruby's
// SideJob::Worker::Suspended). Match it with errors.Is.
var errSuspended = errors.New("sidejob: suspended")

// Suspend returns the error that suspends the job: `return
// sidejob.Suspend()` in Perform.
func Suspend() error { return errSuspended }

// ForInputs reads the named inports row by row and calls fn with one value
// per port (Worker#for_inputs, docs/sidejob.md#for_inputs). Each pass runs in its own port
// group, so each row makes one log entry with its reads and the writes fn
// makes:
//   - when no port has data or a default, it returns nil;
//   - when some port has data: if every port has data or a default, fn gets
//     one read of each port (defaults fill ports without data) and the loop
//     goes on; otherwise it returns Suspend();
//   - when no port has data but every port has a default, fn is called once
//     with the defaults inside a group with SetDefault (writes set output
//     defaults), unless these defaults equal the ones of the last such call
//     (kept in the job-state field "for_inputs"); then it returns nil.
func (j *Job) ForInputs(ctx context.Context, ports []string, fn func(ctx context.Context, values []rubyjson.Value) error) error {
	if len(ports) == 0 {
		return nil
	}
	ps := make([]*Port, len(ports))
	for i, name := range ports {
		p, err := j.Input(ctx, name)
		if err != nil {
			return err
		}
		ps[i] = p
	}
	for {
		done := false
		err := j.c.inGroup(ctx, nil, func(gctx context.Context) error {
			cmds := make([]cmd, 0, 2*len(ps))
			for _, p := range ps {
				cmds = append(cmds, command("LLEN", p.String()), command("HEXISTS", p.defaultKey(), p.name))
			}
			replies, err := j.c.pipeline(gctx, cmds...)
			if err != nil {
				return fmt.Errorf("sidejob: job %d for_inputs: %w", j.id, err)
			}
			anyData, anyDefault, allReady, allDefault := false, false, true, true
			for i := range ps {
				n, _ := replies[2*i].(int64)
				d, _ := replies[2*i+1].(int64)
				anyData = anyData || n > 0
				anyDefault = anyDefault || d > 0
				allReady = allReady && (n > 0 || d > 0)
				allDefault = allDefault && d > 0
			}
			switch {
			case !anyData && !anyDefault:
				done = true
				return nil
			case anyData:
				if !allReady {
					return errSuspended
				}
				values := make([]rubyjson.Value, len(ps))
				for i, p := range ps {
					d, err := p.Read(gctx)
					if err != nil {
						return err
					}
					if d != nil {
						values[i] = d.Value
					}
				}
				return fn(gctx, values)
			case allDefault:
				done = true
				values := make([]rubyjson.Value, len(ps))
				for i, p := range ps {
					d, err := p.defaultData(gctx)
					if err != nil {
						return err
					}
					if d != nil {
						values[i] = d.Value
					}
				}
				last, ok, err := j.get(gctx, "for_inputs")
				if err != nil {
					return err
				}
				cur := rubyjson.ArrayValue(values...)
				if ok && rubyjson.Equal(last, cur) {
					return nil
				}
				if err := j.Set(gctx, "for_inputs", cur); err != nil {
					return err
				}
				return j.c.inGroup(gctx, &groupOptions{SetDefault: opt(true)}, func(dctx context.Context) error {
					return fn(dctx, values)
				})
			default:
				done = true
				return nil
			}
		})
		if err != nil || done {
			return err
		}
	}
}
