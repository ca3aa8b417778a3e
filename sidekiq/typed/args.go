package typed

import (
	"context"
	"fmt"

	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/rubyjson"
)

// Args is an arguments type that names its job class, as River's JobArgs
// names its kind: Push then needs no class name, and a server registers
// its handler with srv.Handle(T{}.JobClass(), Handler(fn), opts).
type Args interface {
	JobClass() string
}

// JobOptions are a class's sidekiq_options that perform_async writes in
// the payload. An Args type whose class has options (sidekiq_options
// queue: "billing", retry: 5) returns them from a JobOptions() JobOptions
// method; Push writes them in the payload.
type JobOptions struct {
	// Queue is the queue ("" for the client's default).
	Queue string
	// Retry is "retry": nil for Sidekiq's default (true), a bool or an
	// int.
	Retry any
}

// argsWithOptions is Args with JobOptions.
type argsWithOptions interface {
	Args
	JobOptions() JobOptions
}

// Push pushes a job of the class args names, with the queue and retry of
// its JobOptions when it has them, and opts (scheduling, expiry).
func Push[T Args](ctx context.Context, c *sidekiq.Client, args T, opts *sidekiq.PushOpts) (*sidekiq.PushResult, error) {
	job, err := NewJob(args.JobClass(), args)
	if err != nil {
		return nil, err
	}
	if o, ok := any(args).(argsWithOptions); ok {
		jo := o.JobOptions()
		if jo.Queue != "" {
			job.SetQueue(jo.Queue)
		}
		if jo.Retry != nil {
			switch r := jo.Retry.(type) {
			case bool:
				job.Set("retry", rubyjson.BoolValue(r))
			case int:
				job.Set("retry", rubyjson.IntValue(int64(r)))
			default:
				return nil, fmt.Errorf("sidekiq: retry must be a bool or an int, got %T", jo.Retry)
			}
		}
	}
	return c.Push(ctx, job, opts)
}
