// Package queuelist lists the queues as the dashboard's Queues page and
// gojob queues show them: with each queue's jobs in the retry, schedule
// and dead sets.
package queuelist

import (
	"context"
	"slices"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/setcount"
	"github.com/gojob/gojob/sidekiq/api"
)

// List returns the queues of the queues set (sorted by name), then the
// queues known only from the retry, schedule and dead sets (every job of
// theirs is there, sorted by name), and the sets' counts per queue
// (setcount.ByQueue on pool, a's Redis), in that order: retry, schedule,
// dead.
func List(ctx context.Context, a *api.API, pool *redis.Pool) ([]*api.Queue, [3]map[string]int64, error) {
	var counts [3]map[string]int64
	qs, err := a.Queues(ctx)
	if err != nil {
		return nil, counts, err
	}
	for i, set := range []string{contract.KeyRetry, contract.KeySchedule, contract.KeyDead} {
		if counts[i], err = setcount.ByQueue(ctx, pool, set); err != nil {
			return nil, counts, err
		}
	}
	known := map[string]bool{}
	for _, q := range qs {
		known[q.Name()] = true
	}
	var extra []string
	for _, c := range counts {
		for name := range c {
			if name != "" && !known[name] {
				known[name] = true
				extra = append(extra, name)
			}
		}
	}
	slices.Sort(extra)
	for _, name := range extra {
		qs = append(qs, a.Queue(name))
	}
	return qs, counts, nil
}
