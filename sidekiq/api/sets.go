package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/internal/redisx"
	"github.com/gojob/gojob/sidekiq/wire"
	"github.com/gomodule/redigo/redis"
)

// JobSet is one of the sorted sets retry, schedule or dead (Ruby's
// Sidekiq::JobSet and its RetrySet, ScheduledSet and DeadSet). The few
// actions that apply to some sets only (Kill of a payload, KillAll) check
// the set. The handle holds no state.
type JobSet struct {
	api  *API
	name string
}

// RetrySet returns the retry set.
func (a *API) RetrySet() *JobSet { return &JobSet{api: a, name: contract.KeyRetry} }

// ScheduledSet returns the schedule set.
func (a *API) ScheduledSet() *JobSet { return &JobSet{api: a, name: contract.KeySchedule} }

// DeadSet returns the dead set (the morgue).
func (a *API) DeadSet() *JobSet { return &JobSet{api: a, name: contract.KeyDead} }

// Name returns the set's key.
func (s *JobSet) Name() string { return s.name }

// SortedEntry is one member of a JobSet (Ruby's Sidekiq::SortedEntry): its
// score, its exact bytes and the parsed job.
type SortedEntry struct {
	*JobRecord
	// Score is the member's score: the time to run (retry, schedule) or of
	// death (dead), epoch seconds.
	Score float64

	set  *JobSet
	iter *setIteration
}

// setIteration counts the entries an Each deleted, to shift its pages as
// Ruby's JobSet#each does through @_size.
type setIteration struct{ deleted int64 }

func (s *JobSet) entry(value []byte, score float64) *SortedEntry {
	return &SortedEntry{JobRecord: newJobRecord(value, ""), Score: score, set: s}
}

// At returns the score as a time.
func (e *SortedEntry) At() time.Time { return contract.FromEpochSeconds(e.Score) }

// Size returns ZCARD.
func (s *JobSet) Size(ctx context.Context) (int64, error) {
	conn, err := s.api.conn(ctx, "set size")
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	return s.size(ctx, conn)
}

func (s *JobSet) size(ctx context.Context, conn redis.Conn) (int64, error) {
	n, err := redis.Int64(redis.DoContext(conn, ctx, "ZCARD", s.name))
	if err != nil {
		return 0, fmt.Errorf("sidekiq: size of %s: %w", s.name, err)
	}
	return n, nil
}

// page is Page without a filter (see there for the commands). It returns
// the entries with the set's size when they were read.
func (s *JobSet) page(ctx context.Context, offset, limit int) ([]*SortedEntry, int64, error) {
	off, limit, err := pageBounds(offset, limit)
	if err != nil {
		return nil, 0, err
	}
	asc := s.name != contract.KeyDead
	conn, err := s.api.conn(ctx, "set page")
	if err != nil {
		return nil, 0, err
	}
	defer conn.Close()
	replies, err := redisx.ExecMulti(ctx, conn, func(c redis.Conn) {
		c.Send("ZCARD", s.name)
		if asc {
			c.Send("ZRANGE", s.name, off, off+limit-1, "WITHSCORES")
		} else {
			c.Send("ZRANGE", s.name, -(off + limit), -(off + 1), "WITHSCORES")
		}
	})
	if err != nil {
		return nil, 0, fmt.Errorf("sidekiq: page of %s: %w", s.name, err)
	}
	size, err := redis.Int64(replies[0], nil)
	if err != nil {
		return nil, 0, fmt.Errorf("sidekiq: page of %s: %w", s.name, err)
	}
	entries, err := s.withScores(replies[1], nil)
	if err != nil {
		return nil, 0, fmt.Errorf("sidekiq: page of %s: %w", s.name, err)
	}
	if !asc {
		slices.Reverse(entries)
	}
	return entries, size, nil
}

