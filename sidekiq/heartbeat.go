package sidekiq

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/procstat"
	"github.com/gojob/gojob/sidekiq/rubyjson"
)

// beatInterval is the heartbeat period of the target version: 5 s for 6.x,
// 10 s from 7.0.
func (s *Server) beatInterval() time.Duration {
	if s.cfg.HeartbeatInterval > 0 {
		return s.cfg.HeartbeatInterval
	}
	if s.cfg.Version.AtLeast(7, 0, 0) {
		return 10 * time.Second
	}
	return 5 * time.Second
}

func (s *Server) heartbeatLoop() {
	defer s.bg.Done()
	t := time.NewTicker(s.beatInterval())
	defer t.Stop()
	failing := false
	for {
		select {
		case <-s.hardCtx.Done():
			return
		case <-t.C:
		}
		err := s.heartbeat(s.hardCtx)
		for i := 0; i < staleRetries && err != nil && isConnError(err) && s.hardCtx.Err() == nil; i++ {
			err = s.heartbeat(s.hardCtx)
		}
		switch {
		case err != nil && isConnError(err):
			s.outage.failed(err) // one line per outage, shared with the fetchers
		case err != nil && !failing:
			s.log.Error().Err(err).Str("component", "heartbeat").Msg("heartbeat failed")
		case err == nil:
			s.outage.ok()
		}
		failing = err != nil
	}
}

// infoJSON is the `info` field of the process hash for the target version
// (spec §7.3).
func (s *Server) infoJSON() []byte {
	v := s.cfg.Version
	m := rubyjson.NewMap()
	m.Set("hostname", rubyjson.StringValue(s.cfg.Hostname))
	m.Set("started_at", rubyjson.FloatValue(EpochSeconds(s.startedAt)))
	m.Set("pid", rubyjson.IntValue(int64(os.Getpid())))
	m.Set("tag", rubyjson.StringValue(s.cfg.Tag))
	if !v.AtLeast(8, 1, 2) {
		// 8.1.2+ writes concurrency only as a field of the process hash.
		m.Set("concurrency", rubyjson.IntValue(int64(s.cfg.Concurrency)))
	}
	queues := make([]rubyjson.Value, len(s.fetchQ.unique))
	for i, q := range s.fetchQ.unique {
		queues[i] = rubyjson.StringValue(q)
	}
	weights := rubyjson.NewMap()
	for _, q := range s.cfg.Queues {
		if !weights.Has(q.Name) {
			weights.Set(q.Name, rubyjson.IntValue(int64(q.Weight)))
		}
	}
	if v.AtLeast(8, 0, 9) {
		capsule := rubyjson.NewMap()
		capsule.Set("concurrency", rubyjson.IntValue(int64(s.cfg.Concurrency)))
		capsule.Set("mode", rubyjson.StringValue(s.fetchMode()))
		capsule.Set("weights", rubyjson.ObjectValue(weights))
		caps := rubyjson.NewMap()
		caps.Set("default", rubyjson.ObjectValue(capsule))
		m.Set("capsules", rubyjson.ObjectValue(caps))
	}
	m.Set("queues", rubyjson.ArrayValue(queues...))
	switch {
	case v.AtLeast(7, 0, 3):
		m.Set("weights", rubyjson.ArrayValue(rubyjson.ObjectValue(weights)))
	case v == Version{7, 0, 2}:
		// 7.0.2: a tally of the weighted queue list.
		tally := rubyjson.NewMap()
		for _, k := range s.fetchQ.weighted {
			q := QueueName(k)
			n := int64(0)
			if c, ok := tally.Get(q); ok {
				n, _ = c.Int()
			}
			tally.Set(q, rubyjson.IntValue(n+1))
		}
		m.Set("weights", rubyjson.ObjectValue(tally))
	}
	labels := make([]rubyjson.Value, len(s.cfg.Labels))
	for i, l := range s.cfg.Labels {
		labels[i] = rubyjson.StringValue(l)
	}
	m.Set("labels", rubyjson.ArrayValue(labels...))
	m.Set("identity", rubyjson.StringValue(s.identity))
	if v.AtLeast(7, 0, 2) {
		m.Set("version", rubyjson.StringValue(v.String()))
	}
	if v.AtLeast(7, 0, 3) {
		m.Set("embedded", rubyjson.BoolValue(false))
	}
	return m.Encode()
}

// fetchMode is the capsule mode of 7.0.3+: strict when no weights, random
// when all are 1, weighted otherwise.
func (s *Server) fetchMode() string {
	allZero, allOne := true, true
	for _, q := range s.cfg.Queues {
		if q.Weight != 0 {
			allZero = false
		}
		if q.Weight != 1 {
			allOne = false
		}
	}
	switch {
	case allZero:
		return "strict"
	case allOne:
		return "random"
	}
	return "weighted"
}

