package sidejob

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"

	"github.com/gojob/gojob/internal/callers"
	"github.com/gojob/gojob/internal/sidejobwire"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// runtimeConfig configures a jobRuntime.
type runtimeConfig struct {
	// Client is the SideJob client. Required.
	Client *Client
	// Registry holds the workers this process runs. Required.
	Registry *Registry
	// Logger receives the runtime's own logs (not the SideJob log channel).
	// Default: none.
	Logger zerolog.Logger
	// LockRetries is the number of attempts at the job lock (default 3).
	LockRetries int
	// LockRetryDelay bounds the random wait between attempts (default
	// 200 ms).
	LockRetryDelay time.Duration
	// ReturnErrors makes worker errors come back from running a job (after the
	// status is set) instead of being written to the SideJob log, like the
	// gem's ServerMiddleware.raise_errors. For tests.
	ReturnErrors bool
}

func (c *runtimeConfig) validate() error {
	if c.Client == nil {
		return errors.New("sidejob: runtimeConfig.Client is required")
	}
	if c.Registry == nil {
		return errors.New("sidejob: runtimeConfig.Registry is required")
	}
	return nil
}

// jobRuntime executes SideJob jobs: the Go form of SideJob::ServerMiddleware
// around the registered workers. It is a sidekiq.Handler; mount registers
// it on a sidekiq.Server for every worker class.
type jobRuntime struct {
	c            *Client
	reg          *Registry
	log          zerolog.Logger
	lockRetries  int
	lockDelay    time.Duration
	returnErrors bool
}

