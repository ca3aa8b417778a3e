package maintenance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"

	"github.com/gojob/gojob/clock"
	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/monoclock"
	"github.com/gojob/gojob/internal/procstat"
	"github.com/gojob/gojob/internal/redisreply"
	"github.com/gojob/gojob/internal/rubyfloat"
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
	// HeartbeatAt is the job's last heartbeat (docs/heartbeats.md), zero
	// when it sent none; written as "heartbeat_at", float epoch seconds,
	// which the Web UI ignores.
	HeartbeatAt time.Time
}

// json is the work-hash value (docs/sidekiq-wire.md#work-hash): the payload
// as a JSON string.
func (w *Work) json() string {
	m := rubyjson.NewMap()
	m.Set("queue", rubyjson.StringValue(w.Queue))
	m.Set("payload", rubyjson.StringValue(string(w.Raw)))
	m.Set("run_at", rubyjson.IntValue(w.RunAt.Unix()))
	if !w.HeartbeatAt.IsZero() {
		m.Set("heartbeat_at", rubyjson.FloatValue(contract.EpochSeconds(w.HeartbeatAt)))
	}
	return string(m.Encode())
}

// HeartbeatConfig configures a Heartbeat.
type HeartbeatConfig struct {
	// Pool is the Redis pool. Required.
	Pool *redis.Pool
	// Format is the layout of every write, read at each beat. Required.
	Format *contract.LiveFormat
	// Clock is the time source. Default the system clock.
	Clock clock.Clock
	// Logger receives the failures (the first of a run of them).
	Logger zerolog.Logger
	// Outage is told about connection failures. Required.
	Outage *redisx.OutageLog
	// Interval overrides the version's beat (5 s for 6.x, 10 s from 7.0).
	Interval time.Duration
	// BeforeBeat, when set, runs at the start of every beat (the version
	// follower: it may change Format).
	BeforeBeat func(ctx context.Context)
	// Info describes the process. Required.
	Info *ProcessInfo
	// Counters are flushed at each beat. Required.
	Counters *Counters
	// Metrics are flushed at each beat (7.0+ formats; a 6.x beat drops
	// them). Optional.
	Metrics *JobMetrics
	// Work lists the running jobs.
	Work func() []Work
	// Quiet reports whether the process is quiet.
	Quiet func() bool
	// OnSignal receives a signal popped from the signals list.
	OnSignal func(sig string)
}

func (c *HeartbeatConfig) validate() error {
	if c.Pool == nil || c.Format == nil || c.Outage == nil || c.Info == nil || c.Counters == nil || c.Work == nil || c.Quiet == nil {
		return errors.New("sidekiq: HeartbeatConfig needs Pool, Format, Outage, Info, Counters, Work and Quiet")
	}
	return nil
}

// Heartbeat keeps the process registered the way Ruby's Launcher does
// (lib/sidekiq/launcher.rb#❤): the stats flush, the work hash, the process
// hash with a 60 s TTL, and the signal the Web UI left in
// <identity>-signals.
type Heartbeat struct {
	cfg HeartbeatConfig
	// info is the info JSON, dumped once per version as Ruby dumps it once.
	info        []byte
	infoVersion wire.Version
	// workKeys are the work-hash keys the last beat wrote: a key the format
	// no longer writes is removed at once.
	workKeys []string
	// concurrency is whether the last beat wrote the concurrency field.
	concurrency bool
	loop        loop
	started     bool
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
	c.Clock = monoclock.Or(c.Clock)
	if c.OnSignal == nil {
		c.OnSignal = func(string) {}
	}
	if c.BeforeBeat == nil {
		c.BeforeBeat = func(context.Context) {}
	}
	return &Heartbeat{cfg: c, loop: newLoop()}, nil
}

