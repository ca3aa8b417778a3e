package sidekiq

import (
	"context"
	"time"

	"github.com/gojob/gojob/sidekiq/wire"
)

// Handler runs jobs of one class.
type Handler interface {
	Perform(ctx context.Context, job *wire.Job) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, job *wire.Job) error

// Perform calls f.
func (f HandlerFunc) Perform(ctx context.Context, job *wire.Job) error { return f(ctx, job) }

// ServerMiddleware wraps the execution of a job, first added outermost, as
// Sidekiq's server middleware chain.
type ServerMiddleware func(ctx context.Context, job *wire.Job, next func(context.Context) error) error

// DeathHandler is called when a job dies: retries exhausted (whether or not
// it goes to the dead set), or a failure of a job with retry disabled.
type DeathHandler func(ctx context.Context, job *wire.Job, err error)

// HandlerOptions are per-class settings, the Go form of sidekiq_options and
// the class-level retry hooks.
type HandlerOptions struct {
	// Retry is used when a payload has no "retry" key: nil means true (the
	// Sidekiq default), otherwise a bool or an int.
	Retry any
	// RetryIn is sidekiq_retry_in: it returns the delay before the next
	// retry, or a RetryDecision. A zero delay with RetryDefault means the
	// default backoff.
	RetryIn func(count int, err error, job *wire.Job) (time.Duration, RetryDecision)
	// RetriesExhausted is sidekiq_retries_exhausted. Returning RetryDiscard
	// keeps the job out of the dead set.
	RetriesExhausted func(ctx context.Context, job *wire.Job, err error) RetryDecision
}

// RetryDecision is what a retry hook asks for.
type RetryDecision int

// Retry hook decisions.
const (
	RetryDefault RetryDecision = iota
	RetryKill                  // send to the dead set now (:kill)
	RetryDiscard               // drop the job (:discard)
)

type registration struct {
	h    Handler
	opts HandlerOptions
}
