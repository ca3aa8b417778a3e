package maintenance

import (
	"sync/atomic"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/contract"
)

// Counters are the processed and failed counts not yet written to the
// stat:* keys. The server adds to them as jobs end; the heartbeat takes them
// and writes them in its stats pipeline, and puts them back when the write
// fails.
type Counters struct {
	processed atomic.Int64
	failed    atomic.Int64
}

// Add counts jobs processed and failed.
func (c *Counters) Add(processed, failed int64) {
	if processed != 0 {
		c.processed.Add(processed)
	}
	if failed != 0 {
		c.failed.Add(failed)
	}
}

func (c *Counters) take() (processed, failed int64) {
	return c.processed.Swap(0), c.failed.Swap(0)
}

func (c *Counters) restore(processed, failed int64) { c.Add(processed, failed) }

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
	return c.processed.Load(), c.failed.Load()
}