// Interval returns the time between beats: the configured one, or the
// current version's (5 s for 6.x, 10 s from 7.0).
func (h *Heartbeat) Interval() time.Duration {
	if h.cfg.Interval > 0 {
		return h.cfg.Interval
	}
	if h.cfg.Format.Version().AtLeast(7, 0, 0) {
		return 10 * time.Second
	}
	return 5 * time.Second
}

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
	interval := h.Interval()
	t := time.NewTicker(interval)
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
		sent := time.Now()
		err := h.Beat(ctx)
		for i := 0; i < redisx.StaleRetries && redisx.IsConnError(err) && ctx.Err() == nil; i++ {
			sent = time.Now()
			err = h.Beat(ctx)
		}
		switch {
		case redisx.IsConnError(err):
			h.cfg.Outage.Failed(err) // one line per outage, shared with the fetchers
		case err != nil && !failing:
			h.cfg.Logger.Error().Err(err).Str("component", "heartbeat").Msg("heartbeat failed")
		case err == nil:
			h.cfg.Outage.OKSince(sent)
		}
		failing = err != nil
		if i := h.Interval(); i != interval {
			interval = i
			t.Reset(interval) // the format changed between 6.x and 7.0+
		}
	}
}

// Beat writes one beat for the current format (docs/sidekiq-wire.md#heartbeat)
// and hands a signal found in the signals list to OnSignal. On failure the
// stat counts and metrics are kept for the next beat.
func (h *Heartbeat) Beat(ctx context.Context) error {
	h.cfg.BeforeBeat(ctx)
	f := h.cfg.Format.Format()
	v := f.Version
	procd, fails := h.cfg.Counters.take()
	conn, err := h.cfg.Pool.GetContext(ctx)
	if err != nil {
		h.cfg.Counters.restore(procd, fails)
		return fmt.Errorf("sidekiq: heartbeat: %w", err)
	}
	defer conn.Close()

	identity := h.cfg.Info.Identity
	workKeys := contract.WorkKeys(f, identity)
	stale := minusKeys(h.workKeys, workKeys)
	work := h.cfg.Work()
	now := h.cfg.Clock.Now()
	date := now.UTC().Format("2006-01-02")
	if !v.AtLeast(7, 0, 0) {
		// 6.x: one MULTI with the stats (even when zero) and the work hash.
		conn.Send("MULTI")
		sendStats(conn, procd, fails, date)
		sendWork(conn, stale, workKeys, work, false)
		if _, err := redisreply.Check(redis.Values(conn.Do("EXEC"))); err != nil {
			h.cfg.Counters.restore(procd, fails)
			return fmt.Errorf("sidekiq: heartbeat: %w", err)
		}
	} else {
		// 7.0+: the stats in a pipeline, skipped when there is nothing to
		// write.
		if procd != 0 || fails != 0 {
			sendStats(conn, procd, fails, date)
			if _, err := redisreply.Pipeline(ctx, conn); err != nil {
				h.cfg.Counters.restore(procd, fails)
				return fmt.Errorf("sidekiq: heartbeat stats: %w", err)
			}
		}
		var err error
		if v.AtLeast(7, 2, 3) {
			// 7.2.3+: MULTI, one HSET with every thread, no EXPIRE when idle.
			conn.Send("MULTI")
			sendWork(conn, stale, workKeys, work, true)
			_, err = redisreply.Check(redis.Values(conn.Do("EXEC")))
		} else {
			// 7.0.0-7.2.2: a pipeline, one HSET per thread, always EXPIRE.
			sendWork(conn, stale, workKeys, work, false)
			_, err = redisreply.Pipeline(ctx, conn)
		}
		if err != nil {
			return fmt.Errorf("sidekiq: heartbeat work: %w", err)
		}
	}
	h.workKeys = workKeys
	start := time.Now()
	if _, err := conn.Do("PING"); err != nil {
		return fmt.Errorf("sidekiq: heartbeat ping: %w", err)
	}
	rtt := time.Since(start).Microseconds()
	quiet := "false"
	if h.cfg.Quiet() {
		quiet = "true"
	}
	if h.info == nil || h.infoVersion != v {
		h.info, h.infoVersion = h.cfg.Info.JSON(v), v
	}
	conn.Send("MULTI")
	conn.Send("SADD", contract.KeyProcesses, identity)
	conn.Send("EXISTS", identity)
	hset := "HSET"
	if !v.AtLeast(7, 0, 0) || (v.Major == 7 && v.Minor == 0) {
		hset = "HMSET"
	}
	args := []any{identity, "info", h.info}
	if contract.ConcurrencyField(f) {
		args = append(args, "concurrency", h.cfg.Info.Concurrency)
	}
	args = append(args,
		"busy", len(work),
		"beat", rubyfloat.Format(contract.EpochSeconds(h.cfg.Clock.Now())),
		"rtt_us", rtt,
		"quiet", quiet,
		"rss", procstat.KB("VmRSS"))
	conn.Send(hset, args...)
	if h.concurrency && !contract.ConcurrencyField(f) {
		conn.Send("HDEL", identity, "concurrency") // the format changed
	}
	conn.Send("EXPIRE", identity, 60)
	conn.Send("RPOP", contract.SignalsKey(identity))
	reply, err := redisreply.Check(redis.Values(conn.Do("EXEC")))
	if err != nil {
		return fmt.Errorf("sidekiq: heartbeat: %w", err)
	}
	h.concurrency = contract.ConcurrencyField(f)
	if sig := reply[len(reply)-1]; sig != nil {
		if sig, err := redis.String(sig, nil); err == nil {
			h.cfg.OnSignal(sig)
		}
	}
	// 7.0+ flushes the job metrics on the :beat event, after the process
	// hash (lib/sidekiq/metrics/tracking.rb; captured 7.3.10).
	if metrics := h.cfg.Metrics.take(); metrics != nil && len(contract.MetricsVersions(f)) > 0 {
		sendMetrics(conn, f, h.cfg.Clock.Now(), metrics)
		if _, err := redisreply.Pipeline(ctx, conn); err != nil {
			h.cfg.Metrics.restore(metrics)
			return fmt.Errorf("sidekiq: heartbeat metrics: %w", err)
		}
	}
	return nil
}

