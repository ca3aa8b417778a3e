package durable

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/redisreply"
	"github.com/gojob/gojob/sidekiq/wire"
)

// Targeted lookups: the reconciler finds a page's jobs in Redis with
// commands aimed at each row, so that a pass costs the rows that are due,
// not the size of Redis (a million-entry retry set costs nothing to rows
// whose jobs are elsewhere). A row's base is assume_dead_at minus its
// extension, the moment its deadline was last set:
//
//   - retry and schedule sets at the base itself: a scheduled push sets
//     the deadline to at + extension, and the reconciler sets it to the
//     entry's score + extension when it finds a job in a set;
//   - retry set, for a row that records an error: a failure (the server
//     middleware's unlock) sets the deadline to the failure time +
//     extension, and the retry is due the default retry delay later
//     (count⁴ + 15 s + a jitter of at most 10 × (count + 1) s;
//     sidekiq/retry.go), the count read from the row's retry_count;
//   - dead set, for a row that records an error: a job whose retries ran
//     out dies right after its unlock, just after the base;
//   - queue: its oldest jobs, from the pop end, down to the newest job
//     pushed before the page's latest base (its enqueued_at): a job pushed
//     later is not one of the page's;
//   - in-progress lists: the lists gojob's reliable fetch registers (as
//     many jobs as the processes run).
//
// A job these miss (a custom retry delay, a job killed by hand, an
// unregistered in-progress list of a Ruby fetcher) gets its first strike;
// before a second strike kills it, the candidates of the page are searched
// by streaming the queues and sets (wire.FindIn*), which costs the size of
// Redis once per page that has candidates, as the lookups did before.

// windowSlack widens every window around a base.
const windowSlack = 2 * time.Second

// setWindowLimit is the page of members one read of a window returns.
const setWindowLimit = 500

// lookupRow is a row with what its windows need.
type lookupRow struct {
	rw     *row
	base   time.Time
	count  int  // the retry count of its next retry
	failed bool // the server middleware recorded an error on the row
}

func (r *Reconciler) lookupRow(rw *row) *lookupRow {
	lr := &lookupRow{rw: rw, base: rw.AssumeDeadAt.Add(-r.ext(rw))}
	item := []byte(rw.ItemJSON)
	if c, ok := retryCount(item); ok {
		lr.count = c + 1
	}
	lr.failed = bytes.Contains(item, []byte(`"error_class":`))
	return lr
}

// retryCount reads the item's top-level retry_count without parsing the
// whole item (a nested one in the args could only widen the window).
func retryCount(item []byte) (int, bool) {
	i := bytes.Index(item, []byte(`"retry_count":`))
	if i < 0 {
		return 0, false
	}
	rest := bytes.TrimLeft(item[i+len(`"retry_count":`):], " ")
	end := bytes.IndexAny(rest, ",} ")
	if end < 0 {
		return 0, false
	}
	n, err := strconv.Atoi(string(rest[:end]))
	return n, err == nil && n >= 0
}

type window struct{ lo, hi time.Time }

// exactWindow is the base itself (within the databases' microseconds and
// a score's float): where a scheduled push or an earlier pass put the
// entry.
func exactWindow(l *lookupRow) window {
	return window{l.base.Add(-time.Millisecond), l.base.Add(time.Millisecond)}
}

func retryWindow(l *lookupRow) window {
	c := float64(l.count)
	maxDelay := time.Duration(math.Pow(c, 4)+15+10*(c+1)) * time.Second
	return window{l.base.Add(-windowSlack), l.base.Add(maxDelay + windowSlack)}
}

func deadWindow(l *lookupRow) window {
	return window{l.base.Add(-windowSlack), l.base.Add(5 * windowSlack)}
}

// findInWindows reads the sorted set key over the page's windows and
// returns the wanted jids found, with their members. Overlapping windows
// are merged first, so a member is read once per page however many rows'
// windows hold it: a page reads at most the set, and usually far less.
// Each merged window is read in pages of setWindowLimit members, all
// windows' pages in one pipeline per round, until its rows are found or
// it is exhausted.
func findInWindows(ctx context.Context, conn redis.Conn, key string, rows []*lookupRow, win func(*lookupRow) window,
	want map[string]bool) (map[string]wire.SetMember, error) {
	found := map[string]wire.SetMember{}
	spans := mergeWindows(rows, win)
	for round := 0; len(spans) > 0; round++ {
		for _, sp := range spans {
			if err := conn.Send("ZRANGEBYSCORE", key, wire.Score(sp.lo), wire.Score(sp.hi), "WITHSCORES", "LIMIT", round*setWindowLimit, setWindowLimit); err != nil {
				return nil, fmt.Errorf("durable: look up %s: %w", key, err)
			}
		}
		if err := conn.Flush(); err != nil {
			return nil, fmt.Errorf("durable: look up %s: %w", key, err)
		}
		var firstErr error
		var more []*span
		for _, sp := range spans {
			vals, err := redis.ByteSlices(redis.ReceiveContext(conn, ctx))
			if err != nil {
				if firstErr == nil {
					firstErr = fmt.Errorf("durable: look up %s: %w", key, err)
				}
				continue
			}
			for i := 0; i+1 < len(vals); i += 2 {
				jid, ok := wire.MemberJID(vals[i], want)
				if !ok {
					continue
				}
				if _, seen := found[jid]; seen {
					continue
				}
				score, err := wire.ParseScore(string(vals[i+1]))
				if err != nil {
					continue
				}
				found[jid] = wire.SetMember{Value: vals[i], Score: score}
			}
			if len(vals) == 2*setWindowLimit && !sp.allFound(found) {
				more = append(more, sp)
			}
		}
		if firstErr != nil {
			return found, firstErr
		}
		spans = more
	}
	return found, nil
}

