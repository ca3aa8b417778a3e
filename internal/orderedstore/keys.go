// Package orderedstore is the Redis storage of ordered queues
// (docs/ordered.md): key names, shard hashing, the Lua scripts, and the
// status and morgue operations of the admin commands and the dashboard.
// Package ordered pushes to and works the queues on top of it.
package orderedstore

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"

	"github.com/gomodule/redigo/redis"
)

// KeyQueues is the set of ordered queue names (for status listings).
const KeyQueues = "gojob:ordered:queues"

// ErrBadQueueName is returned for a queue name ordered queues cannot use.
var ErrBadQueueName = errors.New("ordered: queue name must be non-empty and contain no '{', '}' or whitespace")

// ErrShardsMismatch is matched (errors.Is) by the error of a worker
// configured with another shard count than its queue has.
var ErrShardsMismatch = errors.New("ordered: a queue's shard count cannot change")

// ValidQueue checks a queue name: its keys carry it as a hash tag.
func ValidQueue(q string) error {
	if q == "" || strings.ContainsAny(q, "{} \t\r\n") {
		return fmt.Errorf("%w: %q", ErrBadQueueName, q)
	}
	return nil
}

// Prefix is the key prefix of queue q; the Lua scripts build every key of
// the queue from it (lua/common.lua).
func Prefix(q string) string { return "gojob:ordered:{" + q + "}:" }

// ShardOf returns the shard of an ordering key: crc32(key) % shards, as
// Lowkiq's Queue#id_to_shard (Zlib.crc32, lib/lowkiq/queue/queue.rb).
func ShardOf(key string, shards int) int {
	return int(crc32.ChecksumIEEE([]byte(key)) % uint32(shards))
}

// Keys names the Redis keys of one queue for the Go side; the names match
// lua/common.lua.
type Keys struct{ p string }

// KeysOf returns the keys of queue q.
func KeysOf(q string) Keys { return Keys{Prefix(q)} }

// Prefix is the queue's key prefix, the scripts' ARGV[1].
func (k Keys) Prefix() string { return k.p }

func (k Keys) Meta() string               { return k.p + "meta" }
func (k Keys) Ready() string              { return k.p + "ready" }
func (k Keys) Stats() string              { return k.p + "stats" }
func (k Keys) Retries() string            { return k.p + "retries" }
func (k Keys) Errors() string             { return k.p + "errors" }
func (k Keys) Members() string            { return k.p + "members" }
func (k Keys) Morgue() string             { return k.p + "morgue" }
func (k Keys) MorgueErrors() string       { return k.p + "morgue:errors" }
func (k Keys) Shard(s int) string         { return k.p + "shard:" + strconv.Itoa(s) }
func (k Keys) Payloads(key string) string { return k.p + "p:" + key }
func (k Keys) Proc(s int) string          { return k.p + "proc:" + strconv.Itoa(s) }
func (k Keys) Lease(s int) string         { return k.p + "lease:" + strconv.Itoa(s) }
func (k Keys) MorguePayloads(key string) string {
	return k.p + "morgue:p:" + key
}

// QueueShards reads a queue's shard count, 0 when the queue does not exist.
func QueueShards(ctx context.Context, conn redis.Conn, q string) (int, error) {
	n, err := redis.Int(redis.DoContext(conn, ctx, "HGET", KeysOf(q).Meta(), "shards"))
	if errors.Is(err, redis.ErrNil) {
		return 0, nil
	}
	return n, err
}