// withScores turns a WITHSCORES reply into entries, in reply order.
func (s *JobSet) withScores(reply any, err error) ([]*SortedEntry, error) {
	vals, err := redis.ByteSlices(reply, err)
	if err != nil {
		return nil, err
	}
	if len(vals)%2 != 0 {
		return nil, fmt.Errorf("odd WITHSCORES reply of %d elements", len(vals))
	}
	out := make([]*SortedEntry, 0, len(vals)/2)
	for i := 0; i < len(vals); i += 2 {
		score, err := contract.ParseScore(string(vals[i+1]))
		if err != nil {
			return nil, fmt.Errorf("bad score %q: %w", vals[i+1], err)
		}
		out = append(out, s.entry(vals[i], score))
	}
	return out, nil
}

// Each calls fn for every entry, highest score first, exactly as Ruby's
// JobSet#each pages: ZRANGE <set> start start+49 WITHSCORES with start =
// -50, -100, … shifted by the number of entries deleted through the
// yielded entries' Delete, each page reversed, until a page is empty.
// An error from fn stops the iteration and is returned.
func (s *JobSet) Each(ctx context.Context, fn func(*SortedEntry) error) error {
	const pageSize = 50
	it := &setIteration{}
	for page := int64(-1); ; page-- {
		start := page*pageSize + it.deleted
		entries, err := s.rangePage(ctx, start, start+pageSize-1)
		if err != nil {
			return err
		}
		if len(entries) == 0 {
			return nil
		}
		for i := len(entries) - 1; i >= 0; i-- {
			entries[i].iter = it
			if err := fn(entries[i]); err != nil {
				return err
			}
		}
	}
}

// rangePage reads ZRANGE <set> start stop WITHSCORES on a connection of
// its own, so fn may use the pool freely between pages.
func (s *JobSet) rangePage(ctx context.Context, start, stop int64) ([]*SortedEntry, error) {
	conn, err := s.api.conn(ctx, "iterate "+s.name)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	entries, err := s.withScores(redis.DoContext(conn, ctx, "ZRANGE", s.name, start, stop, "WITHSCORES"))
	if err != nil {
		return nil, fmt.Errorf("sidekiq: iterate %s: %w", s.name, err)
	}
	return entries, nil
}

// Scan calls fn for each entry whose raw JSON matches the ZSCAN MATCH
// pattern match, wrapped as "*match*" unless it contains a "*" (Ruby's
// SortedSet#scan), in ZSCAN order (COUNT 100); an entry may be seen twice
// if the set changes meanwhile. An error from fn stops the scan and is
// returned.
func (s *JobSet) Scan(ctx context.Context, match string, fn func(*SortedEntry) error) error {
	const count = 100
	if !strings.Contains(match, "*") {
		match = "*" + match + "*"
	}
	cursor := "0"
	for {
		conn, err := s.api.conn(ctx, "scan "+s.name)
		if err != nil {
			return err
		}
		vals, err := redis.Values(redis.DoContext(conn, ctx, "ZSCAN", s.name, cursor, "MATCH", match, "COUNT", count))
		conn.Close()
		if err != nil {
			return fmt.Errorf("sidekiq: scan %s: %w", s.name, err)
		}
		if len(vals) != 2 {
			return fmt.Errorf("sidekiq: scan %s: unexpected reply of %d elements", s.name, len(vals))
		}
		if cursor, err = redis.String(vals[0], nil); err != nil {
			return fmt.Errorf("sidekiq: scan %s: %w", s.name, err)
		}
		entries, err := s.withScores(vals[1], nil)
		if err != nil {
			return fmt.Errorf("sidekiq: scan %s: %w", s.name, err)
		}
		for _, e := range entries {
			if err := fn(e); err != nil {
				return err
			}
		}
		if cursor == "0" {
			return nil
		}
	}
}

