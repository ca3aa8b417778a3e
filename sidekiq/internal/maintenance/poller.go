package maintenance

import (
	"context"
	_ "embed"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"

	"github.com/gojob/gojob/clock"
	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/monoclock"
	"github.com/gojob/gojob/sidekiq/internal/redisx"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// averagePollInterval is Sidekiq's average_scheduled_poll_interval.
const averagePollInterval = 5 * time.Second

// PollerConfig configures a Poller.
type PollerConfig struct {
	// Pool is the Redis pool. Required.
	Pool *redis.Pool
	// Format picks the script and the interval rules, read at each poll.
	// Required.
	Format *contract.LiveFormat
	// Clock is the time source (the "now" the script compares scores
	// with). Default the system clock.
	Clock clock.Clock
	// Logger receives the poller's logs.
	Logger zerolog.Logger
	// Outage is told about connection failures. Required.
	Outage *redisx.OutageLog
	// Prepare makes the payload a due job is pushed with, through the
	// client path (defaults, client middleware, a new enqueued_at), and
	// its queue, without writing it: the poller moves it. ok is false when
	// a client middleware stopped the push (the member is dropped, as
	// Ruby's poller drops it). An error that is not Redis's means the job
	// cannot be pushed: it goes to the dead set unchanged. Required.
	Prepare func(ctx context.Context, job *wire.Job) (queue string, payload []byte, ok bool, err error)
	// AverageInterval, when set, replaces the scaled poll interval
	// (Sidekiq's average_scheduled_poll_interval × processes) and the 10 s
	// added to the initial wait.
	AverageInterval time.Duration
	// Quiet, when closed, ends the polling (the server went quiet).
	Quiet <-chan struct{}
}

func (c *PollerConfig) validate() error {
	if c.Pool == nil || c.Format == nil || c.Outage == nil || c.Prepare == nil {
		return errors.New("sidekiq: PollerConfig needs Pool, Format, Outage and Prepare")
	}
	return nil
}

//go:embed lua/poller_move.lua
var moveSrc string

var moveScript = redis.NewScript(3, moveSrc)

// Poller is Sidekiq's scheduled-job poller (lib/sidekiq/scheduled.rb;
// docs/sidekiq-wire.md#poller): it moves every due member of retry, then
// schedule, to its queue, at randomized intervals scaled by the number of
// processes so that a cluster polls about every 5 s in total.
//
// Ruby's poller pops a member with its zpopbyscore script and pushes it in
// a second round trip; a process killed in between loses the job. gojob's
// reads the first due member (ZRANGEBYSCORE … LIMIT 0 1), makes its
// payload through the client path, and moves it with lua/poller_move.lua,
// which takes the member out of its set and pushes the payload in one
// step, only if the member is still there (another poller, Ruby's
// included, may have moved it first). Nothing is ever only in memory.
type Poller struct {
	cfg     PollerConfig
	cleaner *ProcessCleaner
	loop    loop
	started bool
	// average is 6.4's scaled poll interval, computed at the first poll
	// and kept (only the poll goroutine uses it).
	average time.Duration
}

// NewPoller returns a poller.
func NewPoller(cfg *PollerConfig) (*Poller, error) {
	if cfg == nil {
		return nil, errors.New("sidekiq: nil PollerConfig")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := *cfg
	c.Clock = monoclock.Or(c.Clock)
	cleaner, err := NewProcessCleaner(&ProcessCleanerConfig{Pool: c.Pool, Format: c.Format, Logger: c.Logger})
	if err != nil {
		return nil, err
	}
	return &Poller{cfg: c, cleaner: cleaner, loop: newLoop()}, nil
}

// Start polls until Stop, until Config.Quiet is closed, or until ctx ends.
// ctx also bounds the Redis calls of a pass.
func (p *Poller) Start(ctx context.Context) error {
	p.started = true
	p.loop.start(func() { p.run(ctx) })
	return nil
}

// Stop ends the polling (a pass under way finishes its member) and waits
// for it.
func (p *Poller) Stop(ctx context.Context) error { return p.loop.Stop(ctx, p.started) }

func (p *Poller) run(ctx context.Context) {
	initial := time.Duration(rand.Float64() * float64(5*time.Second))
	if p.cfg.AverageInterval == 0 {
		initial += 10 * time.Second
	}
	if !p.loop.sleep(initial, p.cfg.Quiet) {
		return
	}
	p.cleaner.startup(ctx)
	failing := false
	for {
		_, err := p.runOnce(ctx)
		if redisx.IsConnError(err) {
			p.cfg.Outage.Failed(err)
		} else if err != nil && !failing {
			p.cfg.Logger.Error().Err(err).Str("component", "poller").Msg("scheduled poll failed")
		}
		failing = err != nil
		if !p.loop.sleep(p.sleep(ctx), p.cfg.Quiet) {
			return
		}
	}
}

func (p *Poller) stopping() bool {
	select {
	case <-p.loop.stop:
		return true
	case <-p.cfg.Quiet:
		return true
	default:
		return false
	}
}

// sleep is one randomized poll wait: interval = average × process count
// (or the configured average), then uniform 0.5–1.5 × interval below 10
// processes, and 0–2 × interval (8.0.10+) or 0–1 × interval from 10. Before
// 6.5 the scaled interval is computed once, at the first poll
// (`Sidekiq.options[:poll_interval_average] ||= scaled_poll_interval`),
// while the process count is still read each time for the 10-process rule.
func (p *Poller) sleep(ctx context.Context) time.Duration {
	count := 1
	n, err := p.cleaner.count(ctx)
	if err == nil && n > 0 {
		count = n
	}
	interval := p.cfg.AverageInterval
	if interval == 0 {
		interval = p.average
	}
	if interval == 0 {
		interval = averagePollInterval * time.Duration(count)
		if err == nil && !p.cfg.Format.Version().AtLeast(6, 5, 0) {
			p.average = interval
		}
	}
	r := rand.Float64()
	switch {
	case count < 10:
		return time.Duration(float64(interval)*r) + interval/2
	case p.cfg.Format.Version().AtLeast(8, 0, 10):
		return time.Duration(float64(interval) * r * 2)
	default:
		return time.Duration(float64(interval) * r)
	}
}

// PollResult reports one pass.
type PollResult struct {
	// Enqueued counts the jobs moved from retry and schedule to queues.
	Enqueued int
	// Buried counts unparsable members moved to the dead set.
	Buried int
}

// runOnce moves every due job from retry, then schedule, to its queue
// through the client path, one member at a time as Sidekiq does.
func (p *Poller) runOnce(ctx context.Context) (*PollResult, error) {
	res := &PollResult{}
	for _, set := range []string{contract.KeyRetry, contract.KeySchedule} {
		for !p.stopping() {
			member, err := p.firstDue(ctx, set)
			if err != nil {
				return res, err
			}
			if member == nil {
				break
			}
			moved, buried, err := p.moveDue(ctx, set, member)
			if err != nil {
				return res, err
			}
			if buried {
				res.Buried++
			} else if moved {
				res.Enqueued++
			}
		}
	}
	return res, nil
}

// firstDue returns the first member of set whose score is at most now, nil
// when none is due.
func (p *Poller) firstDue(ctx context.Context, set string) ([]byte, error) {
	conn, err := p.cfg.Pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	now := contract.Score(p.cfg.Clock.Now())
	vals, err := redis.ByteSlices(redis.DoContext(conn, ctx, "ZRANGEBYSCORE", set, "-inf", now, "LIMIT", 0, 1))
	if err != nil || len(vals) == 0 {
		return nil, err
	}
	return vals[0], nil
}

// moveDue moves one due member to its queue, or to the dead set when it
// cannot be pushed (unparsable, refused by the client's validation or a
// middleware's error). It reports whether this poller moved it (another
// may have been first) and whether it was buried.
func (p *Poller) moveDue(ctx context.Context, set string, member []byte) (moved, buried bool, err error) {
	job, perr := wire.ParseJob(member)
	mode, queueKey := "dead", contract.KeyDead
	var args []any
	if perr == nil {
		queue, payload, ok, err := p.cfg.Prepare(ctx, job)
		switch {
		case err != nil && (redisx.IsConnError(err) || redisx.IsTransient(err)):
			return false, false, err // the member is still in its set
		case err != nil:
			perr = err
		case !ok:
			mode = "drop"
		default:
			mode, queueKey = "queue", contract.QueueKey(queue)
			args = []any{payload, queue}
		}
	}
	if mode == "dead" {
		lim := contract.MorgueLimits{}.OrDefault()
		now := contract.EpochSeconds(p.cfg.Clock.Now())
		args = []any{contract.FormatScore(now), contract.FormatScore(now - lim.Timeout.Seconds()), lim.MaxJobs}
	}
	conn, err := p.cfg.Pool.GetContext(ctx)
	if err != nil {
		return false, false, err
	}
	defer conn.Close()
	n, err := redis.Int(moveScript.DoContext(ctx, conn, append([]any{set, queueKey, contract.KeyQueues, member, mode}, args...)...))
	if err != nil {
		return false, false, err
	}
	if n == 1 && mode == "dead" {
		if errors.As(perr, new(*rubyjson.SyntaxError)) {
			p.cfg.Logger.Error().Err(perr).Str("component", "poller").Str("set", set).
				Msg("unparsable member moved to the dead set unchanged")
		} else {
			p.cfg.Logger.Error().Err(perr).Str("component", "poller").Str("set", set).Str("jid", jidOf(job)).
				Bytes("payload", member).Msg("a due job cannot be pushed to its queue; moved to the dead set unchanged")
		}
	}
	return n == 1, n == 1 && mode == "dead", nil
}

func jidOf(job *wire.Job) string {
	if job == nil {
		return ""
	}
	return job.JID()
}
