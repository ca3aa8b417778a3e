package sidekiq

import (
	"context"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq/internal/redisx"
)

// pauseCheckEvery is how often a server reads the paused queues: a pause
// stops new jobs of that queue from starting within about this long (a
// job a blocked fetch pops after the pause goes back to its queue).
const pauseCheckEvery = 500 * time.Millisecond

// watchPauses keeps the fetch order's paused queues in step with
// contract.KeyPausedQueues until ctx ends. A failed read keeps the last state
// (the outage is logged by the fetch).
func (s *Server) watchPauses(ctx context.Context) {
	t := time.NewTicker(pauseCheckEvery)
	defer t.Stop()
	for {
		s.checkPauses(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *Server) checkPauses(ctx context.Context) {
	conn, err := s.cfg.Pool.GetContext(ctx)
	if err != nil {
		return
	}
	defer conn.Close()
	names, err := redis.Strings(redis.DoContext(conn, ctx, "SMEMBERS", contract.KeyPausedQueues))
	if err != nil {
		if !redisx.IsConnError(err) && ctx.Err() == nil {
			s.log.Warn().Err(err).Str("component", "pause").Msg("could not read the paused queues")
		}
		return
	}
	if s.fetch.order.SetPaused(names) {
		var paused []string
		for _, q := range s.fetch.order.Names() {
			if s.fetch.order.PausedByRedis(q) {
				paused = append(paused, q)
			}
		}
		s.log.Info().Str("component", "pause").Strs("paused", paused).Msg("paused queues changed")
	}
}
