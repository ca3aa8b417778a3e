// Package redisx holds the small Redis helpers every layer of sidekiq/
// shares: MULTI/EXEC with per-command errors, SSCAN of a whole set, telling a
// connection failure from an error reply, and riding out an outage with
// backoff while logging it once. It knows nothing of Sidekiq's keys or
// payloads; those are in packages wire and internal/contract.
package redisx

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"syscall"

	"github.com/gojob/gojob/internal/redisreply"
	"github.com/gomodule/redigo/redis"
)

// ExecMulti sends MULTI, the commands queue Sends, and EXEC, and returns
// EXEC's replies, failing on the first per-command error reply.
func ExecMulti(ctx context.Context, conn redis.Conn, queue func(conn redis.Conn)) ([]any, error) {
	if err := conn.Send("MULTI"); err != nil {
		return nil, err
	}
	queue(conn)
	replies, err := redisreply.Check(redis.Values(redis.DoContext(conn, ctx, "EXEC")))
	if err != nil {
		return nil, err
	}
	return replies, nil
}

// SScanAll reads a whole set with SSCAN ... COUNT 1000, as Ruby's
// sscan_each, sorted and without duplicates.
func SScanAll(ctx context.Context, conn redis.Conn, key string) ([]string, error) {
	first, err := redis.DoContext(conn, ctx, "SSCAN", key, "0", "COUNT", 1000)
	if err != nil {
		return nil, err
	}
	return SScanContinue(ctx, conn, key, first)
}

// SScanContinue takes the reply of a first SSCAN page (sent in a pipeline
// by the caller) and reads the rest of the set. The result is sorted and
// without duplicates: SSCAN may return a member twice, and sums over the
// set must not count it twice.
func SScanContinue(ctx context.Context, conn redis.Conn, key string, first any) ([]string, error) {
	cursor, members, err := sscanPage(first, nil)
	if err != nil {
		return nil, err
	}
	for cursor != "0" {
		var more []string
		cursor, more, err = sscanPage(redis.DoContext(conn, ctx, "SSCAN", key, cursor, "COUNT", 1000))
		if err != nil {
			return nil, err
		}
		members = append(members, more...)
	}
	slices.Sort(members)
	return slices.Compact(members), nil
}

func sscanPage(reply any, err error) (cursor string, members []string, _ error) {
	vals, err := redis.Values(reply, err)
	if err != nil {
		return "", nil, err
	}
	if len(vals) != 2 {
		return "", nil, fmt.Errorf("unexpected SSCAN reply of %d elements", len(vals))
	}
	if cursor, err = redis.String(vals[0], nil); err != nil {
		return "", nil, err
	}
	members, err = redis.Strings(vals[1], nil)
	return cursor, members, err
}

// OptString returns a bulk string reply as a string, "" for nil.
func OptString(r any) string {
	b, _ := r.([]byte)
	return string(b)
}

// IsConnError reports whether err is a failure of the connection to Redis
// (refused, reset, timed out, closed, a broken reply stream), worth
// retrying on another connection, rather than an error reply of Redis or an
// error of the caller's own (an invalid job, a middleware's refusal).
func IsConnError(err error) bool {
	if err == nil {
		return false
	}
	var re redis.Error
	if errors.As(err, &re) {
		return false
	}
	var ne net.Error
	var errno syscall.Errno
	switch {
	case errors.As(err, &ne), errors.As(err, &errno),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		errors.Is(err, context.DeadlineExceeded):
		return true
	}
	// redigo's own: "connection closed", "unexpected response line", a
	// pool exhausted or closed.
	return strings.HasPrefix(err.Error(), "redigo: ")
}

// IsTransient reports whether err is an error reply that a later try can
// get past: Redis loading its data set, busy with a script, in a failover
// (a master turned replica refuses writes, READONLY, and ends the blocking
// commands waiting on it, UNBLOCKED), or short of the replicas
// min-replicas-to-write asks for.
func IsTransient(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	for _, p := range []string{"LOADING", "BUSY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "READONLY", "UNBLOCKED", "NOREPLICAS"} {
		if strings.HasPrefix(string(re), p) {
			return true
		}
	}
	return false
}
