package sidekiq

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// Unique jobs, with the options Sidekiq Enterprise documents: a job with
// "unique_for" (seconds) is pushed only if no job of the same class, queue
// and arguments holds its lock; the lock lasts unique_for (plus the delay
// of a scheduled job) and is released when the job starts
// ("unique_until": "start") or succeeds (the default), or when it goes to
// the dead set or is discarded. A retry keeps it. docs/unique-jobs.md.

var (
	//go:embed lua/unique_push.lua
	uniquePushSrc    string
	uniquePushScript = redis.NewScript(3, uniquePushSrc)
	//go:embed lua/unique_release.lua
	uniqueReleaseSrc    string
	uniqueReleaseScript = redis.NewScript(1, uniqueReleaseSrc)
)

// uniqueFor reads the job's unique_for: ok is false when the job has none.
func uniqueFor(j *wire.Job) (time.Duration, bool, error) {
	v, ok := j.Get("unique_for")
	if !ok || v.Kind() == rubyjson.Null {
		return 0, false, nil
	}
	f, isNum := v.Float()
	if !isNum || f <= 0 {
		return 0, false, fmt.Errorf("sidekiq: unique_for must be a positive number of seconds, got %s", v.Encode())
	}
	if u, ok := j.Get("unique_until"); ok && u.Kind() != rubyjson.Null {
		s, _ := u.Str()
		if s != "start" && s != "success" {
			return 0, false, fmt.Errorf(`sidekiq: unique_until must be "start" or "success", got %s`, u.Encode())
		}
	}
	return time.Duration(f * float64(time.Second)), true, nil
}

// uniqueUntilStart reports whether the job's lock goes at its start.
func uniqueUntilStart(j *wire.Job) bool {
	v, ok := j.Get("unique_until")
	if !ok {
		return false
	}
	s, _ := v.Str()
	return s == "start"
}

// pushUnique writes payload (to its queue, or to the schedule set when at
// is not zero) if it takes the job's lock; it reports whether it pushed.
func pushUnique(ctx context.Context, conn redis.Conn, j *wire.Job, ttl time.Duration, payload []byte, at, now time.Time) (bool, error) {
	target, queue, score := contract.QueueKey(j.Queue()), j.Queue(), ""
	if !at.IsZero() {
		target, queue, score = contract.KeySchedule, "", contract.Score(at)
		ttl += at.Sub(now)
	}
	n, err := redis.Int(uniquePushScript.DoContext(ctx, conn, contract.UniqueKey(j), target, contract.KeyQueues,
		j.JID(), max(ttl.Milliseconds(), 1), payload, queue, score))
	if err != nil {
		return false, fmt.Errorf("sidekiq: push %s: %w", j.JID(), err)
	}
	return n == 1, nil
}

// releaseUnique drops the job's lock if the job holds it. A failure is
// logged: the lock then expires after unique_for.
func (p *processor) releaseUnique(j *wire.Job) {
	if _, ok, err := uniqueFor(j); !ok || err != nil {
		return
	}
	err := p.writes.Do(func(conn redis.Conn) error {
		_, err := uniqueReleaseScript.DoContext(p.writes.Ctx, conn, contract.UniqueKey(j), j.JID())
		return err
	})
	if err != nil {
		p.log.Warn().Err(err).Str("component", "unique").Str("jid", j.JID()).
			Msg("could not release the unique lock; it expires after unique_for")
	}
}
