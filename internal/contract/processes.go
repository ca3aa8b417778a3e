package contract

import (
	"context"
	"fmt"

	"github.com/gomodule/redigo/redis"
)

// CleanupParams tune CleanupProcesses.
type CleanupParams struct {
	// Lock takes the cluster-wide process_cleanup lock first (SET
	// process_cleanup 1 NX EX 60) and skips the cleanup when another
	// process holds it, as Sidekiq 6.5.2+ does. 6.4.1 has no lock.
	Lock bool
}

// CleanupResult reports a cleanup.
type CleanupResult struct {
	// Ran is false when the lock was held by another caller.
	Ran bool
	// Removed is the number of identities removed from the processes set.
	Removed int64
}

// CleanupProcesses removes dead processes from the processes set as Ruby's
// ProcessSet#cleanup does (lib/sidekiq/api.rb): SSCAN processes, a pipeline
// of HGET <identity> info, and one SREM of the identities whose hash is
// gone (it expires 60 s after the last beat). See
// docs/sidekiq-wire.md#shutdown.
func CleanupProcesses(ctx context.Context, conn redis.Conn, p CleanupParams) (*CleanupResult, error) {
	if p.Lock {
		ok, err := redis.DoContext(conn, ctx, "SET", KeyProcessCleanup, "1", "NX", "EX", 60)
		if err != nil {
			return nil, fmt.Errorf("sidekiq: cleanup processes: %w", err)
		}
		if ok == nil {
			return &CleanupResult{}, nil
		}
	}
	ids, err := sscanAll(ctx, conn, KeyProcesses)
	if err != nil {
		return nil, fmt.Errorf("sidekiq: cleanup processes: %w", err)
	}
	res := &CleanupResult{Ran: true}
	if len(ids) == 0 {
		return res, nil
	}
	for _, id := range ids {
		conn.Send("HGET", id, "info")
	}
	if err := conn.Flush(); err != nil {
		return nil, fmt.Errorf("sidekiq: cleanup processes: %w", err)
	}
	prune := []any{KeyProcesses}
	for _, id := range ids {
		r, err := redis.ReceiveContext(conn, ctx)
		if err != nil {
			return nil, fmt.Errorf("sidekiq: cleanup processes: %w", err)
		}
		if r == nil {
			prune = append(prune, id)
		}
	}
	if len(prune) == 1 {
		return res, nil
	}
	if res.Removed, err = redis.Int64(redis.DoContext(conn, ctx, "SREM", prune...)); err != nil {
		return nil, fmt.Errorf("sidekiq: cleanup processes: %w", err)
	}
	return res, nil
}
