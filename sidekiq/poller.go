package sidekiq

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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
	// As the 6.5.7+ poller: prune processes that died without a goodbye,
	// under the cluster-wide process_cleanup lock.
	if _, err := s.api.CleanupProcesses(s.hardCtx); err != nil && !isConnError(err) {
		s.log.Warn().Err(err).Str("component", "poller").Msg("process cleanup failed")
	}
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
// processes, and 0–2 × interval (8.0.10+) or 0–1 × interval from 10.
func (s *Server) pollSleep() time.Duration {
	count := 1
	if n, err := s.processCount(); err == nil && n > 0 {
		count = n
	}
	interval := s.cfg.PollIntervalAverage
	if interval == 0 {
		interval = averagePollInterval * time.Duration(count)
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

func (s *Server) processCount() (int, error) {
	conn, err := s.cfg.Pool.GetContext(s.hardCtx)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	return redis.Int(conn.Do("SCARD", KeyProcesses))
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
				_, err := s.client.Repush(s.hardCtx, job)
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
	now := Score(s.cfg.Clock.Now())
	b, err := redis.Bytes(script.Do(conn, set, now))
	if errors.Is(err, redis.ErrNil) {
		return nil, nil
	}
	return b, err
}