// span is a union of overlapping windows and the rows they belong to.
type span struct {
	lo, hi time.Time
	jids   []string
}

func (sp *span) allFound(found map[string]wire.SetMember) bool {
	for _, jid := range sp.jids {
		if _, ok := found[jid]; !ok {
			return false
		}
	}
	return true
}

func mergeWindows(rows []*lookupRow, win func(*lookupRow) window) []*span {
	type rw struct {
		w   window
		jid string
	}
	ws := make([]rw, len(rows))
	for i, l := range rows {
		ws[i] = rw{win(l), l.rw.JobID}
	}
	slices.SortFunc(ws, func(a, b rw) int { return a.w.lo.Compare(b.w.lo) })
	var out []*span
	for _, w := range ws {
		if n := len(out); n > 0 && !w.w.lo.After(out[n-1].hi) {
			last := out[n-1]
			if w.w.hi.After(last.hi) {
				last.hi = w.w.hi
			}
			last.jids = append(last.jids, w.jid)
			continue
		}
		out = append(out, &span{lo: w.w.lo, hi: w.w.hi, jids: []string{w.jid}})
	}
	return out
}

// findInQueueHead reads a queue from its pop end (the oldest jobs) in
// chunks and stops once a chunk's newest job was pushed after until, when
// every wanted jid is found, or at the end of the list. It returns the
// wanted jids found.
func findInQueueHead(ctx context.Context, conn redis.Conn, queue string, want map[string]bool, until time.Time) (map[string]bool, error) {
	found := map[string]bool{}
	key := wire.QueueKey(queue)
	const chunk = 1000
	for end := int64(-1); len(found) < len(want); end -= chunk {
		vals, err := redis.ByteSlices(redis.DoContext(conn, ctx, "LRANGE", key, end-chunk+1, end))
		if err != nil {
			return nil, fmt.Errorf("durable: read queue %s: %w", queue, err)
		}
		if len(vals) == 0 {
			break
		}
		for _, v := range vals {
			if jid, ok := wire.MemberJID(v, want); ok {
				found[jid] = true
			}
		}
		// vals[0] is the chunk's newest job.
		if t, ok := enqueuedAt(vals[0]); ok && t.After(until) {
			break
		}
		if len(vals) < chunk {
			break
		}
	}
	return found, nil
}

// enqueuedAt reads a payload's top-level enqueued_at (epoch seconds, or
// milliseconds for Sidekiq 8) without parsing the whole payload.
func enqueuedAt(payload []byte) (time.Time, bool) {
	i := bytes.LastIndex(payload, []byte(`"enqueued_at":`))
	if i < 0 {
		return time.Time{}, false
	}
	rest := bytes.TrimLeft(payload[i+len(`"enqueued_at":`):], " ")
	end := bytes.IndexAny(rest, ",} ")
	if end < 0 {
		return time.Time{}, false
	}
	f, err := strconv.ParseFloat(string(rest[:end]), 64)
	if err != nil {
		return time.Time{}, false
	}
	if f > 1e11 {
		f /= 1000 // milliseconds
	}
	return wire.FromEpochSeconds(f), true
}

// findInRegisteredLists looks for the wanted jids in the in-progress lists
// gojob's reliable fetch registers (wire.KeyWorkingLists): one SMEMBERS,
// then the lists in one pipeline.
func findInRegisteredLists(ctx context.Context, conn redis.Conn, want map[string]bool) (map[string]bool, error) {
	found := map[string]bool{}
	lists, err := redis.Strings(redis.DoContext(conn, ctx, "SMEMBERS", wire.KeyWorkingLists))
	if err != nil {
		return nil, fmt.Errorf("durable: read %s: %w", wire.KeyWorkingLists, err)
	}
	if len(lists) == 0 {
		return found, nil
	}
	for _, l := range lists {
		if err := conn.Send("LRANGE", l, 0, -1); err != nil {
			return nil, err
		}
	}
	replies, err := redisreply.Pipeline(ctx, conn)
	if err != nil {
		return nil, fmt.Errorf("durable: read in-progress lists: %w", err)
	}
	for _, r := range replies {
		vals, _ := redis.ByteSlices(r, nil)
		for _, v := range vals {
			if jid, ok := wire.MemberJID(v, want); ok {
				found[jid] = true
			}
		}
	}
	return found, nil
}
