// Package redisreply reads pipelined replies without losing their errors.
//
// redigo's Do("") flushes the commands queued with Send and returns their
// replies as a slice, with an error reply (READONLY after a failover,
// LOADING while a restarted Redis reads its data, OOM, WRONGTYPE) as one
// more element rather than as the error: a caller that only checks the
// error takes a refused write for a done one. Every pipeline goes through
// Pipeline, or Check when it reads the replies itself.
package redisreply

import (
	"context"
	"fmt"

	"github.com/gomodule/redigo/redis"
)

// Pipeline flushes the commands queued on conn with Send and returns their
// replies, with the first error reply among them as the error (a
// redis.Error, so that errors.As tells it from a connection failure). No
// queued command returns no replies and no error.
func Pipeline(ctx context.Context, conn redis.Conn) ([]any, error) {
	reply, err := redis.DoContext(conn, ctx, "")
	if err != nil {
		return nil, err
	}
	if reply == nil {
		return nil, nil
	}
	replies, ok := reply.([]any)
	if !ok {
		return nil, fmt.Errorf("redisreply: unexpected pipeline reply %T", reply)
	}
	return Check(replies, nil)
}

// Check returns replies with err, or with the first error reply among
// them as the error (EXEC's replies carry one per command that failed).
func Check(replies []any, err error) ([]any, error) {
	if err != nil {
		return nil, err
	}
	for _, r := range replies {
		if e, ok := r.(redis.Error); ok {
			return replies, e
		}
	}
	return replies, nil
}
