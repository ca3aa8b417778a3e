package sidekiq

import (
	"context"
	"fmt"
	"time"

	"github.com/gomodule/redigo/redis"
)

// morgueLimits are Sidekiq's dead_max_jobs and dead_timeout_in_seconds;
// zero values mean the defaults.
type morgueLimits struct {
	maxJobs int
	timeout time.Duration
}

func (l morgueLimits) orDefault() morgueLimits {
	if l.maxJobs == 0 {
		l.maxJobs = DeadMaxJobs
	}
	if l.timeout == 0 {
		l.timeout = DeadTimeoutInSeconds * time.Second
	}
	return l
}

// morgueParams is one addition to the dead set.
type morgueParams struct {
	// Payload is stored unchanged: a job's JSON, or the raw string of a
	// payload that could not be parsed.
	Payload []byte
	// Now is the time of death (the score).
	Now time.Time
	// Limits trim the set; zero values mean Sidekiq's defaults.
	Limits morgueLimits
}

// sendToMorgue is the one place that adds to the dead set (spec §5.4):
//
//	MULTI
//	ZADD dead <now> <payload>
//	ZREMRANGEBYSCORE dead -inf <now - dead_timeout>
//	ZREMRANGEBYRANK dead 0 -<dead_max_jobs>
//	EXEC
//
// as Ruby 6.4's DeadSet#kill (used by JobRetry#send_to_morgue and the
// processor's bad-JSON path) sends it. 7.0+ sends the ZADD on its own
// before the trim transaction; the resulting state is the same. The server
// runtime calls it for exhausted and unparsable jobs; DeadSet.Kill adds the
// death handlers on top.
func sendToMorgue(ctx context.Context, conn redis.Conn, p morgueParams) error {
	lim := p.Limits.orDefault()
	now := EpochSeconds(p.Now)
	cutoff := now - lim.timeout.Seconds()
	_, err := execMulti(ctx, conn, func(c redis.Conn) {
		c.Send("ZADD", KeyDead, formatScore(now), p.Payload)
		c.Send("ZREMRANGEBYSCORE", KeyDead, "-inf", formatScore(cutoff))
		c.Send("ZREMRANGEBYRANK", KeyDead, 0, -lim.maxJobs)
	})
	if err != nil {
		return fmt.Errorf("sidekiq: add to dead set: %w", err)
	}
	return nil
}

// KillOpts are per-kill settings. A nil *KillOpts means Ruby's defaults.
type KillOpts struct {
	// SkipDeathHandlers does not call the death handlers (Ruby's
	// notify_failure: false).
	SkipDeathHandlers bool
}

// Kill adds payload to the dead set (Ruby's DeadSet#kill): the ZADD and
// trim transaction of sendToMorgue, then, unless opts says not to, every
// APIConfig.DeathHandlers with ErrKilledByAPI. The payload is stored
// unchanged; no error fields are added. A payload that is not a JSON object
// is stored too, but no handler is called for it (Ruby raises a
// JSON::ParserError after storing it).
func (d *DeadSet) Kill(ctx context.Context, payload []byte, opts *KillOpts) error {
	conn, err := d.api.conn(ctx, "kill")
	if err != nil {
		return err
	}
	defer conn.Close()
	return d.kill(ctx, conn, payload, opts)
}

func (d *DeadSet) kill(ctx context.Context, conn redis.Conn, payload []byte, opts *KillOpts) error {
	err := sendToMorgue(ctx, conn, morgueParams{Payload: payload, Now: d.api.clock.Now(), Limits: d.api.morgue})
	if err != nil {
		return err
	}
	if (opts != nil && opts.SkipDeathHandlers) || len(d.api.handlers) == 0 {
		return nil
	}
	job, perr := ParseJob(payload)
	if perr != nil {
		return nil
	}
	for _, h := range d.api.handlers {
		h(ctx, job, ErrKilledByAPI)
	}
	return nil
}