// sendWork queues the work-hash writes: UNLINK of the keys the format no
// longer writes (stale), then for each key UNLINK, the running jobs and
// EXPIRE 60. oneHSET (7.2.3+) sends one HSET with every job and no EXPIRE
// when idle; otherwise one HSET per job and always an EXPIRE.
func sendWork(conn redis.Conn, stale, keys []string, work []Work, oneHSET bool) {
	for _, key := range stale {
		conn.Send("UNLINK", key)
	}
	for _, key := range keys {
		conn.Send("UNLINK", key)
		if oneHSET {
			if len(work) == 0 {
				continue
			}
			args := []any{key}
			for _, w := range work {
				args = append(args, w.TID, w.json())
			}
			conn.Send("HSET", args...)
		} else {
			for _, w := range work {
				conn.Send("HSET", key, w.TID, w.json())
			}
		}
		conn.Send("EXPIRE", key, 60)
	}
}

// minusKeys returns the keys of a that are not in b.
func minusKeys(a, b []string) []string {
	var out []string
	for _, k := range a {
		if !slices.Contains(b, k) {
			out = append(out, k)
		}
	}
	return out
}

// Unregister flushes the stats and the job metrics (7.0+) and removes the
// process from the registry (docs/sidekiq-wire.md#shutdown): SREM
// processes, UNLINK the work hash. The identity hash expires by itself.
func (h *Heartbeat) Unregister(ctx context.Context) error {
	f := h.cfg.Format.Format()
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
	sendMetrics(conn, f, now, metrics)
	conn.Send("SREM", contract.KeyProcesses, h.cfg.Info.Identity)
	keys := contract.WorkKeys(f, h.cfg.Info.Identity)
	for _, key := range append(keys, minusKeys(h.workKeys, keys)...) {
		conn.Send("UNLINK", key)
	}
	if _, err := redisreply.Pipeline(ctx, conn); err != nil {
		h.cfg.Logger.Error().Int64("processed", procd).Int64("failed", fails).Msg("could not flush stats at shutdown")
		return fmt.Errorf("sidekiq: unregister: %w", err)
	}
	return nil
}
