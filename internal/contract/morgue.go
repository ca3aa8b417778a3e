package contract

import (
	"context"
	"fmt"
	"time"

	"github.com/gomodule/redigo/redis"
)

// MorgueLimits are Sidekiq's dead_max_jobs and dead_timeout_in_seconds;
// zero values mean DeadMaxJobs and DeadTimeoutInSeconds.
type MorgueLimits struct {
	MaxJobs int
	Timeout time.Duration
}

// OrDefault fills the zero values with Sidekiq's defaults.
func (l MorgueLimits) OrDefault() MorgueLimits {
	if l.MaxJobs == 0 {
		l.MaxJobs = DeadMaxJobs
	}
	if l.Timeout == 0 {
		l.Timeout = DeadTimeoutInSeconds * time.Second
	}
	return l
}

// MorgueParams is one addition to the dead set.
type MorgueParams struct {
	// Payload is stored unchanged: a job's JSON, or the raw string of a
	// payload that could not be parsed.
	Payload []byte
	// Now is the time of death (the score).
	Now time.Time
	// Limits trim the set; zero values mean Sidekiq's defaults.
	Limits MorgueLimits
}

// SendToMorgue is the one place that adds to the dead set
// (docs/sidekiq-wire.md#dead-set):
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
// calls it for exhausted and unparsable jobs; the admin API's DeadSet.Kill
// adds the death handlers on top. It returns how many entries the trim
// removed (older than the timeout, or the oldest beyond MaxJobs-1): with
// a full dead set, every addition drops one.
func SendToMorgue(ctx context.Context, conn redis.Conn, p MorgueParams) (dropped int64, err error) {
	lim := p.Limits.OrDefault()
	now := EpochSeconds(p.Now)
	cutoff := now - lim.Timeout.Seconds()
	replies, err := execMulti(ctx, conn, func(c redis.Conn) {
		c.Send("ZADD", KeyDead, FormatScore(now), p.Payload)
		c.Send("ZREMRANGEBYSCORE", KeyDead, "-inf", FormatScore(cutoff))
		c.Send("ZREMRANGEBYRANK", KeyDead, 0, -lim.MaxJobs)
	})
	if err != nil {
		return 0, fmt.Errorf("sidekiq: add to dead set: %w", err)
	}
	if len(replies) == 3 {
		byTime, _ := redis.Int64(replies[1], nil)
		byCount, _ := redis.Int64(replies[2], nil)
		dropped = byTime + byCount
	}
	return dropped, nil
}

// MorgueDrops is how many entries n additions to a dead set of size
// entries, expired of them older than the timeout, would make the trim of
// SendToMorgue remove: the expired ones, then every entry beyond
// MaxJobs-1 (the newest additions stay).
func MorgueDrops(size, expired, n int64, l MorgueLimits) int64 {
	l = l.OrDefault()
	keep := int64(l.MaxJobs - 1)
	if n <= 0 {
		return 0
	}
	return expired + max(0, size-expired+n-keep)
}

// KillDrops is how many dead-set entries killing n jobs at now would drop
// to keep the dead set within l (MorgueDrops of MULTI ZCARD dead; ZCOUNT
// dead -inf <now - timeout>; EXEC): those older than the timeout, then the
// oldest beyond the cap; when n alone exceeds the cap, the first of the n
// killed. `gojob retries kill` and the dashboard tell an operator before a
// bulk kill that loses jobs this way.
func KillDrops(ctx context.Context, conn redis.Conn, now time.Time, l MorgueLimits, n int64) (int64, error) {
	if n <= 0 {
		return 0, nil
	}
	l = l.OrDefault()
	cutoff := EpochSeconds(now) - l.Timeout.Seconds()
	conn.Send("MULTI")
	conn.Send("ZCARD", KeyDead)
	conn.Send("ZCOUNT", KeyDead, "-inf", FormatScore(cutoff))
	replies, err := redis.Int64s(redis.DoContext(conn, ctx, "EXEC"))
	if err == nil && len(replies) != 2 {
		err = fmt.Errorf("unexpected reply of %d elements", len(replies))
	}
	if err != nil {
		return 0, fmt.Errorf("sidekiq: dead set room: %w", err)
	}
	return MorgueDrops(replies[0], replies[1], n, l), nil
}
