package contract

import (
	"context"
	"fmt"
	"slices"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/redisreply"
)

// execMulti sends MULTI, the commands queue sends, and EXEC, and returns
// EXEC's replies, failing on the first per-command error reply.
func execMulti(ctx context.Context, conn redis.Conn, queue func(conn redis.Conn)) ([]any, error) {
	if err := conn.Send("MULTI"); err != nil {
		return nil, err
	}
	queue(conn)
	return redisreply.Check(redis.Values(redis.DoContext(conn, ctx, "EXEC")))
}

// sscanAll reads a whole set with SSCAN ... COUNT 1000, as Ruby's
// sscan_each, sorted and without duplicates (SSCAN may return a member
// twice).
func sscanAll(ctx context.Context, conn redis.Conn, key string) ([]string, error) {
	var members []string
	cursor := "0"
	for {
		vals, err := redis.Values(redis.DoContext(conn, ctx, "SSCAN", key, cursor, "COUNT", 1000))
		if err != nil {
			return nil, err
		}
		if len(vals) != 2 {
			return nil, fmt.Errorf("unexpected SSCAN reply of %d elements", len(vals))
		}
		if cursor, err = redis.String(vals[0], nil); err != nil {
			return nil, err
		}
		page, err := redis.Strings(vals[1], nil)
		if err != nil {
			return nil, err
		}
		members = append(members, page...)
		if cursor == "0" {
			break
		}
	}
	slices.Sort(members)
	return slices.Compact(members), nil
}
