package contract

import (
	"fmt"

	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// invalidJob is a Validate error: its message, and wire.ErrInvalidJob for
// errors.Is.
type invalidJob struct{ msg string }

func (e *invalidJob) Error() string        { return e.msg }
func (e *invalidJob) Is(target error) bool { return target == wire.ErrInvalidJob }

func invalid(format string, args ...any) error {
	return &invalidJob{msg: fmt.Sprintf(format, args...)}
}

// Validate checks a payload as Sidekiq's JobUtil#validate does before a
// push (lib/sidekiq/job_util.rb): a class name, args an array, a queue
// name, tags an array, retry_for a relative number of seconds. Its errors
// match wire.ErrInvalidJob.
func Validate(job *wire.Job) error {
	cls, _ := job.Get("class")
	if s, ok := cls.Str(); !ok || s == "" {
		return invalid("sidekiq: job must have a class name (\"class\")")
	}
	args, _ := job.Get("args")
	if _, ok := args.Array(); !ok {
		return invalid("sidekiq: job %s: args must be an array", job.Class())
	}
	q, _ := job.Get("queue")
	if s, ok := q.Str(); !ok || s == "" {
		return invalid("sidekiq: job %s must have a valid queue name", job.Class())
	}
	if tags, ok := job.Get("tags"); ok {
		if _, isArr := tags.Array(); !isArr {
			return invalid("sidekiq: job %s: tags must be an array", job.Class())
		}
	}
	if rf, ok := job.Get("retry_for"); ok && rf.Kind() != rubyjson.Null {
		f, isNum := rf.Float()
		if !isNum {
			return invalid("sidekiq: job %s: retry_for must be a number of seconds", job.Class())
		}
		if f > 1_000_000_000 {
			return invalid("sidekiq: job %s: retry_for must be a relative amount of time", job.Class())
		}
	}
	return nil
}