// newJobRuntime returns a runtime.
func newJobRuntime(cfg *runtimeConfig) (*jobRuntime, error) {
	if cfg == nil {
		return nil, errors.New("sidejob: nil RuntimeConfig")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	rt := &jobRuntime{
		c: cfg.Client, reg: cfg.Registry, log: cfg.Logger,
		lockRetries: cfg.LockRetries, lockDelay: cfg.LockRetryDelay, returnErrors: cfg.ReturnErrors,
	}
	if rt.lockRetries <= 0 {
		rt.lockRetries = 3
	}
	if rt.lockDelay <= 0 {
		rt.lockDelay = 200 * time.Millisecond
	}
	return rt, nil
}

// mount registers the runtime as the handler of every registered class.
func (rt *jobRuntime) mount(srv *sidekiq.Server) {
	for _, class := range rt.reg.classNames() {
		srv.Handle(class, rt, nil)
	}
}

// Perform runs one Sidekiq item of a SideJob job (sidekiq.Handler). The jid
// is read as Ruby's jid.to_i (an integer or a string of digits). Worker
// errors are handled as the gem does (status failed, log entry) and are not
// returned, so Sidekiq counts the job as processed; Redis errors are
// returned.
func (rt *jobRuntime) Perform(ctx context.Context, job *wire.Job) error {
	id, _ := rubyToI(job.JID())
	return rt.execute(ctx, job.Class(), id, job.Args(), rt.returnErrors)
}

func (rt *jobRuntime) execute(ctx context.Context, class string, id int64, args []rubyjson.Value, returnErrors bool) error {
	c := rt.c
	j := c.job(id)
	replies, err := c.pipeline(ctx, command("SISMEMBER", sidejobwire.KeyJobs, id), command("GET", j.key("status")))
	if err != nil {
		return fmt.Errorf("sidejob: run job %d: %w", id, err)
	}
	if ok, _ := redis.Bool(replies[0], nil); !ok {
		return nil
	}
	if st, _ := redis.String(replies[1], nil); st != statusQueued && st != statusTerminating {
		return nil
	}
	set, err := c.do(ctx, "SET", j.key("lock:worker"), "1", "NX", "EX", 2)
	if err != nil {
		return fmt.Errorf("sidejob: run job %d: %w", id, err)
	}
	if set == nil {
		return nil
	}
	token, lockErr := j.lock(ctx, c.lockTTL, &lockOpts{Retries: rt.lockRetries, RetryDelay: rt.lockDelay})
	if _, err := c.do(context.WithoutCancel(ctx), "DEL", j.key("lock:worker")); err != nil && lockErr == nil {
		lockErr = err
	}
	if lockErr != nil {
		return fmt.Errorf("sidejob: run job %d: %w", id, lockErr)
	}
	if token == "" {
		// Locked out: try again in a second. Unlike the gem, a terminating
		// job is rescheduled too (docs/sidejob.md#weakness-1-terminate-lost-under-the-job-lock).
		st, err := j.status(ctx)
		if err != nil {
			return err
		}
		if st == statusQueued || st == statusTerminating {
			return j.sidekiqQueue(ctx, c.clock.Now().Add(time.Second))
		}
		return nil
	}
	jctx := withContext(ctx, "job", id)
	runErr := func() error {
		st, err := j.status(jctx)
		if err != nil {
			return err
		}
		switch st {
		case statusQueued:
			w := rt.reg.workerFor(class)
			if w == nil {
				return fmt.Errorf("%w: %s is not in this process's registry", errNotRegistered, class)
			}
			return rt.runWorker(jctx, j, w, args, returnErrors)
		case statusTerminating:
			return rt.terminateWorker(jctx, j, rt.reg.workerFor(class))
		}
		return nil
	}()
	// ensure: release the lock, then ask the parent to run. As in the gem,
	// this is outside SideJob.context(job: id), so what the parent run
	// publishes does not carry the child's id.
	after := context.WithoutCancel(ctx)
	if _, err := j.unlock(after, token); err != nil {
		runErr = errors.Join(runErr, err)
	}
	if _, err := j.Run(after, &RunOpts{Parent: true}); err != nil {
		runErr = errors.Join(runErr, err)
	}
	return runErr
}

// runWorker is run_worker: rate limit, startup, perform, final status.
func (rt *jobRuntime) runWorker(ctx context.Context, j *Job, w Worker, args []rubyjson.Value, returnErrors bool) error {
	c := rt.c
	rk := rateKey(j.id, c.clock.Now())
	replies, err := c.multi(ctx, command("INCR", rk), command("EXPIRE", rk, 60))
	if err != nil {
		return fmt.Errorf("sidejob: run job %d: %w", j.id, err)
	}
	if n, _ := redis.Int(replies[0], nil); n > c.maxPerMin {
		m := rubyjson.NewMap()
		m.Set("error", rubyjson.StringValue("Job was terminated due to being called too rapidly"))
		if err := c.Log(ctx, m); err != nil {
			return err
		}
		return j.Terminate(ctx, false)
	}
	if s, ok := w.(Starter); ok {
		ran, err := redis.Bool(c.do(ctx, "EXISTS", j.key("ran_at")))
		if err != nil {
			return fmt.Errorf("sidejob: run job %d: %w", j.id, err)
		}
		if !ran {
			if err := protect(func() error { return s.Startup(ctx, j) }); err != nil {
				if errors.Is(err, errSuspended) {
					// Rescued like a Suspended from perform: "suspended"
					// only if running, which the job is not yet.
					return nil
				}
				return rt.fail(ctx, j, err, false, returnErrors)
			}
		}
	}
	if _, err := c.do(ctx, "SET", j.key("ran_at"), c.timestamp()); err != nil {
		return fmt.Errorf("sidejob: run job %d: %w", j.id, err)
	}
	// queued → running only if still queued (the gem writes running
	// unconditionally, overwriting a terminate requested since the status
	// was read; docs/sidejob.md#weakness-5-status-changes-are-not-atomic). A job that became terminating is terminated
	// now, as the lock is held; any other status is left alone.
	ok, err := j.setStatusIf(ctx, statusRunning, "in", statusQueued)
	if err != nil {
		return ignoreGone(err)
	}
	if !ok {
		st, err := j.status(ctx)
		if err != nil || st != statusTerminating {
			return err
		}
		return rt.terminateWorker(ctx, j, w)
	}
	if args == nil {
		args = []rubyjson.Value{}
	}
	perr := protect(func() error { return w.Perform(ctx, j, args) })
	// The final writes must happen even when ctx was cancelled meanwhile.
	done := context.WithoutCancel(ctx)
	if errors.Is(ctx.Err(), context.Canceled) {
		// Hard shutdown: the Sidekiq server puts the item back in its
		// queue, so the job goes back to queued and runs again (the gem
		// leaves it running for ever, docs/sidejob.md#weakness-3-job-stuck-in-running). A job timeout
		// (DeadlineExceeded) is an ordinary failure below.
		_, err := j.setStatusIf(done, statusQueued, "in", statusRunning)
		return errors.Join(fmt.Errorf("sidejob: job %d interrupted: %w", j.id, ctx.Err()), ignoreGone(err))
	}
	switch {
	case perr == nil:
		_, err = j.setStatusIf(done, statusCompleted, "in", statusRunning)
		return ignoreGone(err)
	case errors.Is(perr, errSuspended):
		_, err = j.setStatusIf(done, statusSuspended, "in", statusRunning)
		return ignoreGone(err)
	}
	return rt.fail(done, j, perr, true, returnErrors)
}

// fail records a worker error: status failed unless the job is terminating
// or terminated, or (after perform started) a re-run was requested, which
// the gem would drop (docs/sidejob.md#weakness-4-failure-drops-a-requested-re-run); then the error is logged or returned.
func (rt *jobRuntime) fail(ctx context.Context, j *Job, werr error, performed, returnErrors bool) error {
	keep := []string{statusTerminating, statusTerminated}
	if performed {
		keep = append(keep, statusQueued)
	}
	if _, err := j.setStatusIf(ctx, statusFailed, "notin", keep...); ignoreGone(err) != nil {
		return errors.Join(werr, err)
	}
	if returnErrors {
		return werr
	}
	rt.log.Warn().Err(werr).Str("component", "sidejob").Int64("job", j.id).Msg("job failed")
	return rt.c.Log(ctx, werr)
}

// terminateWorker calls the shutdown hook (errors are logged and ignored)
// and marks the job terminated.
func (rt *jobRuntime) terminateWorker(ctx context.Context, j *Job, w Worker) error {
	if s, ok := w.(Stopper); ok {
		if err := protect(func() error { return s.Shutdown(ctx, j) }); err != nil {
			if lerr := rt.c.Log(ctx, err); lerr != nil {
				return lerr
			}
		}
	}
	return ignoreGone(j.setStatus(ctx, statusTerminated))
}

// panicError is a panic recovered from a worker; it fails the job like an
// error. It is sidekiq.PanicError, so its error class and Go stack reach the
// log and the Web UI the same way.
type panicError = sidekiq.PanicError

func protect(f func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &panicError{Value: p, Stack: callers.Stack(4)}
		}
	}()
	return f()
}
