// Package redisfind finds jobs by jid in Redis with reads aimed at where
// each should be: score windows of the sorted sets, the pop end of a
// queue, the in-progress lists gojob's reliable fetch registers, the work
// hashes of live processes. The durable reconciler chooses the places
// (durable/lookup.go); this package reads them.
package redisfind

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/redisreply"
	"github.com/gojob/gojob/sidekiq/api"
)

// setWindowLimit is the page of members one read of a window returns.
const setWindowLimit = 500

// Window is a score range of a sorted set where JID is looked for.
type Window struct {
	Lo, Hi time.Time
	JID    string
}

// InWindows reads the sorted set key over the windows and returns the
// wanted jids found, with their members. Overlapping windows are merged
// first, so a member is read once however many windows hold it: a call
// reads at most the set, and usually far less. Each merged window is read
// in pages of setWindowLimit members, all windows' pages in one pipeline
// per round, until its jids are found or it is exhausted. A page starts at
// the score where the last one ended, past the members of that score it
// read (span.next): with the offset of the page instead, Redis would walk
// every member before it again, and a window of M members would cost
// M²/(2·setWindowLimit) steps.
func InWindows(ctx context.Context, conn redis.Conn, key string, wins []Window, want map[string]bool) (map[string]contract.SetMember, error) {
	found := map[string]contract.SetMember{}
	spans := mergeWindows(wins)
	for len(spans) > 0 {
		for _, sp := range spans {
			if sp.from == "" {
				sp.from = contract.Score(sp.lo)
			}
			if err := conn.Send("ZRANGEBYSCORE", key, sp.from, contract.Score(sp.hi), "WITHSCORES", "LIMIT", sp.skip, setWindowLimit); err != nil {
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
				jid, ok := contract.MemberJID(vals[i], want)
				if !ok {
					continue
				}
				if _, seen := found[jid]; seen {
					continue
				}
				score, err := contract.ParseScore(string(vals[i+1]))
				if err != nil {
					continue
				}
				found[jid] = contract.SetMember{Value: vals[i], Score: score}
			}
			if len(vals) == 2*setWindowLimit && !sp.allFound(found) {
				sp.next(vals)
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
	// from is the score the next page starts at (inclusive; "" for lo),
	// and skip how many members of that score the pages before it read.
	from string
	skip int
}

// next sets where the page after page (members and scores, as
// ZRANGEBYSCORE … WITHSCORES returns them) starts: at its last score,
// past the members of that score read so far. A score is passed back to
// Redis as Redis wrote it, so that it compares equal to the members'.
func (sp *span) next(page [][]byte) {
	last := page[len(page)-1]
	tied := 0
	for i := len(page) - 1; i > 0 && bytes.Equal(page[i], last); i -= 2 {
		tied++
	}
	if tied == len(page)/2 && sameScore(sp.from, last) {
		sp.skip += tied // the whole page had the score the page began at
		return
	}
	sp.from, sp.skip = string(last), tied
}

// sameScore reports whether two scores, as text, are the same number.
func sameScore(a string, b []byte) bool {
	x, err1 := strconv.ParseFloat(a, 64)
	y, err2 := strconv.ParseFloat(string(b), 64)
	return err1 == nil && err2 == nil && x == y
}

func (sp *span) allFound(found map[string]contract.SetMember) bool {
	for _, jid := range sp.jids {
		if _, ok := found[jid]; !ok {
			return false
		}
	}
	return true
}

func mergeWindows(wins []Window) []*span {
	ws := slices.Clone(wins)
	slices.SortFunc(ws, func(a, b Window) int { return a.Lo.Compare(b.Lo) })
	var out []*span
	for _, w := range ws {
		if n := len(out); n > 0 && !w.Lo.After(out[n-1].hi) {
			last := out[n-1]
			if w.Hi.After(last.hi) {
				last.hi = w.Hi
			}
			last.jids = append(last.jids, w.JID)
			continue
		}
		out = append(out, &span{lo: w.Lo, hi: w.Hi, jids: []string{w.JID}})
	}
	return out
}

// InQueueHead reads a queue from its pop end (the oldest jobs) in
// chunks and stops once a chunk's newest job was pushed after until, when
// every wanted jid is found, or at the end of the list. It returns the
// wanted jids found.
func InQueueHead(ctx context.Context, conn redis.Conn, queue string, want map[string]bool, until time.Time) (map[string]bool, error) {
	found := map[string]bool{}
	key := contract.QueueKey(queue)
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
			if jid, ok := contract.MemberJID(v, want); ok {
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
	return contract.FromEpochSeconds(f), true
}

// InRegisteredLists looks for the wanted jids in the in-progress lists
// gojob's reliable fetch registers (contract.KeyWorkingLists): one SMEMBERS,
// then the lists in one pipeline.
func InRegisteredLists(ctx context.Context, conn redis.Conn, want map[string]bool) (map[string]bool, error) {
	found := map[string]bool{}
	lists, err := redis.Strings(redis.DoContext(conn, ctx, "SMEMBERS", contract.KeyWorkingLists))
	if err != nil {
		return nil, fmt.Errorf("durable: read %s: %w", contract.KeyWorkingLists, err)
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
			if jid, ok := contract.MemberJID(v, want); ok {
				found[jid] = true
			}
		}
	}
	return found, nil
}

// Running returns the jids in the work hashes of live processes (Ruby
// and gojob, any version).
func Running(ctx context.Context, admin *api.API) (map[string]bool, error) {
	work, err := admin.WorkSet(ctx)
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