// heartbeat writes one beat (spec §7.2) for the target version and acts on
// a signal found in the signals list. On failure the stat counts are kept
// for the next beat.
func (s *Server) heartbeat(ctx context.Context) error {
	v := s.cfg.Version
	procd := s.processed.Swap(0)
	fails := s.failed.Swap(0)
	metrics := s.metrics.take() // nil for 6.x
	restore := func() {
		s.processed.Add(procd)
		s.failed.Add(fails)
		s.metrics.restore(metrics)
	}
	conn, err := s.cfg.Pool.GetContext(ctx)
	if err != nil {
		restore()
		return fmt.Errorf("sidekiq: heartbeat: %w", err)
	}
	defer conn.Close()

	workKey := WorkKey(s.identity, v)
	type tw struct{ tid, json string }
	var work []tw
	s.work.Range(func(k, val any) bool {
		work = append(work, tw{k.(string), string(val.(*workItem).workJSON())})
		return true
	})
	now := s.cfg.Clock.Now()
	date := now.UTC().Format("2006-01-02")
	if !v.AtLeast(7, 0, 0) {
		// 6.x: one MULTI with the stats (even when zero) and the work hash.
		conn.Send("MULTI")
		sendStats(conn, procd, fails, date)
		conn.Send("UNLINK", workKey)
		for _, w := range work {
			conn.Send("HSET", workKey, w.tid, w.json)
		}
		conn.Send("EXPIRE", workKey, 60)
		if _, err := conn.Do("EXEC"); err != nil {
			restore()
			return fmt.Errorf("sidekiq: heartbeat: %w", err)
		}
	} else {
		// The stats pipeline, skipped when there is nothing to write, also
		// carries the job metrics Ruby flushes on its :beat event (§7.8).
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
					args = append(args, w.tid, w.json)
				}
				conn.Send("HSET", args...)
				conn.Send("EXPIRE", workKey, 60)
			}
			_, err = conn.Do("EXEC")
		} else {
			// 7.0.0-7.2.2: a pipeline, one HSET per thread, always EXPIRE.
			conn.Send("UNLINK", workKey)
			for _, w := range work {
				conn.Send("HSET", workKey, w.tid, w.json)
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
	if s.IsQuiet() {
		quiet = "true"
	}
	conn.Send("MULTI")
	conn.Send("SADD", KeyProcesses, s.identity)
	conn.Send("EXISTS", s.identity)
	hset := "HSET"
	if !v.AtLeast(7, 0, 0) || (v.Major == 7 && v.Minor == 0) {
		hset = "HMSET"
	}
	conn.Send(hset, s.identity,
		"info", s.infoJSON(),
		"concurrency", s.cfg.Concurrency,
		"busy", len(work),
		"beat", rubyjson.FormatFloat(EpochSeconds(s.cfg.Clock.Now())),
		"rtt_us", rtt,
		"quiet", quiet,
		"rss", procstat.KB("VmRSS"))
	conn.Send("EXPIRE", s.identity, 60)
	conn.Send("RPOP", SignalsKey(s.identity))
	reply, err := redis.Values(conn.Do("EXEC"))
	if err != nil {
		return fmt.Errorf("sidekiq: heartbeat: %w", err)
	}
	if len(reply) == 5 && reply[4] != nil {
		if sig, err := redis.String(reply[4], nil); err == nil {
			s.Signal(sig)
		}
	}
	return nil
}

// Signal acts on a Sidekiq signal name: TSTP quiets, TERM and INT stop
// gracefully (Run returns), TTIN logs every goroutine's stack.
func (s *Server) Signal(sig string) {
	s.log.Info().Str("signal", sig).Msg("got signal")
	switch sig {
	case "TSTP":
		s.Quiet()
	case "TERM", "INT":
		s.Quiet()
		s.requestStop()
	case "TTIN", "INFO":
		var buf bytes.Buffer
		pprof.Lookup("goroutine").WriteTo(&buf, 2)
		s.log.Warn().Str("component", "signals").Msg("goroutine dump follows")
		sc := bufio.NewScanner(&buf)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			s.log.Warn().Str("component", "signals").Msg(sc.Text())
		}
	default:
		s.log.Warn().Str("signal", sig).Msg("ignoring unknown signal")
	}
	if s.cfg.OnSignal != nil {
		s.cfg.OnSignal(sig)
	}
}

// StopRequested is closed when a TERM (from Redis or Signal) asks the
// server to stop.
func (s *Server) StopRequested() <-chan struct{} { return s.stopCh }

// unregister flushes the stats and the job metrics (7.0+) and removes the
// process from the registry (spec §7.6): SREM processes, UNLINK the work
// hash. The identity hash expires by itself.
func (s *Server) unregister(ctx context.Context) error {
	procd := s.processed.Swap(0)
	fails := s.failed.Swap(0)
	metrics := s.metrics.take()
	conn, err := s.cfg.Pool.GetContext(ctx)
	if err != nil {
		return fmt.Errorf("sidekiq: unregister: %w", err)
	}
	defer conn.Close()
	now := s.cfg.Clock.Now()
	date := now.UTC().Format("2006-01-02")
	if procd != 0 || fails != 0 {
		sendStats(conn, procd, fails, date)
	}
	sendMetrics(conn, s.cfg.Version, now, metrics)
	conn.Send("SREM", KeyProcesses, s.identity)
	conn.Send("UNLINK", WorkKey(s.identity, s.cfg.Version))
	if _, err := redis.DoContext(conn, ctx, ""); err != nil {
		s.log.Error().Int64("processed", procd).Int64("failed", fails).Msg("could not flush stats at shutdown")
		return fmt.Errorf("sidekiq: unregister: %w", err)
	}
	return nil
}

// sendStats queues the six stat commands of a flush (spec §7.7).
func sendStats(conn redis.Conn, procd, fails int64, date string) {
	for _, kv := range []struct {
		kind string
		n    int64
	}{{"processed", procd}, {"failed", fails}} {
		conn.Send("INCRBY", "stat:"+kv.kind, kv.n)
		conn.Send("INCRBY", DailyStatKey(kv.kind, date), kv.n)
		conn.Send("EXPIRE", DailyStatKey(kv.kind, date), StatTTL)
	}
}
