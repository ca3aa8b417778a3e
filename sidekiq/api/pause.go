package api

import (
	"context"
	"fmt"
	"sort"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/contract"
)

// Pause stops every gojob process fetching from the queue within about a
// second (docs/queue-pause.md); jobs stay in the queue. Ruby processes
// keep fetching unless they load contrib/ruby/gojob.rb.
func (q *Queue) Pause(ctx context.Context) error { return q.setPaused(ctx, "SADD") }

// Unpause lets gojob processes fetch from the queue again.
func (q *Queue) Unpause(ctx context.Context) error { return q.setPaused(ctx, "SREM") }

func (q *Queue) setPaused(ctx context.Context, cmd string) error {
	conn, err := q.api.conn(ctx, "pause queue")
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := redis.DoContext(conn, ctx, cmd, contract.KeyPausedQueues, q.name); err != nil {
		return fmt.Errorf("sidekiq: pause queue %s: %w", q.name, err)
	}
	return nil
}

// PausedQueues returns the names of the paused queues, sorted.
func (a *API) PausedQueues(ctx context.Context) ([]string, error) {
	conn, err := a.conn(ctx, "paused queues")
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	names, err := redis.Strings(redis.DoContext(conn, ctx, "SMEMBERS", contract.KeyPausedQueues))
	if err != nil {
		return nil, fmt.Errorf("sidekiq: paused queues: %w", err)
	}
	sort.Strings(names)
	return names, nil
}
