package maintenance

import (
	"sync/atomic"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/contract"
)

// Counters are the processed and failed counts not yet written to the
// stat:* keys. The server adds to them as jobs end; the heartbeat takes them
// and writes them in its stats pipeline, and puts them back when the write
// fails. The counts are kept per shard (the server's slots), each on its
// own cache lines, so that slots running on different cores do not pass
// one counter's line back and forth on every job; the zero value has one
// shard.
type Counters struct {
	shards []countShard
	first  countShard
}

// countShard is one shard's counts, padded to its own cache lines.
type countShard struct {
	processed atomic.Int64
	failed    atomic.Int64
	_         [112]byte
}

// NewCounters returns counters with n shards (at least one).
func NewCounters(n int) *Counters {
	return &Counters{shards: make([]countShard, max(n, 1))}
}

func (c *Counters) shard(i int) *countShard {
	if i >= 0 && i < len(c.shards) {
		return &c.shards[i]
	}
	return &c.first
}

// Add counts jobs processed and failed in shard (any shard counts the
// same; each slot keeps to its own).
func (c *Counters) Add(shard int, processed, failed int64) {
	s := c.shard(shard)
	if processed != 0 {
		s.processed.Add(processed)
	}
	if failed != 0 {
		s.failed.Add(failed)
	}
}

func (c *Counters) take() (processed, failed int64) {
	processed, failed = c.first.processed.Swap(0), c.first.failed.Swap(0)
	for i := range c.shards {
		processed += c.shards[i].processed.Swap(0)
		failed += c.shards[i].failed.Swap(0)
	}
	return processed, failed
}

func (c *Counters) restore(processed, failed int64) { c.Add(-1, processed, failed) }

// sendStats queues the six stat commands of a flush
// (docs/sidekiq-wire.md#stats).
func sendStats(conn redis.Conn, processed, failed int64, date string) {
	for _, kv := range []struct {
		kind string
		n    int64
	}{{"processed", processed}, {"failed", failed}} {
		conn.Send("INCRBY", "stat:"+kv.kind, kv.n)
		conn.Send("INCRBY", contract.DailyStatKey(kv.kind, date), kv.n)
		conn.Send("EXPIRE", contract.DailyStatKey(kv.kind, date), contract.StatTTL)
	}
}

// Pending returns the counts not yet flushed.
func (c *Counters) Pending() (processed, failed int64) {
	processed, failed = c.first.processed.Load(), c.first.failed.Load()
	for i := range c.shards {
		processed += c.shards[i].processed.Load()
		failed += c.shards[i].failed.Load()
	}
	return processed, failed
}
