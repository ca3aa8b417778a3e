package durable

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/sidekiq"
)

// The reconciler looks jobs up by jid without loading whole queues or
// sets into memory, so no size disables it (Ruby skips the whole poll once
// the retry or dead set holds 500 entries). Queues and sets are streamed in
// chunks and each lookup stops as soon as every wanted jid is found.

const lookupChunk = 1000

// findInQueue returns which wanted jids are in queue:<name>.
//
// Overdue jobs are the oldest, at the right (BRPOP) end, so the list is
// first read from the right in chunks. Reading by negative index can skip
// an element while fetchers pop, so when a jid is still not found and the
// list was longer than one chunk, it is read again from the left, where
// pops and pushes never make an element skip a chunk.
func findInQueue(ctx context.Context, conn redis.Conn, queue string, wanted map[string]bool) (map[string]bool, error) {
	found := map[string]bool{}
	if len(wanted) == 0 {
		return found, nil
	}
	key := sidekiq.QueueKey(queue)
	check := func(vals [][]byte) {
		for _, v := range vals {
			if jid, ok := memberJID(v, wanted); ok {
				found[jid] = true
			}
		}
	}
	n, err := redis.Int64(redis.DoContext(conn, ctx, "LLEN", key))
	if err != nil {
		return nil, fmt.Errorf("durable: length of queue %s: %w", queue, err)
	}
	if n <= lookupChunk {
		vals, err := redis.ByteSlices(redis.DoContext(conn, ctx, "LRANGE", key, 0, -1))
		if err != nil {
			return nil, fmt.Errorf("durable: read queue %s: %w", queue, err)
		}
		check(vals)
		return found, nil
	}
	for end := int64(-1); len(found) < len(wanted); end -= lookupChunk {
		vals, err := redis.ByteSlices(redis.DoContext(conn, ctx, "LRANGE", key, end-lookupChunk+1, end))
		if err != nil {
			return nil, fmt.Errorf("durable: read queue %s: %w", queue, err)
		}
		if len(vals) == 0 {
			break
		}
		check(vals)
	}
	for start := int64(0); len(found) < len(wanted); start += lookupChunk {
		vals, err := redis.ByteSlices(redis.DoContext(conn, ctx, "LRANGE", key, start, start+lookupChunk-1))
		if err != nil {
			return nil, fmt.Errorf("durable: read queue %s: %w", queue, err)
		}
		if len(vals) == 0 {
			break
		}
		check(vals)
	}
	return found, nil
}

// findInSet returns the score of each wanted jid found in a sorted set
// (retry, schedule, dead). ZSCAN returns every member present for the whole
// scan. For a few jids, each gets a ZSCAN MATCH (the server filters); for
// more, the set is streamed once.
func findInSet(ctx context.Context, conn redis.Conn, key string, wanted map[string]bool) (map[string]float64, error) {
	found := map[string]float64{}
	if len(wanted) == 0 {
		return found, nil
	}
	scan := func(match string, want map[string]bool) error {
		cursor := "0"
		for {
			args := []any{key, cursor, "COUNT", lookupChunk}
			if match != "" {
				args = append(args, "MATCH", match)
			}
			vals, err := redis.Values(redis.DoContext(conn, ctx, "ZSCAN", args...))
			if err != nil {
				return fmt.Errorf("durable: scan %s: %w", key, err)
			}
			if len(vals) != 2 {
				return fmt.Errorf("durable: scan %s: unexpected reply", key)
			}
			if cursor, err = redis.String(vals[0], nil); err != nil {
				return fmt.Errorf("durable: scan %s: %w", key, err)
			}
			pairs, err := redis.ByteSlices(vals[1], nil)
			if err != nil {
				return fmt.Errorf("durable: scan %s: %w", key, err)
			}
			for i := 0; i+1 < len(pairs); i += 2 {
				jid, ok := memberJID(pairs[i], want)
				if !ok {
					continue
				}
				score, err := sidekiq.ParseScore(string(pairs[i+1]))
				if err != nil {
					return fmt.Errorf("durable: scan %s: bad score %q", key, pairs[i+1])
				}
				if _, seen := found[jid]; !seen {
					found[jid] = score
				}
			}
			if cursor == "0" || allFound(found, want) {
				return nil
			}
		}
	}
	if len(wanted) <= 8 {
		for jid := range wanted {
			if err := scan(`*"jid":"`+globEscape(jid)+`"*`, map[string]bool{jid: true}); err != nil {
				return nil, err
			}
		}
		return found, nil
	}
	if err := scan("", wanted); err != nil {
		return nil, err
	}
	return found, nil
}

func allFound(found map[string]float64, want map[string]bool) bool {
	for jid := range want {
		if _, ok := found[jid]; !ok {
			return false
		}
	}
	return true
}

var jidKey = []byte(`"jid":"`)

// memberJID returns the top-level jid of a stored payload if it is one of
// wanted. Candidates are found textually (a "jid" key inside the args is
// possible, so every occurrence is tried) and confirmed by parsing.
func memberJID(member []byte, wanted map[string]bool) (string, bool) {
	rest := member
	for {
		i := bytes.Index(rest, jidKey)
		if i < 0 {
			return "", false
		}
		rest = rest[i+len(jidKey):]
		end := bytes.IndexByte(rest, '"')
		if end < 0 {
			return "", false
		}
		cand := string(rest[:end])
		if wanted[cand] {
			if j, err := sidekiq.ParseJob(member); err == nil && j.JID() == cand {
				return cand, true
			}
		}
	}
}

// globEscape escapes Redis glob metacharacters.
func globEscape(s string) string {
	var b strings.Builder
	for _, c := range s {
		switch c {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// runningJIDs returns the jids in the work hashes of live processes (Ruby
// and gojob, any version).
func runningJIDs(ctx context.Context, api *sidekiq.API) (map[string]bool, error) {
	work, err := api.WorkSet(ctx)
	if err != nil {
		return nil, fmt.Errorf("durable: running jobs: %w", err)
	}
	out := make(map[string]bool, len(work))
	for _, w := range work {
		if w.Payload != nil {
			out[w.Payload.JID()] = true
		}
	}
	return out, nil
}
