package api

import (
	"context"
	_ "embed"
	"errors"
	"fmt"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/contract"
)

// Cancel cancels the job jid (docs/job-control.md), found by Locate, and
// returns where it was. A job waiting in a queue, the schedule set or the
// retry set is removed from it; a job "running" has its process asked to
// cancel it; one "orphaned" (in the in-progress list of a gone process)
// is cancelled when it runs again.
// Otherwise Cancel records the request in gojob-cancel:<jid> for a day
// and publishes the jid on gojob-cancel: the gojob process that runs the
// job (package jobctl) cancels its context, and the job ends in the dead
// set as Gojob::Cancelled, not retried. In the same step it cancels the
// job as Sidekiq's Client#cancel! does (the field "cancelled" of
// it-<jid>), so that a Ruby Sidekiq 7.3+ process running it as an
// iterable job stops it at its next state flush. The request is recorded
// also when the job is found nowhere (it may be between two places) or
// in the dead set (it may be retried); Cancel then returns an error
// wrapping ErrJobNotFound, with the dead set's Location in the second
// case and nil in the first. Other jobs running in
// Ruby Sidekiq processes are not stopped.
func (a *API) Cancel(ctx context.Context, jid string) (*Location, error) {
	if jid == "" {
		return nil, errors.New("sidekiq: cancel: jid is required")
	}
	// found is where the job was removed from or signalled in.
	var found, loc *Location
	for range 3 {
		var err error
		loc, err = a.Locate(ctx, jid)
		if err != nil {
			return nil, err
		}
		if loc == nil {
			break
		}
		switch loc.Where {
		case "queue":
			ok, err := a.Queue(loc.Queue).DeleteJob(ctx, loc.Raw)
			if err != nil {
				return nil, err
			}
			if ok {
				return loc, nil
			}
			continue // it left the queue meanwhile: look again
		case "schedule", "retry":
			ok, err := loc.Entry.Delete(ctx)
			if err != nil {
				return nil, err
			}
			if ok {
				return loc, nil
			}
			continue
		case "dead":
			// Nothing to stop; the request below still cancels it should
			// someone retry it within the day.
		default:
			found = loc
		}
		break
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
	if found == nil && loc != nil && loc.Where == "dead" {
		return loc, fmt.Errorf("sidekiq: cancel %s: it is in the dead set (the request is kept for a day in case it is retried): %w", jid, ErrJobNotFound)
	}
	if found == nil {
		return nil, fmt.Errorf("sidekiq: cancel %s: not in a queue, a set, an in-progress list or a process's work (the request is kept for a day): %w", jid, ErrJobNotFound)
	}
	return found, nil
}

// expireUnlessSet is EXPIRE … NX (Redis 7.0+) for any Redis: the expiry is
// set only when the key has none.
var (
	//go:embed lua/expire_unless_set.lua
	expireUnlessSetLua string
	expireUnlessSet    = redis.NewScript(1, expireUnlessSetLua)
)

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
		expireUnlessSet.Send(conn, key, contract.IterationTTL)
	} else {
		conn.Send("EXPIRE", key, contract.IterationTTL)
	}
}
