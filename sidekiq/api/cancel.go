package api

import (
	"context"
	"errors"
	"fmt"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/contract"
)

// CancelResult reports a Cancel.
type CancelResult struct {
	// From is where the job was: "queue:<name>", "schedule" or "retry"
	// (removed), "running" (its process was asked to cancel it), or ""
	// when it was found nowhere.
	From string
}

// Cancel cancels the job jid (docs/job-control.md). A job waiting in a
// queue, the schedule set or the retry set is removed. Otherwise Cancel
// records the request in gojob-cancel:<jid> for a day and publishes the
// jid on gojob-cancel: the gojob process that runs the job (package
// jobctl) cancels its context, and the job ends in the dead set as
// Gojob::Cancelled, not retried. In the same step it cancels the job as
// Sidekiq's Client#cancel! does (the field "cancelled" of it-<jid>), so
// that a Ruby Sidekiq 7.3+ process running it as an iterable job stops it
// at its next state flush. The request is recorded also when the job is
// found nowhere (it may be between its queue and its process's work
// entry); Cancel then returns an error wrapping ErrJobNotFound. Other
// jobs running in Ruby Sidekiq processes are not stopped.
func (a *API) Cancel(ctx context.Context, jid string) (*CancelResult, error) {
	if jid == "" {
		return nil, errors.New("sidekiq: cancel: jid is required")
	}
	queues, err := a.Queues(ctx)
	if err != nil {
		return nil, err
	}
	for _, q := range queues {
		rec, err := q.FindJob(ctx, jid)
		if errors.Is(err, ErrJobNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if ok, err := q.DeleteJob(ctx, rec.Value); err != nil {
			return nil, err
		} else if ok {
			return &CancelResult{From: "queue:" + q.Name()}, nil
		}
	}
	for _, s := range []*JobSet{a.ScheduledSet(), a.RetrySet()} {
		en, err := s.FindJob(ctx, jid)
		if errors.Is(err, ErrJobNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if ok, err := en.Delete(ctx); err != nil {
			return nil, err
		} else if ok {
			return &CancelResult{From: s.Name()}, nil
		}
	}
	res := &CancelResult{}
	work, err := a.WorkSet(ctx)
	if err != nil {
		return nil, err
	}
	for _, w := range work {
		if w.Payload != nil && w.Payload.JID() == jid {
			res.From = "running"
		}
	}
	conn, err := a.conn(ctx, "cancel")
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	now := a.clock.Now().Unix()
	conn.Send("MULTI")
	conn.Send("SET", contract.CancelKey(jid), now, "EX", contract.CancelTTL)
	a.sendIterationCancel(conn, jid, now)
	conn.Send("PUBLISH", contract.CancelChannel, jid)
	if _, err := redis.DoContext(conn, ctx, "EXEC"); err != nil {
		return nil, fmt.Errorf("sidekiq: cancel %s: %w", jid, err)
	}
	if res.From == "" {
		return res, fmt.Errorf("sidekiq: cancel %s: not in a queue, a set or a process's work (the request is kept for a day): %w", jid, ErrJobNotFound)
	}
	return res, nil
}

// expireUnlessSet is EXPIRE … NX (Redis 7.0+) for any Redis: the expiry is
// set only when the key has none.
const expireUnlessSet = `if redis.call('TTL', KEYS[1]) == -1 then return redis.call('EXPIRE', KEYS[1], ARGV[1]) end return 0`

// sendIterationCancel queues the commands of Sidekiq's Client#cancel!
// (lib/sidekiq/client.rb, 7.3.10 and 8.1.7): "cancelled" set to the epoch
// seconds unless a cancel set it already (HSETNX: the first time stays),
// and the key's 30-day expiry, which 7.x sets at every cancel (EXPIRE) and
// 8.x only when the key has none (EXPIRE NX), so a running iterable job's
// state keeps its own.
func (a *API) sendIterationCancel(conn redis.Conn, jid string, now int64) {
	key := contract.IterationKey(jid)
	conn.Send("HSETNX", key, contract.IterationCancelled, now)
	if a.version.AtLeast(8, 0, 0) {
		conn.Send("EVAL", expireUnlessSet, 1, key, contract.IterationTTL)
	} else {
		conn.Send("EXPIRE", key, contract.IterationTTL)
	}
}
