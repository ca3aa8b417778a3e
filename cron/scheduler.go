package cron

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/rs/zerolog"

	"github.com/gojob/gojob/internal/cronschedule"
)

// Scheduler enqueues the schedule's due ticks, as the gem's poller does,
// beside any number of gojob and Ruby pollers: each tick is pushed once.
// Only a job's latest tick is considered, and only within Grace of it (the
// gem's reschedule_grace_period): a process down across ticks does not
// replay them. Unlike the gem, the tick's claim and the push are one Redis
// script, so a crash between them cannot lose a tick.
type Scheduler struct {
	Store *Store
	// Interval is the average pass interval (the gem's cron_poll_interval,
	// 30 s); each wait is random in [Interval/2, 3*Interval/2], as Sidekiq's
	// poller jitters.
	Interval time.Duration
	// Grace is how late a tick may still be enqueued (default 60 s).
	Grace  time.Duration
	Logger zerolog.Logger

	warned map[string]string // job → cron line already reported invalid
}

func (s *Scheduler) grace() time.Duration {
	if s.Grace <= 0 {
		return 60 * time.Second
	}
	return s.Grace
}

// Run makes passes until ctx ends.
func (s *Scheduler) Run(ctx context.Context) {
	interval := s.Interval
	if interval <= 0 {
		interval = 30 * time.Second
	}
	wait := time.Duration(float64(5*time.Second)*rand.Float64()) + interval/3
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		if _, err := s.Pass(ctx); err != nil {
			if !failing && ctx.Err() == nil {
				s.Logger.Error().Err(err).Str("component", "cron").Msg("cron pass failed; retrying every pass, logged once until it succeeds")
			}
			failing = true
		} else if failing {
			s.Logger.Info().Str("component", "cron").Msg("cron passes succeed again")
			failing = false
		}
		wait = interval/2 + time.Duration(float64(interval)*rand.Float64())
	}
}

// Pass looks at every job once and pushes those with a due tick that no
// process has claimed; it returns how many it pushed.
func (s *Scheduler) Pass(ctx context.Context) (int, error) {
	jobs, err := s.Store.List(ctx)
	if err != nil {
		return 0, err
	}
	now := s.Store.clock().Now()
	pushed := 0
	for _, j := range jobs {
		if !j.Enabled {
			continue
		}
		sched, err := cronschedule.Parse(j.Cron)
		if err != nil {
			if s.warned == nil {
				s.warned = map[string]string{}
			}
			if s.warned[j.Name] != j.Cron {
				s.warned[j.Name] = j.Cron
				s.Logger.Warn().Str("component", "cron").Str("job", j.Name).Err(err).Msg("cron job skipped: its schedule cannot be parsed")
			}
			continue
		}
		tick, ok := sched.Previous(now, s.grace(), s.Store.Location)
		if !ok {
			continue
		}
		if !j.LastEnqueue.IsZero() && j.LastEnqueue.Unix() >= tick.Unix() {
			continue // pushed at or after this tick (also by "Enqueue now")
		}
		jid, did, err := s.Store.enqueue(ctx, j, tick)
		if err != nil {
			s.Logger.Error().Str("component", "cron").Str("job", j.Name).Err(err).Msg("cron job not enqueued")
			continue
		}
		if did {
			pushed++
			s.Logger.Info().Str("component", "cron").Str("job", j.Name).Str("jid", jid).
				Time("tick", tick).Msg("cron job enqueued")
		}
	}
	return pushed, nil
}
