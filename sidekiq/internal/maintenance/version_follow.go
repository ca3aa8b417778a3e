package maintenance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"

	"github.com/gojob/gojob/clock"
	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/monoclock"
	"github.com/gojob/gojob/internal/redisreply"
	"github.com/gojob/gojob/sidekiq/wire"
)

// VersionFollowerConfig configures a VersionFollower.
type VersionFollowerConfig struct {
	// Pool is the Redis pool. Required.
	Pool *redis.Pool
	// Identity is this process's identity, registered as a gojob process
	// so that no follower takes its writes for Ruby's. Required.
	Identity string
	// Format is the format the process writes. Required.
	Format *contract.LiveFormat
	// Follow switches Format to each decision. Without it Format is fixed
	// and the follower only warns when live Ruby processes are older.
	Follow bool
	// Clock is the time of the records. Default the system clock.
	Clock clock.Clock
	// Logger receives the decisions, the switches and the warnings.
	Logger zerolog.Logger
}

// VersionFollower decides, before every heartbeat, which format the
// process writes (contract.DecideFormat; docs/version-follow.md), switches to
// it when following, and warns when the process writes a version that live
// Ruby processes are too old to read.
type VersionFollower struct {
	cfg VersionFollowerConfig
	// checked is whether a check has run (the first one logs its decision).
	checked bool
	// ruby is the live Ruby processes of the last check, to warn again
	// only when they change.
	ruby []string
}

// NewVersionFollower returns a follower.
func NewVersionFollower(cfg *VersionFollowerConfig) (*VersionFollower, error) {
	if cfg == nil || cfg.Pool == nil || cfg.Format == nil || cfg.Identity == "" {
		return nil, errors.New("sidekiq: VersionFollowerConfig needs Pool, Identity and Format")
	}
	c := *cfg
	c.Clock = monoclock.Or(c.Clock)
	return &VersionFollower{cfg: c}, nil
}

// ErrVersionUnreadable is returned by Check when the fixed format would
// break the readers of the live Ruby processes.
var ErrVersionUnreadable = contract.ErrVersionUnreadable

// Check registers the process as gojob's, decides, and switches (Follow)
// or warns (fixed format). It logs the first decision, each switch, and a
// warning each time the live Ruby processes change while some are older
// than the fixed format. With a fixed 8.x format over older live readers
// it returns an error wrapping ErrVersionUnreadable (the first time and
// each time they change), so that a caller can refuse to start.
func (f *VersionFollower) Check(ctx context.Context) (contract.Decision, error) {
	if err := f.register(ctx); err != nil {
		return contract.Decision{}, err
	}
	now := f.cfg.Clock.Now()
	decide := contract.DecideFormat
	if !f.cfg.Follow {
		// A fixed format only compares itself with the live processes.
		decide = func(ctx context.Context, pool *redis.Pool, _ time.Time) (contract.Decision, error) {
			return contract.LiveRuby(ctx, pool)
		}
	}
	d, err := decide(ctx, f.cfg.Pool, now)
	if err != nil {
		return d, err
	}
	first := !f.checked
	f.checked = true
	changed := !slices.Equal(f.ruby, d.Ruby)
	f.ruby = d.Ruby
	log := f.cfg.Logger
	if f.cfg.Follow || d.Source == contract.SourceLive {
		if err := contract.RecordFormat(ctx, f.cfg.Pool, d, now); err != nil {
			log.Warn().Err(err).Str("component", "version").Msg("could not record the decided format")
		}
	}
	if f.cfg.Follow {
		old := f.cfg.Format.Format()
		switch {
		case first:
			f.cfg.Format.Set(d.Format)
			decisionLog(log.Info(), d).Msg(d.Reason())
		case old != d.Format:
			f.cfg.Format.Set(d.Format)
			decisionLog(log.Warn(), d).Str("was", old.String()).Msg("switching the wire format: " + d.Reason())
		}
		return d, nil
	}
	fixed := f.cfg.Format.Version()
	if d.Oldest == (wire.Version{}) || d.Oldest.AtLeast(fixed.Major, fixed.Minor, fixed.Patch) || !(first || changed) {
		return d, nil
	}
	if contract.Breaks(fixed, d.Oldest) {
		err := fmt.Errorf("%w: it writes %s (millisecond timestamps), they run %s and read them as seconds (far-future dates, negative latencies, a failing Busy page); processes: %s",
			ErrVersionUnreadable, fixed, d.Oldest, strings.Join(d.Ruby, ", "))
		if !first {
			// At the first check the caller decides (Start refuses, or
			// logs it when forced).
			log.Error().Str("component", "version").Str("sidekiq_version", fixed.String()).Strs("processes", d.Ruby).
				Msg(err.Error())
		}
		return d, err
	}
	log.Warn().Str("component", "version").Str("sidekiq_version", fixed.String()).Strs("processes", d.Ruby).
		Msgf("live Sidekiq processes run %s, older than the %s gojob writes: their Web UI may not show what gojob writes (--sidekiq-version auto follows them)", d.Oldest, fixed)
	return d, nil
}

// decisionLog adds a decision's facts to a log event.
func decisionLog(e *zerolog.Event, d contract.Decision) *zerolog.Event {
	e = e.Str("component", "version").Str("sidekiq_version", d.Format.String()).Str("source", d.Source)
	if len(d.Ruby) > 0 {
		e = e.Strs("processes", d.Ruby)
	}
	if len(d.Evidence) > 0 {
		e = e.Strs("evidence", d.Evidence)
	}
	return e
}

// register marks the process as gojob's, with the time: a live gojob
// process checks before every beat, so a mark older than goneAfter is a
// dead one's and goes.
func (f *VersionFollower) register(ctx context.Context) error {
	conn, err := f.cfg.Pool.GetContext(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	now := f.cfg.Clock.Now()
	conn.Send("ZADD", contract.KeyGojobProcesses, contract.Score(now), f.cfg.Identity)
	conn.Send("ZREMRANGEBYSCORE", contract.KeyGojobProcesses, "-inf", "("+contract.Score(now.Add(-goneAfter)))
	_, err = redisreply.Pipeline(ctx, conn)
	return err
}

// goneAfter is how long a gojob process's mark outlives its last check:
// the process hash's TTL.
const goneAfter = 60 * time.Second

// Unregister removes the process from the gojob processes (at stop).
func (f *VersionFollower) Unregister(ctx context.Context) error {
	conn, err := f.cfg.Pool.GetContext(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = redis.DoContext(conn, ctx, "ZREM", contract.KeyGojobProcesses, f.cfg.Identity)
	return err
}
