package sidekiq

import (
	"context"
	"errors"
	"time"

	"github.com/gojob/gojob/sidekiq/internal/fetch"
	"github.com/gojob/gojob/sidekiq/internal/redisx"
)

// hardShutdownGrace is how long Stop waits for the fetchers after a hard
// shutdown: the BRPOP timeout plus a second (Ruby waits 3 s for its
// processor threads).
const hardShutdownGrace = (fetch.Timeout + 1) * time.Second

// Stop shuts down gracefully: quiet, wait up to ShutdownTimeout (or ctx) for
// running jobs, push the unfinished ones back to their queues with their
// original bytes, flush stats, and remove the process from the registry.
func (s *Server) Stop(ctx context.Context) error {
	if s.life.state.Load() == stateNew {
		return errors.New("sidekiq: server not started")
	}
	if !s.life.state.CompareAndSwap(stateRunning, stateStopped) {
		<-s.life.done
		return s.life.stopErr
	}
	s.quiet()
	s.requestStop()
	fetchersDone := make(chan struct{})
	go func() { s.fetch.fetcher.Wait(); close(fetchersDone) }()
	timer := time.NewTimer(s.cfg.ShutdownTimeout)
	defer timer.Stop()
	hard := true
	select {
	case <-fetchersDone:
		hard = false
	case <-timer.C:
		s.log.Warn().Int("busy", s.proc.busy()).Msg("shutdown timeout: requeueing unfinished jobs")
	case <-ctx.Done():
		s.log.Warn().Int("busy", s.proc.busy()).Msg("shutdown cancelled: requeueing unfinished jobs")
	}
	// The caller's ctx may be spent by now; the requeue and the goodbye
	// still get a few seconds of their own, since skipping them loses jobs.
	final, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	stopWrites := context.AfterFunc(final, s.redis.writeStop)
	defer stopWrites()
	// Give up the running jobs before cancelling their contexts: a handler
	// that returns as soon as its context ends must find its job already
	// abandoned (Ruby raises Sidekiq::Shutdown, which is never retried),
	// not fail it into the retry set or, with retry: false, drop it.
	units := s.proc.abandonRunning()
	s.life.hardStop()
	s.proc.cancelRunning()
	var errs []error
	if err := s.fetch.fetcher.Requeue(units); err != nil {
		errs = append(errs, err)
	}
	if hard {
		// As manager.rb#hard_shutdown, give the fetchers up to 3 s: an
		// idle one may still be in its 2 s BRPOP and receive a job (the
		// requeued ones included), which it must push back before the
		// process goes; a failure may still be writing its retry entry.
		grace := time.NewTimer(hardShutdownGrace)
		select {
		case <-fetchersDone:
		case <-grace.C:
			s.log.Warn().Str("waited", redisx.LogDuration(hardShutdownGrace)).Msg("shutdown: some fetchers did not stop (a handler ignoring its cancelled context?); leaving them behind")
		case <-final.Done():
		}
		grace.Stop()
	}
	// Acknowledgements held back by an extension (Run.HoldAck) land before
	// the fetch closes; one still held at the deadline leaves its job in
	// the in-progress list, which the close gives back to its queue.
	acked := make(chan struct{})
	go func() { s.proc.held.Wait(); close(acked) }()
	select {
	case <-acked:
	case <-final.Done():
		s.log.Warn().Msg("shutdown: acknowledgements held back by an extension did not land in time; their jobs go back to their queues")
	}
	s.fetch.fetcher.Close()
	if err := s.stopServices(final, s.services); err != nil {
		errs = append(errs, err)
	}
	s.maint.pauseCancel()
	<-s.maint.pauseDone
	if s.maint.poller != nil {
		if err := s.maint.poller.Stop(final); err != nil {
			errs = append(errs, err)
		}
	}
	if err := s.maint.heartbeat.Stop(final); err != nil {
		errs = append(errs, err)
	}
	if err := s.maint.heartbeat.Unregister(final); err != nil {
		errs = append(errs, err)
	}
	if err := s.maint.follower.Unregister(final); err != nil {
		errs = append(errs, err)
	}
	s.redis.writeStop()
	s.redis.outage.Close()
	s.life.stopErr = errors.Join(errs...)
	close(s.life.done)
	s.log.Info().Str("identity", s.identity).Msg("gojob stopped")
	return s.life.stopErr
}
