package maintenance

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"

	"github.com/gojob/gojob/clock"
	"github.com/gojob/gojob/internal/procstat"
	"github.com/gojob/gojob/sidekiq/internal/redisx"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// Work is one running job, as the work hash shows it.
type Work struct {
	// TID is the slot's thread id, the hash field.
	TID   string
	Queue string
	// Raw is the job's exact bytes.
	Raw   []byte
	RunAt time.Time
}

// json is the work-hash value (docs/sidekiq-wire.md#work-hash): the payload
// as a JSON string.
func (w *Work) json() string {
	m := rubyjson.NewMap()
	m.Set("queue", rubyjson.StringValue(w.Queue))
	m.Set("payload", rubyjson.StringValue(string(w.Raw)))
	m.Set("run_at", rubyjson.IntValue(w.RunAt.Unix()))
	return string(m.Encode())
}

// HeartbeatConfig configures a Heartbeat.
type HeartbeatConfig struct {
	// Pool is the Redis pool. Required.
	Pool *redis.Pool
	// Version is the target Sidekiq release: the layout of every write.
	Version wire.Version
	// Clock is the time source. Default the system clock.
	Clock clock.Clock
	// Logger receives the failures (the first of a run of them).
	Logger zerolog.Logger
	// Outage is told about connection failures. Required.
	Outage *redisx.OutageLog
	// Interval overrides the version's beat (5 s for 6.x, 10 s from 7.0).
	Interval time.Duration
	// Info describes the process. Required.
	Info *ProcessInfo
	// Counters are flushed at each beat. Required.
	Counters *Counters
	// Metrics are flushed at each beat; nil for 6.x.
	Metrics *JobMetrics
	// Work lists the running jobs.
	Work func() []Work
	// Quiet reports whether the process is quiet.
	Quiet func() bool
	// OnSignal receives a signal popped from the signals list.
	OnSignal func(sig string)
}

func (c *HeartbeatConfig) validate() error {
	if c.Pool == nil || c.Outage == nil || c.Info == nil || c.Counters == nil || c.Work == nil || c.Quiet == nil {
		return errors.New("sidekiq: HeartbeatConfig needs Pool, Outage, Info, Counters, Work and Quiet")
	}
	return nil
}

// Heartbeat keeps the process registered the way Ruby's Launcher does
// (lib/sidekiq/launcher.rb#❤): the stats flush, the work hash, the process
// hash with a 60 s TTL, and the signal the Web UI left in
// <identity>-signals.
type Heartbeat struct {
	cfg     HeartbeatConfig
	info    []byte // info JSON, dumped once as Ruby does
	loop    loop
	started bool
}

// NewHeartbeat returns a heartbeat.
func NewHeartbeat(cfg *HeartbeatConfig) (*Heartbeat, error) {
	if cfg == nil {
		return nil, errors.New("sidekiq: nil HeartbeatConfig")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := *cfg
	c.Clock = clock.Or(c.Clock)
	if c.Interval <= 0 {
		c.Interval = 5 * time.Second
		if c.Version.AtLeast(7, 0, 0) {
			c.Interval = 10 * time.Second
		}
	}
	if c.OnSignal == nil {
		c.OnSignal = func(string) {}
	}
	return &Heartbeat{cfg: c, loop: newLoop()}, nil
}

// Interval returns the time between beats.
func (h *Heartbeat) Interval() time.Duration { return h.cfg.Interval }

// Start beats every Interval until Stop, or until ctx ends. The first beat
// is the caller's (Beat), so that a process is visible when Start returns.
func (h *Heartbeat) Start(ctx context.Context) error {
	h.started = true
	h.loop.start(func() { h.run(ctx) })
	return nil
}

// Stop ends the beats (a beat under way finishes) and waits for them.
func (h *Heartbeat) Stop(ctx context.Context) error { return h.loop.Stop(ctx, h.started) }

func (h *Heartbeat) run(ctx context.Context) {
	t := time.NewTicker(h.cfg.Interval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.loop.stop:
			return
		case <-t.C:
		}
		err := h.Beat(ctx)
		for i := 0; i < redisx.StaleRetries && redisx.IsConnError(err) && ctx.Err() == nil; i++ {
			err = h.Beat(ctx)
		}
		switch {
		case redisx.IsConnError(err):
			h.cfg.Outage.Failed(err) // one line per outage, shared with the fetchers
		case err != nil && !failing:
			h.cfg.Logger.Error().Err(err).Str("component", "heartbeat").Msg("heartbeat failed")
		case err == nil:
			h.cfg.Outage.OK()
		}
		failing = err != nil
	}
}

