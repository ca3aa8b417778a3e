package sidejob

import (
	"context"
	"errors"
	"fmt"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/sidejobwire"
	"github.com/gojob/gojob/sidekiq/rubyjson"
)

// Job statuses (docs/sidejob.md#statuses).
const (
	statusQueued      = "queued"
	statusRunning     = "running"
	statusSuspended   = "suspended"
	statusCompleted   = "completed"
	statusFailed      = "failed"
	statusTerminating = "terminating"
	statusTerminated  = "terminated"
)

// status returns the job's status ("" when the key is missing).
func (j *Job) status(ctx context.Context) (string, error) {
	s, err := redis.String(j.c.do(ctx, "GET", j.key("status")))
	if errors.Is(err, redis.ErrNil) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("sidejob: job %d status: %w", j.id, err)
	}
	return s, nil
}

// setStatus sets the status unconditionally (Ruby's status=, a GETSET)
// and publishes {"status": s} to the job channel when it changed, unless
// the worker config has "status_publish": false. Like the gem's status=
// (which calls check_exists), it fails with ErrJobNotFound when the job
// does not exist, and then writes nothing. Callers outside the package
// change the status through Run and Terminate.
func (j *Job) setStatus(ctx context.Context, s string) error {
	_, err := j.setStatusIf(ctx, s, "any")
	return err
}

// setStatusIf changes the status atomically when the job exists and its
// current status matches mode ("any", "in" or "notin") and list, and
// publishes a change. It reports whether the status was written; a job that
// does not exist is a *jobNotFoundError (see ignoreGone).
func (j *Job) setStatusIf(ctx context.Context, s, mode string, list ...string) (bool, error) {
	conn, err := j.c.conn(ctx)
	if err != nil {
		return false, err
	}
	args := []any{j.key("status"), sidejobwire.KeyJobs, s, j.id, mode}
	for _, l := range list {
		args = append(args, l)
	}
	reply, err := redis.Values(setStatusScript.DoContext(ctx, conn, args...))
	conn.Close()
	if err != nil {
		return false, fmt.Errorf("sidejob: job %d status %s: %w", j.id, s, err)
	}
	code, _ := redis.Int(reply[0], nil)
	switch code {
	case -2:
		return false, &jobNotFoundError{ID: j.id}
	case 1:
		if err := j.publishStatus(ctx, s); err != nil {
			return true, err
		}
	}
	return code >= 0, nil
}

func (j *Job) publishStatus(ctx context.Context, s string) error {
	cfg, err := j.workerConfig(ctx)
	if err != nil {
		return err
	}
	if v, ok := cfg.Get("status_publish"); ok {
		if b, isBool := v.Bool(); isBool && !b {
			return nil
		}
	}
	m := rubyjson.NewMap()
	m.Set("status", rubyjson.StringValue(s))
	return j.c.inGroup(ctx, &groupOptions{Log: opt(false)}, func(ctx context.Context) error {
		return j.c.Publish(ctx, sidejobwire.JobChannel(j.id), rubyjson.ObjectValue(m))
	})
}
