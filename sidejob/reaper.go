package sidejob

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/sidejobwire"
	"github.com/gojob/gojob/internal/tick"
	"github.com/gojob/gojob/sidekiq/api"
	"github.com/gojob/gojob/sidekiq/rubyjson"
)

// reapParams are the options of reap.
type reapParams struct {
	// MinAge is how long ago a running job must have started (ran_at) to be
	// looked at. Default twice the lock expiration (2 min).
	MinAge time.Duration
}

// reapResult reports one reap.
type reapResult struct {
	// Running counts the jobs found in status running.
	Running int
	// Requeued lists the jobs queued again.
	Requeued []int64
}

// reap finds jobs stuck in running after their worker process died and
// runs them again (the gem has no such reaper; docs/sidejob.md#weakness-3-job-stuck-in-running). A job is stuck
// when its status is running, its job lock is free, its ran_at is older
// than MinAge, and no live Sidekiq process (Ruby or Go; a process whose
// heartbeat key still exists) lists it among its busy jobs. Its status goes
// back to queued (atomically, only if it is still running), a Sidekiq item
// is pushed, and a log entry records it.
func (c *Client) reap(ctx context.Context, p *reapParams) (*reapResult, error) {
	minAge := 2 * c.lockTTL
	if p != nil && p.MinAge > 0 {
		minAge = p.MinAge
	}
	ids, err := redis.Int64s(c.do(ctx, "SMEMBERS", sidejobwire.KeyJobs))
	if err != nil {
		return nil, fmt.Errorf("sidejob: reap: %w", err)
	}
	res := &reapResult{}
	var running []int64
	for start := 0; start < len(ids); start += 1000 {
		chunk := ids[start:min(start+1000, len(ids))]
		cmds := make([]cmd, len(chunk))
		for i, id := range chunk {
			cmds[i] = command("GET", c.job(id).key("status"))
		}
		replies, err := c.pipeline(ctx, cmds...)
		if err != nil {
			return nil, fmt.Errorf("sidejob: reap: %w", err)
		}
		for i, r := range replies {
			if s, _ := redis.String(r, nil); s == statusRunning {
				running = append(running, chunk[i])
			}
		}
	}
	res.Running = len(running)
	if len(running) == 0 {
		return res, nil
	}
	now := c.clock.Now()
	var candidates []int64
	for _, id := range running {
		j := c.job(id)
		replies, err := c.pipeline(ctx, command("EXISTS", j.key("lock")), command("GET", j.key("ran_at")))
		if err != nil {
			return nil, fmt.Errorf("sidejob: reap: %w", err)
		}
		if n, _ := redis.Int(replies[0], nil); n > 0 {
			continue
		}
		if s, _ := redis.String(replies[1], nil); s != "" {
			if t, err := sidejobwire.ParseTimestamp(s); err == nil && now.Sub(t) < minAge {
				continue
			}
		}
		candidates = append(candidates, id)
	}
	if len(candidates) == 0 {
		return res, nil
	}
	admin, err := api.New(&api.Config{Pool: c.pool, Client: c.sk})
	if err != nil {
		return nil, err
	}
	work, err := admin.WorkSet(ctx)
	if err != nil {
		return nil, fmt.Errorf("sidejob: reap: %w", err)
	}
	busy := map[string]bool{}
	for _, w := range work {
		if w.Payload != nil {
			busy[w.Payload.JID()] = true
		}
	}
	for _, id := range candidates {
		if busy[strconv.FormatInt(id, 10)] {
			continue
		}
		j := c.job(id)
		ok, err := j.setStatusIf(ctx, statusQueued, "in", statusRunning)
		if err = ignoreGone(err); err != nil {
			return res, err
		}
		if !ok {
			continue
		}
		if err := j.sidekiqQueue(ctx, time.Time{}); err != nil {
			return res, err
		}
		res.Requeued = append(res.Requeued, id)
		m := rubyjson.NewMap()
		m.Set("message", rubyjson.StringValue("job was left running by a process that is gone; queued again"))
		if err := c.Log(withContext(ctx, "job", id), m); err != nil {
			return res, err
		}
	}
	return res, nil
}

// reapLoop runs reap every interval until ctx ends.
func (rt *jobRuntime) reapLoop(ctx context.Context, interval time.Duration) {
	tick.Every(ctx, interval, func() bool {
		res, err := rt.c.reap(ctx, nil)
		switch {
		case err != nil && ctx.Err() == nil:
			rt.log.Error().Err(err).Str("component", "sidejob-reaper").Msg("reap failed")
		case err == nil && len(res.Requeued) > 0:
			rt.log.Warn().Str("component", "sidejob-reaper").Ints64("jobs", res.Requeued).Msg("requeued jobs left running by a dead process")
		}
		return true
	})
}
