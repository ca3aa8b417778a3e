package maintenance

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"

	"github.com/gojob/gojob/clock"
	"github.com/gojob/gojob/sidekiq/internal/redisx"
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
	Format *wire.LiveFormat
	// Clock is the time source (the "now" the script compares scores
	// with). Default the system clock.
	Clock clock.Clock
	// Logger receives the poller's logs.
	Logger zerolog.Logger
	// Outage is told about connection failures. Required.
	Outage *redisx.OutageLog
	// Writes carries the pushes of popped jobs through an outage. Required.
	Writes *redisx.Retrier
	// Enqueue pushes a due job to its queue through the client path
	// (defaults, client middleware, a new enqueued_at). Required.
	Enqueue func(ctx context.Context, job *wire.Job) error
	// Bury adds an unparsable member to the dead set, unchanged. Required.
	Bury func(payload []byte)
	// AverageInterval, when set, replaces the scaled poll interval
	// (Sidekiq's average_scheduled_poll_interval × processes) and the 10 s
	// added to the initial wait.
	AverageInterval time.Duration
	// Quiet, when closed, ends the polling (the server went quiet).
	Quiet <-chan struct{}
}

func (c *PollerConfig) validate() error {
	if c.Pool == nil || c.Format == nil || c.Outage == nil || c.Writes == nil || c.Enqueue == nil || c.Bury == nil {
		return errors.New("sidekiq: PollerConfig needs Pool, Format, Outage, Writes, Enqueue and Bury")
	}
	return nil
}

// Poller is Sidekiq's scheduled-job poller (lib/sidekiq/scheduled.rb;
// docs/sidekiq-wire.md#poller): it moves every due member of retry, then
// schedule, to its queue, one member per call of Ruby's own zpopbyscore
// script, at randomized intervals scaled by the number of processes so
// that a cluster polls about every 5 s in total.
type Poller struct {
	cfg     PollerConfig
	cleaner *ProcessCleaner
	loop    loop
	started bool
	// average is 6.4's scaled poll interval, computed at the first poll
	// and kept (only the poll goroutine uses it).
	average time.Duration
	// scriptLoaded is whether SCRIPT LOAD was sent.
	scriptLoaded bool
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
	c.Clock = clock.Or(c.Clock)
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
// through the client path, one member per script call as Sidekiq does.
func (p *Poller) runOnce(ctx context.Context) (*PollResult, error) {
	res := &PollResult{}
	script := wire.ZPopByScore(p.cfg.Format.Version())
	for _, set := range []string{wire.KeyRetry, wire.KeySchedule} {
		for !p.stopping() {
			member, err := p.popDue(ctx, script, set)
			if err != nil {
				return res, err
			}
			if member == nil {
				break
			}
			job, err := wire.ParseJob(member)
			if err != nil {
				p.cfg.Logger.Error().Err(err).Str("component", "poller").Str("set", set).
					Msg("unparsable member moved to the dead set unchanged")
				p.cfg.Bury(member)
				res.Buried++
				continue
			}
			// The member is out of the set now: retry the push through an
			// outage rather than lose it.
			err = p.cfg.Writes.Retry(func() error {
				return p.cfg.Enqueue(p.cfg.Writes.Ctx, job)
			})
			if err != nil && !redisx.IsConnError(err) && !redisx.IsTransient(err) {
				// Not Redis: the job itself cannot be pushed (it fails the
				// client's validation, or a client middleware refuses
				// it). Keep it, unchanged, where an operator sees it.
				p.cfg.Logger.Error().Err(err).Str("component", "poller").Str("set", set).Str("jid", job.JID()).
					Bytes("payload", member).Msg("a due job cannot be pushed to its queue; moved to the dead set unchanged")
				p.cfg.Bury(member)
				res.Buried++
				continue
			}
			if err != nil {
				p.cfg.Logger.Error().Err(err).Str("component", "poller").Str("jid", job.JID()).
					Bytes("payload", member).Msg("could not enqueue a due job before the shutdown gave up")
				return res, fmt.Errorf("sidekiq: poller enqueue %s: %w", job.JID(), err)
			}
			res.Enqueued++
		}
	}
	return res, nil
}

func (p *Poller) popDue(ctx context.Context, script *redis.Script, set string) ([]byte, error) {
	conn, err := p.cfg.Pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	for attempt := 0; ; attempt++ {
		// As Enq#zpopbyscore: SCRIPT LOAD on first use, then EVALSHA, and
		// load again on NOSCRIPT (a SCRIPT FLUSH or a restarted Redis).
		// redigo's Script.Do would send EVALSHA and then a full EVAL.
		if !p.scriptLoaded {
			if err := script.Load(conn); err != nil {
				return nil, err
			}
			p.scriptLoaded = true
		}
		now := wire.Score(p.cfg.Clock.Now())
		b, err := redis.Bytes(conn.Do("EVALSHA", script.Hash(), 1, set, now))
		var re redis.Error
		if errors.As(err, &re) && strings.HasPrefix(string(re), "NOSCRIPT") && attempt == 0 {
			p.scriptLoaded = false
			continue
		}
		if errors.Is(err, redis.ErrNil) {
			return nil, nil
		}
		return b, err
	}
}
