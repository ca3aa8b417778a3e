package durable

import (
	"context"
	"fmt"

	"github.com/gojob/gojob/sidekiq/api"
)

// runningJIDs returns the jids in the work hashes of live processes (Ruby
// and gojob, any version).
func runningJIDs(ctx context.Context, admin *api.API) (map[string]bool, error) {
	work, err := admin.WorkSet(ctx)
	if err != nil {
		return nil, fmt.Errorf("durable: running jobs: %w", err)
	}
	out := make(map[string]bool, len(work))
	for _, w := range work {
		if w.Payload != nil {
			out[w.Payload.JID()] = true
		}
	}
	return out, nil
}
