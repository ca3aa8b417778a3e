package typed

import (
	"context"

	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/wire"
)

// Func is a typed handler: it runs a job with its arguments decoded.
type Func[T any] func(ctx context.Context, job *wire.Job, args T) error

// Handler returns a sidekiq.Handler that decodes each job's arguments into
// a T and calls fn. A job whose arguments do not decode fails with an
// *ArgError, without calling fn.
func Handler[T any](fn Func[T]) sidekiq.Handler {
	return sidekiq.HandlerFunc(func(ctx context.Context, job *wire.Job) error {
		args, err := Decode[T](job)
		if err != nil {
			return err
		}
		return fn(ctx, job, args)
	})
}
