package typed

import (
	"context"

	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/wire"
)

// Handler returns a sidekiq.Handler that decodes each job's arguments into
// a T and calls fn, a typed handler. A job whose arguments do not decode fails with an
// *ArgError, without calling fn.
func Handler[T any](fn func(ctx context.Context, job *wire.Job, args T) error) sidekiq.Handler {
	return sidekiq.HandlerFunc(func(ctx context.Context, job *wire.Job) error {
		args, err := Decode[T](job)
		if err != nil {
			return err
		}
		return fn(ctx, job, args)
	})
}