// FindJob returns the entry whose payload has jid (ZSCAN MATCH *jid* plus
// a parse check, as Ruby's JobSet#find_job; contract.FindInSet), or an error
// wrapping ErrJobNotFound.
func (s *JobSet) FindJob(ctx context.Context, jid string) (*SortedEntry, error) {
	conn, err := s.api.conn(ctx, "find job")
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	found, err := contract.FindInSet(ctx, conn, s.name, []string{jid})
	if err != nil {
		return nil, err
	}
	m, ok := found[jid]
	if !ok {
		return nil, fmt.Errorf("sidekiq: job %s in %s: %w", jid, s.name, ErrJobNotFound)
	}
	return s.entry(m.Value, m.Score), nil
}

// Fetch returns the entries with this score (ZRANGEBYSCORE <set> score
// score WITHSCORES), only those with jid unless it is "" (Ruby's
// JobSet#fetch), as the Web UI loads a "<score>-<jid>" row.
func (s *JobSet) Fetch(ctx context.Context, score float64, jid string) ([]*SortedEntry, error) {
	conn, err := s.api.conn(ctx, "fetch")
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	sc := contract.FormatScore(score)
	entries, err := s.withScores(redis.DoContext(conn, ctx, "ZRANGEBYSCORE", s.name, sc, sc, "WITHSCORES"))
	if err != nil {
		return nil, fmt.Errorf("sidekiq: fetch from %s: %w", s.name, err)
	}
	if jid == "" {
		return entries, nil
	}
	out := entries[:0]
	for _, e := range entries {
		if e.JID() == jid {
			out = append(out, e)
		}
	}
	return out, nil
}

// Schedule adds job with score at (ZADD <set> <at> <json>), as Ruby's
// JobSet#schedule. The job's bytes are stored as Bytes returns them.
func (s *JobSet) Schedule(ctx context.Context, at time.Time, job *wire.Job) error {
	conn, err := s.api.conn(ctx, "schedule")
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := redis.DoContext(conn, ctx, "ZADD", s.name, contract.Score(at), job.Bytes()); err != nil {
		return fmt.Errorf("sidekiq: add %s to %s: %w", job.JID(), s.name, err)
	}
	return nil
}

// deleteValue removes one member by its exact bytes (ZREM). It reports
// whether it was there.
func (s *JobSet) deleteValue(ctx context.Context, value []byte) (bool, error) {
	conn, err := s.api.conn(ctx, "delete")
	if err != nil {
		return false, err
	}
	defer conn.Close()
	n, err := redis.Int(redis.DoContext(conn, ctx, "ZREM", s.name, value))
	if err != nil {
		return false, fmt.Errorf("sidekiq: delete from %s: %w", s.name, err)
	}
	return n > 0, nil
}

// Clear deletes the whole set (UNLINK), the Web UI's "Delete All".
func (s *JobSet) Clear(ctx context.Context) error {
	conn, err := s.api.conn(ctx, "clear")
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := redis.DoContext(conn, ctx, "UNLINK", s.name); err != nil {
		return fmt.Errorf("sidekiq: clear %s: %w", s.name, err)
	}
	return nil
}

// Delete removes this entry by its exact bytes (ZREM). It reports whether
// it was still there.
func (e *SortedEntry) Delete(ctx context.Context) (bool, error) {
	ok, err := e.set.deleteValue(ctx, e.Value)
	if ok && e.iter != nil {
		e.iter.deleted++
	}
	return ok, err
}

