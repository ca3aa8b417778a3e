// Package setcount counts the entries of Sidekiq's retry, schedule and
// dead sets per queue, for the queue lists of `gojob queues` and the
// dashboard.
package setcount

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/gomodule/redigo/redis"
)

// ByQueue counts the entries of the sorted set set (retry, schedule, dead)
// per queue (the payload's "queue"; "" for a payload that is not a job or
// names none). The set is read in
// pages of 1,000, as it stands during the read: an entry that moves
// meanwhile may be counted twice or not at all. Sidekiq has no such
// count; the dashboard's Queues page and `gojob queues` show it beside each
// queue.
//
// Redis counts each page itself (queueCountScript), so a set of large
// payloads is not copied here: it reads the name of a payload whose
// top-level "queue" comes before any nested value, as Ruby's and gojob's
// clients write it ({"retry":…,"queue":"…","args":…}); a payload where it
// cannot be sure is returned whole and decoded here.
func ByQueue(ctx context.Context, pool *redis.Pool, set string) (map[string]int64, error) {
	const page = 1000
	counts := map[string]int64{}
	var q struct {
		Queue string `json:"queue"`
	}
	for start := 0; ; start += page {
		conn, err := pool.GetContext(ctx)
		if err != nil {
			return nil, fmt.Errorf("sidekiq: count %s per queue: %w", set, err)
		}
		reply, err := redis.Values(queueCountScript.DoContext(ctx, conn, set, start, page))
		conn.Close()
		if err == nil && len(reply) != 3 {
			err = fmt.Errorf("unexpected reply of %d elements", len(reply))
		}
		if err != nil {
			return nil, fmt.Errorf("sidekiq: count %s per queue: %w", set, err)
		}
		n, _ := redis.Int(reply[0], nil)
		named, err := redis.Strings(reply[1], nil)
		if err != nil {
			return nil, fmt.Errorf("sidekiq: count %s per queue: %w", set, err)
		}
		for i := 0; i+1 < len(named); i += 2 {
			c, _ := strconv.ParseInt(named[i+1], 10, 64)
			counts[named[i]] += c
		}
		raws, err := redis.ByteSlices(reply[2], nil)
		if err != nil {
			return nil, fmt.Errorf("sidekiq: count %s per queue: %w", set, err)
		}
		for _, v := range raws {
			q.Queue = ""
			if json.Unmarshal(v, &q) != nil {
				q.Queue = ""
			}
			counts[q.Queue]++
		}
		if n < page {
			return counts, nil
		}
	}
}

// queueCountScript counts a page of a sorted set's members by queue:
// ZRANGE KEYS[1] ARGV[1] ARGV[1]+ARGV[2]-1. It returns the page's size,
// the counts as name, count pairs, and the members whose queue it leaves
// to the caller: those where "queue":" is not found, comes after a { or [
// other than the first character (it might be nested), or names a string
// with an escape.
var (
	//go:embed lua/queue_count.lua
	queueCountLua    string
	queueCountScript = redis.NewScript(1, queueCountLua)
)
