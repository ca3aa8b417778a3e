package sidekiq

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/gojob/gojob/internal/fetchmode"
	"github.com/gojob/gojob/sidekiq/internal/fetch"
	"github.com/gojob/gojob/sidekiq/internal/maintenance"
)

// Start starts fetching, the heartbeat and the poller, and returns.
func (s *Server) Start(ctx context.Context) error {
	if !s.life.state.CompareAndSwap(stateNew, stateRunning) {
		return errClosed
	}
	s.maint.info.StartedAt = s.cfg.Clock.Now()
	_, err := s.maint.follower.Check(ctx)
	s.maint.checkedAtStart.Store(err == nil || errors.Is(err, maintenance.ErrVersionUnreadable))
	if errors.Is(err, maintenance.ErrVersionUnreadable) {
		if !s.cfg.ForceVersion {
			s.life.state.Store(stateNew)
			return fmt.Errorf("sidekiq: %w; ServerConfig.ForceVersion (--force-version) writes it anyway", err)
		}
		s.log.Error().Str("component", "version").Msg(err.Error() + "; writing it anyway (ForceVersion)")
	}
	if err := s.maint.heartbeat.Beat(ctx); err != nil {
		s.log.Warn().Err(err).Str("component", "heartbeat").Msg("first heartbeat failed; retrying in the background")
	}
	s.checkPauses(ctx) // no fetch from a queue paused before the start
	if err := s.startServices(ctx); err != nil {
		s.life.state.Store(stateNew)
		return err
	}
	fetcher, err := s.newFetcher(ctx)
	if err != nil {
		s.stopServices(context.WithoutCancel(ctx), s.services)
		s.life.state.Store(stateNew)
		return err
	}
	s.fetch.fetcher = fetcher
	s.proc.fetcher = fetcher
	s.fetch.depth.Store(int32(s.fetch.fetcher.Depth()))
	s.fetch.fetcher.Start()
	s.fetch.running.Store(true)
	pauseCtx, pauseCancel := context.WithCancel(context.Background())
	s.maint.pauseCancel, s.maint.pauseDone = pauseCancel, make(chan struct{})
	go func() {
		defer close(s.maint.pauseDone)
		s.watchPauses(pauseCtx)
	}()
	s.maint.heartbeat.Start(s.life.hardCtx)
	if s.maint.poller != nil {
		s.maint.poller.Start(s.life.hardCtx)
	}
	s.log.Info().Str("identity", s.identity).Int("concurrency", s.cfg.Concurrency).Str("fetch", s.cfg.Fetch).
		Str("queues", s.fetch.order.String()).Str("sidekiq_version", s.format.Format().String()).
		Func(func(e *zerolog.Event) {
			if s.proc.caps != nil {
				e.Str("queue_concurrency", s.proc.caps.String())
			}
		}).Msg("gojob started")
	return nil
}

// newFetcher builds the fetch of the configured mode. The reliable fetch
// writes its heartbeat and registers its lists here, retrying through a
// Redis outage until ctx ends.
func (s *Server) newFetcher(ctx context.Context) (fetch.Fetcher, error) {
	fc := &fetch.Config{
		Pool:        s.cfg.Pool,
		Dial:        s.cfg.Dial,
		Order:       s.fetch.order,
		Concurrency: s.cfg.Concurrency,
		Pipeline:    s.cfg.FetchPipeline,
		Quiet:       s.life.quietCh,
		Process:     s.proc.process,
		Writes:      s.redis.writes,
		Outage:      &s.redis.outage,
		Logger:      s.log,
		Health:      &s.fetch.health,

		ReliableConfig: fetch.ReliableConfig{
			Identity:         s.identity,
			Format:           s.format,
			Clock:            s.cfg.Clock,
			RecoveryLimit:    s.cfg.RecoveryLimit,
			RecoveryInterval: s.cfg.RecoveryInterval,
			AheadDepth:       s.cfg.FetchAhead,
			AheadHold:        s.cfg.FetchAheadHold,
			Prepare:          s.aheadPrepare(),
			Died:             s.proc.death,
			Stats:            &s.fetch.stats,
		},
	}
	switch s.cfg.Fetch {
	case fetchmode.Batch:
		return fetch.NewBatch(fc)
	case fetchmode.Reliable:
		return fetch.NewReliable(ctx, fc)
	}
	return fetch.NewBRPOP(fc), nil
}

// aheadPrepare is the prepare of the fetches ahead the reliable fetch
// makes on its own while every slot is busy; nil (none) with queue caps,
// which count the jobs running, not those held ahead: a slot holding a
// capped queue's jobs ahead would only give them back.
//
// Without extensions there is nothing to prepare before the slot takes
// a job: the slot parses it then, on its own goroutine, rather than the
// batcher, which queues the jobs of every slot.
func (s *Server) aheadPrepare() func(*fetch.Unit) {
	if len(s.cfg.QueueConcurrency) > 0 {
		return nil
	}
	if len(s.proc.prepares) == 0 {
		return func(*fetch.Unit) {}
	}
	return s.proc.prepareAhead
}

// Run starts the server and blocks until ctx is done or a TERM signal
// arrives through Redis, then stops it gracefully. A ctx that ends while
// the server is still starting is a normal stop: Run returns nil.
func (s *Server) Run(ctx context.Context) error {
	if err := s.Start(ctx); err != nil {
		if ctx.Err() != nil && s.life.state.Load() == stateNew {
			// Stopped while starting (a dial or setup cut short by
			// the cancellation): nothing runs, so nothing failed.
			return nil
		}
		return err
	}
	select {
	case <-ctx.Done():
	case <-s.life.stopCh:
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout+10*time.Second)
	defer cancel()
	return s.Stop(stopCtx)
}