// Retry moves the entry to its queue now: remove_job, then a push through
// the API's Client (defaults, client middleware, a new enqueued_at, SADD
// queues + LPUSH). An entry of the retry or dead set has its retry_count,
// when present, lowered by 1 first (Ruby's SortedEntry#retry, the "Retry
// Now" button); an entry of the schedule set is pushed as stored (Ruby's
// SortedEntry#add_to_queue, the scheduled page's "Add to queue"). The
// result is the client's.
func (e *SortedEntry) Retry(ctx context.Context) (*sidekiq.PushResult, error) {
	decrement := e.set.name != contract.KeySchedule
	if e.Job == nil {
		return nil, fmt.Errorf("sidekiq: requeue entry of %s: %w", e.set.name, ErrUnparsableJob)
	}
	conn, err := e.set.api.conn(ctx, "requeue")
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	var res *sidekiq.PushResult
	err = e.removeJob(ctx, conn, func(msg []byte) error {
		job, err := wire.ParseJob(msg)
		if err != nil {
			return fmt.Errorf("sidekiq: requeue entry of %s: %w", e.set.name, ErrUnparsableJob)
		}
		if decrement {
			if n, ok := job.RetryCount(); ok {
				contract.SetRetryCount(job, n-1)
			}
		}
		res, err = e.set.api.client.Push(ctx, job, &sidekiq.PushOpts{Repush: true})
		return err
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// Kill moves the entry to the dead set (Ruby's SortedEntry#kill):
// remove_job, then the dead set's Kill with the exact stored bytes. It
// returns how many dead-set entries the set's limits dropped to make room
// (API.DeadLimits): the oldest, or this one when the limits leave no room
// at all.
func (e *SortedEntry) Kill(ctx context.Context, opts *KillOpts) (int64, error) {
	conn, err := e.set.api.conn(ctx, "kill")
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	dead := e.set.api.DeadSet()
	var dropped int64
	err = e.removeJob(ctx, conn, func(msg []byte) error {
		var err error
		dropped, err = dead.kill(ctx, conn, msg, opts)
		return err
	})
	return dropped, err
}

// Reschedule moves the entry to score at as Ruby's SortedEntry#reschedule
// does: ZINCRBY <set> (at - score) <re-encoded job>. The re-encoding is
// Ruby's JSON.generate of the parsed payload, so for a member that is not
// already in Ruby's canonical form this adds a second member with the
// difference as its score and leaves the original (the
// re-serialization hazard of docs/sidekiq-wire.md#json-generation; Ruby
// does the same).
func (e *SortedEntry) Reschedule(ctx context.Context, at time.Time) error {
	if e.Job == nil {
		return fmt.Errorf("sidekiq: reschedule entry of %s: %w", e.set.name, ErrUnparsableJob)
	}
	conn, err := e.set.api.conn(ctx, "reschedule")
	if err != nil {
		return err
	}
	defer conn.Close()
	delta := contract.EpochSeconds(at) - e.Score
	if _, err := redis.DoContext(conn, ctx, "ZINCRBY", e.set.name, contract.FormatScore(delta), e.Job.Clone().Bytes()); err != nil {
		return fmt.Errorf("sidekiq: reschedule %s in %s: %w", e.JID(), e.set.name, err)
	}
	return nil
}

// removeJob is Ruby's SortedEntry#remove_job: MULTI ZRANGEBYSCORE <set> s s;
// ZREMRANGEBYSCORE <set> s s; EXEC. A single member at that score is
// handed to use whatever it is (as in Ruby); with several, the one with
// this entry's jid (its exact bytes for an unparsable entry) is, and the
// others are put back with ZADD in one MULTI. Where Ruby would lose jobs,
// gojob puts them back: the member when use fails, and further members with
// the same jid. It returns an error wrapping ErrJobNotFound when nothing
// matched.
func (e *SortedEntry) removeJob(ctx context.Context, conn redis.Conn, use func(msg []byte) error) error {
	s := e.set
	score := contract.FormatScore(e.Score)
	replies, err := redisx.ExecMulti(ctx, conn, func(c redis.Conn) {
		c.Send("ZRANGEBYSCORE", s.name, score, score)
		c.Send("ZREMRANGEBYSCORE", s.name, score, score)
	})
	if err != nil {
		return fmt.Errorf("sidekiq: remove %s from %s: %w", e.JID(), s.name, err)
	}
	members, err := redis.ByteSlices(replies[0], nil)
	if err != nil {
		return fmt.Errorf("sidekiq: remove %s from %s: %w", e.JID(), s.name, err)
	}
	var msg []byte
	var putBack [][]byte
	if len(members) == 1 {
		msg = members[0]
	} else {
		for _, m := range members {
			if msg == nil && e.matches(m) {
				msg = m
			} else {
				putBack = append(putBack, m)
			}
		}
	}
	var useErr error
	if msg == nil {
		useErr = fmt.Errorf("sidekiq: remove %s from %s: %w", e.JID(), s.name, ErrJobNotFound)
	} else if useErr = use(msg); useErr != nil {
		putBack = append(putBack, msg)
	}
	if len(putBack) > 0 {
		_, err := redisx.ExecMulti(ctx, conn, func(c redis.Conn) {
			for _, m := range putBack {
				c.Send("ZADD", s.name, score, m)
			}
		})
		if err != nil {
			return errors.Join(useErr, fmt.Errorf("sidekiq: put back %d members of %s at %s: %w", len(putBack), s.name, score, err))
		}
	}
	return useErr
}

// matches reports whether member is this entry: by jid (Ruby's
// message.index(jid) plus a parse check), or by exact bytes for an entry
// without one.
func (e *SortedEntry) matches(member []byte) bool {
	jid := e.JID()
	if jid == "" {
		return bytes.Equal(member, e.Value)
	}
	if !bytes.Contains(member, []byte(jid)) {
		return false
	}
	j, err := wire.ParseJob(member)
	return err == nil && j.JID() == jid
}

// RetryAll pushes every entry to its queue now, each through
// SortedEntry.Retry: the Web UI's "Retry All" of the retry and dead sets,
// "Add all to queue" of the schedule set. See JobSet.drain for the exact
// form.
func (s *JobSet) RetryAll(ctx context.Context) (*BulkActionResult, error) {
	return s.drain(ctx, true, func(e *SortedEntry) error { _, err := e.Retry(ctx); return err })
}

// KillAll moves every entry to the dead set (the Web UI's "Kill All" of
// the retry set), calling the death handlers for each unless opts says not
// to. The dead set itself cannot be killed into: it returns an error.
func (s *JobSet) KillAll(ctx context.Context, opts *KillOpts) (*BulkActionResult, error) {
	if s.name == contract.KeyDead {
		return nil, errors.New("sidekiq: kill all: the entries of the dead set are dead already")
	}
	var dropped int64
	res, err := s.drain(ctx, false, func(e *SortedEntry) error {
		n, err := e.Kill(ctx, opts)
		dropped += n
		return err
	})
	if res != nil {
		res.Dropped = dropped
	}
	return res, err
}

// drain is Sidekiq 6.4's set-wide form, `each(&:action) while size > 0`:
// Each's negative-index pages (highest score first), one remove_job and
// push or kill per entry, repeated while the set is not empty, so jobs land
// in their queues in the same order as with Ruby 6.4.1. (7.3.5+ pops with
// ZPOPMIN instead, lowest score first.) For retry and add-to-queue,
// entries whose payload is not a JSON object are left in place (Ruby 6.4
// would remove one and raise); kill moves them unchanged. The loop stops
// when a whole pass moves nothing.
func (s *JobSet) drain(ctx context.Context, needsJob bool, action func(*SortedEntry) error) (*BulkActionResult, error) {
	res := &BulkActionResult{}
	for {
		n, err := s.Size(ctx)
		if err != nil {
			return res, err
		}
		res.Remaining = n
		if n == 0 {
			return res, nil
		}
		moved := 0
		err = s.Each(ctx, func(e *SortedEntry) error {
			if needsJob && e.Job == nil {
				return nil
			}
			if err := action(e); err != nil {
				if errors.Is(err, ErrJobNotFound) {
					res.Gone++
					return nil
				}
				if errors.Is(err, ErrUnparsableJob) {
					return nil
				}
				return err
			}
			moved++
			return nil
		})
		res.Moved += moved
		if err != nil {
			return res, err
		}
		if moved == 0 {
			return res, nil
		}
	}
}
