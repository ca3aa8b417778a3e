package api

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/contract"
)

// bulkChunk is how many entries one read of a bulk action takes.
const bulkChunk = 500

// Bulk applies action to every entry of the set that f selects (nil: every
// entry), one entry at a time as the Web UI's buttons do, and reports what
// happened. action is "retry" (SortedEntry.Retry: the retry and dead sets'
// "Retry now", the schedule set's "Add to queue"), "kill"
// (SortedEntry.Kill, into the dead set: not of the dead set
// itself) or "delete" (SortedEntry.Delete).
//
// It first counts the matches (ZCARD, or Page's scan), then works
// through the set in Page's order (next due first; the dead set newest
// first), reading it by score from where it got to, so entries that others
// remove meanwhile shift nothing and entries that arrive behind that point
// are not reached. Each job is acted on once (a retried job that fails
// again and comes back is not retried twice), and the action stops after
// as many entries as matched when it began, so jobs that keep arriving
// cannot keep it running. An entry gone before the action reached it
// (processed, moved or deleted elsewhere) is counted in Gone; one whose
// payload is not a job stays where it is for "retry" and is counted in
// Left. Any other error stops the action and is returned with the counts
// so far (the result is never nil).
//
// progress, if not nil, is called with the counts once the total is known
// and after each entry; an error from it stops the action and is returned.
// The result's Remaining is not set.
func (s *JobSet) Bulk(ctx context.Context, action string, f *Filter, progress func(*BulkActionResult) error) (*BulkActionResult, error) {
	var act func(*SortedEntry) (int64, error)
	switch action {
	case "retry":
		act = func(e *SortedEntry) (int64, error) { _, err := e.Retry(ctx); return 0, err }
	case "kill":
		if s.name == contract.KeyDead {
			return &BulkActionResult{}, errors.New("sidekiq: kill: the entries of the dead set are dead already")
		}
		act = func(e *SortedEntry) (int64, error) { return e.Kill(ctx, nil) }
	case "delete":
		act = func(e *SortedEntry) (int64, error) {
			ok, err := e.Delete(ctx)
			if err == nil && !ok {
				err = ErrJobNotFound
			}
			return 0, err
		}
	default:
		return &BulkActionResult{}, fmt.Errorf("sidekiq: bulk action %q: want retry, kill or delete", action)
	}
	if progress == nil {
		progress = func(*BulkActionResult) error { return nil }
	}
	m := newMatcher(f)
	res := &BulkActionResult{}
	var err error
	if m.all() {
		res.Total, err = s.Size(ctx)
	} else {
		_, res.Total, err = s.search(ctx, m, 0)
	}
	if err != nil {
		return res, err
	}
	if err := progress(res); err != nil {
		return res, err
	}
	seen := make(map[uint64]struct{}, min(res.Total, 1<<20))
	hs := fnv.New64a()
	var c setCursor
	for res.done() < res.Total {
		entries, err := s.after(ctx, &c)
		if err != nil {
			return res, err
		}
		if len(entries) == 0 {
			return res, nil
		}
		for _, e := range entries {
			if res.done() >= res.Total {
				break
			}
			c.at(e.Score)
			hs.Reset()
			if jid := e.JID(); jid != "" {
				hs.Write([]byte(jid))
			} else {
				hs.Write(e.Value)
			}
			id := hs.Sum64()
			if _, dup := seen[id]; dup || !m.match(e.JobRecord) {
				c.passed++
				continue
			}
			seen[id] = struct{}{}
			dropped, err := act(e)
			res.Dropped += dropped
			switch {
			case err == nil:
				res.Moved++
			case errors.Is(err, ErrJobNotFound):
				res.Gone++
			case errors.Is(err, ErrUnparsableJob):
				res.Left++
				c.passed++
			default:
				return res, fmt.Errorf("sidekiq: %s %s from %s: %w", action, e.JID(), s.name, err)
			}
			if err := progress(res); err != nil {
				return res, err
			}
		}
	}
	return res, nil
}

func (r *BulkActionResult) done() int64 { return int64(r.Moved + r.Gone + r.Left) }

// setCursor is where a pass through a set got to: the score it reached
// and how many entries with that score it passed that are still there.
type setCursor struct {
	started bool
	score   float64
	passed  int
}

func (c *setCursor) at(score float64) {
	if !c.started || score != c.score {
		c.started, c.score, c.passed = true, score, 0
	}
}

// after reads the next entries of a pass in Page's order: from the
// cursor's score (inclusive, the passed ones skipped) on.
func (s *JobSet) after(ctx context.Context, c *setCursor) ([]*SortedEntry, error) {
	conn, err := s.api.conn(ctx, "iterate "+s.name)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	cmd, from, to := "ZRANGEBYSCORE", "-inf", "+inf"
	if s.name == contract.KeyDead {
		cmd, from, to = "ZREVRANGEBYSCORE", "+inf", "-inf"
	}
	if c.started {
		from = contract.FormatScore(c.score)
	}
	entries, err := s.withScores(redis.DoContext(conn, ctx, cmd, s.name, from, to, "WITHSCORES", "LIMIT", c.passed, bulkChunk))
	if err != nil {
		return nil, fmt.Errorf("sidekiq: iterate %s: %w", s.name, err)
	}
	return entries, nil
}
