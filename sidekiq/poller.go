package sidekiq

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"
)

// averagePollInterval is Sidekiq's average_scheduled_poll_interval.
const averagePollInterval = 5 * time.Second

// pollLoop is the scheduled/retry poller (spec §6). It stops when the
// server goes quiet.
func (s *Server) pollLoop() {
	defer s.bg.Done()
	initial := time.Duration(rand.Float64() * float64(5*time.Second))
	if s.cfg.PollIntervalAverage == 0 {
		initial += 10 * time.Second
	}
	if !s.sleepOrQuiet(initial) {
		return
	}
	s.startupCleanup()
	failing := false
	for {
		_, err := s.pollOnce(s.hardCtx)
		if err != nil && isConnError(err) {
			s.outage.failed(err)
		} else if err != nil && !failing {
			s.log.Error().Err(err).Str("component", "poller").Msg("scheduled poll failed")
		}
		failing = err != nil
		if !s.sleepOrQuiet(s.pollSleep()) {
			return
		}
	}
}

// pollSleep is one randomized poll wait: interval = average × process count
// (or the configured average), then uniform 0.5–1.5 × interval below 10
// processes, and 0–2 × interval (8.0.10+) or 0–1 × interval from 10. Before
// 6.5 the scaled interval is computed once, at the first poll
// (`Sidekiq.options[:poll_interval_average] ||= scaled_poll_interval`),
// while the process count is still read each time for the 10-process rule.
func (s *Server) pollSleep() time.Duration {
	count := 1
	n, err := s.processCount()
	if err == nil && n > 0 {
		count = n
	}
	interval := s.cfg.PollIntervalAverage
	if interval == 0 {
		interval = s.pollAverage
	}
	if interval == 0 {
		interval = averagePollInterval * time.Duration(count)
		if err == nil && !s.cfg.Version.AtLeast(6, 5, 0) {
			s.pollAverage = interval
		}
	}
	r := rand.Float64()
	switch {
	case count < 10:
		return time.Duration(float64(interval)*r) + interval/2
	case s.cfg.Version.AtLeast(8, 0, 10):
		return time.Duration(float64(interval) * r * 2)
	default:
		return time.Duration(float64(interval) * r)
	}
}

// startupCleanup is the 6.5.7+ poller's cleanup at the end of its initial
// wait: prune processes that died without a goodbye, under the
// cluster-wide process_cleanup lock. Older pollers prune in processCount.
func (s *Server) startupCleanup() {
	if !s.cfg.Version.AtLeast(6, 5, 7) {
		return
	}
	if _, err := s.api.CleanupProcesses(s.hardCtx); err != nil && !isConnError(err) {
		s.log.Warn().Err(err).Str("component", "poller").Msg("process cleanup failed")
	}
}

// processCount is Poller#process_count: SCARD processes. Before 6.5 it is
// `ProcessSet.new(@count_calls % 10 == 0).size`: the first call and every
// tenth after it prune dead processes first, with no lock (6.4 has no
// process_cleanup key).
func (s *Server) processCount() (int, error) {
	conn, err := s.cfg.Pool.GetContext(s.hardCtx)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	legacy := !s.cfg.Version.AtLeast(6, 5, 0)
	if legacy && s.pollCalls%10 == 0 {
		if err := pruneProcesses64(s.hardCtx, conn); err != nil {
			return 0, err
		}
	}
	n, err := redis.Int(conn.Do("SCARD", KeyProcesses))
	if err == nil && legacy {
		s.pollCalls++
	}
	return n, err
}

// pruneProcesses64 is 6.4's ProcessSet#cleanup: SSCAN processes, a pipeline
// of `HGET <id> info`, and one SREM of the ids whose hash has expired.
func pruneProcesses64(ctx context.Context, conn redis.Conn) error {
	ids, err := sscanAll(ctx, conn, KeyProcesses)
	if err != nil || len(ids) == 0 {
		return err
	}
	for _, id := range ids {
		conn.Send("HGET", id, "info")
	}
	infos, err := redis.Values(redis.DoContext(conn, ctx, ""))
	if err != nil {
		return err
	}
	prune := []any{KeyProcesses}
	for i, info := range infos {
		if info == nil && i < len(ids) {
			prune = append(prune, ids[i])
		}
	}
	if len(prune) == 1 {
		return nil
	}
	_, err = redis.DoContext(conn, ctx, "SREM", prune...)
	return err
}

// PollResult reports one poll.
type PollResult struct {
	// Enqueued counts the jobs moved from retry and schedule to queues.
	Enqueued int
	// Buried counts unparsable members moved to the dead set.
	Buried int
}

// pollOnce moves every due job from retry, then schedule, to its queue
// through the client path, one member per script call as Sidekiq does.
func (s *Server) pollOnce(ctx context.Context) (*PollResult, error) {
	res := &PollResult{}
	script := zpopByScore(s.cfg.Version)
	for _, set := range []string{KeyRetry, KeySchedule} {
		for !s.IsQuiet() {
			member, err := s.popDue(ctx, script, set)
			if err != nil {
				return res, err
			}
			if member == nil {
				break
			}
			job, err := ParseJob(member)
			if err != nil {
				s.log.Error().Err(err).Str("component", "poller").Str("set", set).
					Msg("unparsable member moved to the dead set unchanged")
				s.bury(member)
				res.Buried++
				continue
			}
			// The member is out of the set now: retry the push through an
			// outage rather than lose it.
			err = s.retryOutage(func() error {
				_, err := s.client.Repush(s.writeCtx, job)
				return err
			})
			if err != nil {
				s.log.Error().Err(err).Str("component", "poller").Str("jid", job.JID()).
					Bytes("payload", member).Msg("could not enqueue a due job")
				return res, fmt.Errorf("sidekiq: poller enqueue %s: %w", job.JID(), err)
			}
			res.Enqueued++
		}
	}
	return res, nil
}

func (s *Server) popDue(ctx context.Context, script *redis.Script, set string) ([]byte, error) {
	conn, err := s.cfg.Pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	for attempt := 0; ; attempt++ {
		// As Enq#zpopbyscore: SCRIPT LOAD on first use, then EVALSHA, and
		// load again on NOSCRIPT (a SCRIPT FLUSH or a restarted Redis).
		// redigo's Script.Do would send EVALSHA and then a full EVAL.
		if !s.scriptLoaded {
			if err := script.Load(conn); err != nil {
				return nil, err
			}
			s.scriptLoaded = true
		}
		now := Score(s.cfg.Clock.Now())
		b, err := redis.Bytes(conn.Do("EVALSHA", script.Hash(), 1, set, now))
		var re redis.Error
		if errors.As(err, &re) && strings.HasPrefix(string(re), "NOSCRIPT") && attempt == 0 {
			s.scriptLoaded = false
			continue
		}
		if errors.Is(err, redis.ErrNil) {
			return nil, nil
		}
		return b, err
	}
}
