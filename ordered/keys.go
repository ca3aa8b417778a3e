package ordered

import (
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"
)

// KeyQueues is the set of ordered queue names (for status listings).
const KeyQueues = "gojob:ordered:queues"

// ErrBadQueueName is returned for a queue name ordered queues cannot use.
var ErrBadQueueName = errors.New("ordered: queue name must be non-empty and contain no '{', '}' or whitespace")

// validQueue checks a queue name: its keys carry it as a hash tag.
func validQueue(q string) error {
	if q == "" || strings.ContainsAny(q, "{} \t\r\n") {
		return fmt.Errorf("%w: %q", ErrBadQueueName, q)
	}
	return nil
}

// prefix is the key prefix of queue q; the Lua scripts build every key of
// the queue from it (lua/common.lua).
func prefix(q string) string { return "gojob:ordered:{" + q + "}:" }

// ShardOf returns the shard of an ordering key: crc32(key) % shards, as
// Lowkiq's Queue#id_to_shard (Zlib.crc32, lib/lowkiq/queue/queue.rb).
func ShardOf(key string, shards int) int {
	return int(crc32.ChecksumIEEE([]byte(key)) % uint32(shards))
}

// keys names the Redis keys of one queue for the Go side (status, tests);
// the names match lua/common.lua.
type keys struct{ p string }

func keysOf(q string) keys { return keys{prefix(q)} }

func (k keys) meta() string               { return k.p + "meta" }
func (k keys) ready() string              { return k.p + "ready" }
func (k keys) stats() string              { return k.p + "stats" }
func (k keys) retries() string            { return k.p + "retries" }
func (k keys) errors() string             { return k.p + "errors" }
func (k keys) members() string            { return k.p + "members" }
func (k keys) morgue() string             { return k.p + "morgue" }
func (k keys) morgueErrors() string       { return k.p + "morgue:errors" }
func (k keys) shard(s int) string         { return k.p + "shard:" + strconv.Itoa(s) }
func (k keys) payloads(key string) string { return k.p + "p:" + key }
func (k keys) proc(s int) string          { return k.p + "proc:" + strconv.Itoa(s) }
func (k keys) lease(s int) string         { return k.p + "lease:" + strconv.Itoa(s) }
func (k keys) morguePayloads(key string) string {
	return k.p + "morgue:p:" + key
}
