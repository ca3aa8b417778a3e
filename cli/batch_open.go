package cli

import (
	"errors"

	ucli "github.com/urfave/cli/v2"

	"github.com/gojob/gojob/batch"
)

func newBatches(e *adminEnv) (*batch.Batches, error) {
	return batch.New(&batch.Config{Client: e.api.Client()})
}

// batchError maps the batch package's errors to exit codes.
func batchError(err error) error {
	switch {
	case errors.Is(err, batch.ErrNotFound):
		return ucli.Exit(err.Error(), exitNotFound)
	case errors.Is(err, batch.ErrComplete):
		return ucli.Exit(err.Error(), exitRefused)
	}
	return err
}
