package sidekiq

import (
	"context"

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

// DeathHandler is called when a job dies: retries exhausted (whether or not
// it goes to the dead set), or a failure of a job with retry disabled.
type DeathHandler func(ctx context.Context, job *wire.Job, err error)

// HandlerOptions are per-class settings, the Go form of sidekiq_options and
// the class-level retry hooks.
type HandlerOptions struct {
	// Retry is used when a payload has no "retry" key: nil means true (the
	// Sidekiq default), otherwise a bool or an int.
	Retry any
	// RetryIn is sidekiq_retry_in: it decides what follows a failure that
	// has retries left, with the outcomes a handler returns: nil for the
	// default backoff, RetryIn(d, err) for a retry after d (0: the
	// default backoff), Kill(err) to send the job to the dead set now
	// (:kill), Discard(err) to drop it (:discard). Any other error means
	// the default backoff. The job's failure stays the one it is given.
	RetryIn func(count int, err error, job *wire.Job) error
	// RetriesExhausted is sidekiq_retries_exhausted. Returning Discard(err)
	// keeps the job out of the dead set (:discard); anything else leaves
	// it to go there.
	RetriesExhausted func(ctx context.Context, job *wire.Job, err error) error
}

type registration struct {
	h    Handler
	opts HandlerOptions
}