// Beat writes one beat for the target version (docs/sidekiq-wire.md#heartbeat)
// and hands a signal found in the signals list to OnSignal. On failure the
// stat counts and metrics are kept for the next beat.
func (h *Heartbeat) Beat(ctx context.Context) error {
	v := h.cfg.Version
	procd, fails := h.cfg.Counters.take()
	metrics := h.cfg.Metrics.take() // nil for 6.x
	restore := func() {
		h.cfg.Counters.restore(procd, fails)
		h.cfg.Metrics.restore(metrics)
	}
	conn, err := h.cfg.Pool.GetContext(ctx)
	if err != nil {
		restore()
		return fmt.Errorf("sidekiq: heartbeat: %w", err)
	}
	defer conn.Close()

	identity := h.cfg.Info.Identity
	workKey := wire.WorkKey(identity, v)
	work := h.cfg.Work()
	now := h.cfg.Clock.Now()
	date := now.UTC().Format("2006-01-02")
	if !v.AtLeast(7, 0, 0) {
		// 6.x: one MULTI with the stats (even when zero) and the work hash.
		conn.Send("MULTI")
		sendStats(conn, procd, fails, date)
		conn.Send("UNLINK", workKey)
		for _, w := range work {
			conn.Send("HSET", workKey, w.TID, w.json())
		}
		conn.Send("EXPIRE", workKey, 60)
		if _, err := conn.Do("EXEC"); err != nil {
			restore()
			return fmt.Errorf("sidekiq: heartbeat: %w", err)
		}
	} else {
		// The stats pipeline, skipped when there is nothing to write, also
		// carries the job metrics Ruby flushes on its :beat event.
		if procd != 0 || fails != 0 || metrics != nil {
			if procd != 0 || fails != 0 {
				sendStats(conn, procd, fails, date)
			}
			sendMetrics(conn, v, now, metrics)
			if _, err := conn.Do(""); err != nil {
				restore()
				return fmt.Errorf("sidekiq: heartbeat stats: %w", err)
			}
		}
		var err error
		if v.AtLeast(7, 2, 3) {
			// 7.2.3+: MULTI, one HSET with every thread, no EXPIRE when idle.
			conn.Send("MULTI")
			conn.Send("UNLINK", workKey)
			if len(work) > 0 {
				args := []any{workKey}
				for _, w := range work {
					args = append(args, w.TID, w.json())
				}
				conn.Send("HSET", args...)
				conn.Send("EXPIRE", workKey, 60)
			}
			_, err = conn.Do("EXEC")
		} else {
			// 7.0.0-7.2.2: a pipeline, one HSET per thread, always EXPIRE.
			conn.Send("UNLINK", workKey)
			for _, w := range work {
				conn.Send("HSET", workKey, w.TID, w.json())
			}
			conn.Send("EXPIRE", workKey, 60)
			_, err = conn.Do("")
		}
		if err != nil {
			return fmt.Errorf("sidekiq: heartbeat work: %w", err)
		}
	}
	start := time.Now()
	if _, err := conn.Do("PING"); err != nil {
		return fmt.Errorf("sidekiq: heartbeat ping: %w", err)
	}
	rtt := time.Since(start).Microseconds()
	quiet := "false"
	if h.cfg.Quiet() {
		quiet = "true"
	}
	if h.info == nil {
		h.info = h.cfg.Info.JSON()
	}
	conn.Send("MULTI")
	conn.Send("SADD", wire.KeyProcesses, identity)
	conn.Send("EXISTS", identity)
	hset := "HSET"
	if !v.AtLeast(7, 0, 0) || (v.Major == 7 && v.Minor == 0) {
		hset = "HMSET"
	}
	conn.Send(hset, identity,
		"info", h.info,
		"concurrency", h.cfg.Info.Concurrency,
		"busy", len(work),
		"beat", rubyjson.FormatFloat(wire.EpochSeconds(h.cfg.Clock.Now())),
		"rtt_us", rtt,
		"quiet", quiet,
		"rss", procstat.KB("VmRSS"))
	conn.Send("EXPIRE", identity, 60)
	conn.Send("RPOP", wire.SignalsKey(identity))
	reply, err := redis.Values(conn.Do("EXEC"))
	if err != nil {
		return fmt.Errorf("sidekiq: heartbeat: %w", err)
	}
	if len(reply) == 5 && reply[4] != nil {
		if sig, err := redis.String(reply[4], nil); err == nil {
			h.cfg.OnSignal(sig)
		}
	}
	return nil
}

// Unregister flushes the stats and the job metrics (7.0+) and removes the
// process from the registry (docs/sidekiq-wire.md#shutdown): SREM
// processes, UNLINK the work hash. The identity hash expires by itself.
func (h *Heartbeat) Unregister(ctx context.Context) error {
	procd, fails := h.cfg.Counters.take()
	metrics := h.cfg.Metrics.take()
	conn, err := h.cfg.Pool.GetContext(ctx)
	if err != nil {
		return fmt.Errorf("sidekiq: unregister: %w", err)
	}
	defer conn.Close()
	now := h.cfg.Clock.Now()
	date := now.UTC().Format("2006-01-02")
	if procd != 0 || fails != 0 {
		sendStats(conn, procd, fails, date)
	}
	sendMetrics(conn, h.cfg.Version, now, metrics)
	conn.Send("SREM", wire.KeyProcesses, h.cfg.Info.Identity)
	conn.Send("UNLINK", wire.WorkKey(h.cfg.Info.Identity, h.cfg.Version))
	if _, err := redis.DoContext(conn, ctx, ""); err != nil {
		h.cfg.Logger.Error().Int64("processed", procd).Int64("failed", fails).Msg("could not flush stats at shutdown")
		return fmt.Errorf("sidekiq: unregister: %w", err)
	}
	return nil
}
