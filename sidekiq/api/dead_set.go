package api

import (
	"context"
	"fmt"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq/wire"
	"github.com/gomodule/redigo/redis"
)

// KillOpts are per-kill settings. A nil *KillOpts means Ruby's defaults.
type KillOpts struct {
	// SkipDeathHandlers does not call the death handlers (Ruby's
	// notify_failure: false).
	SkipDeathHandlers bool
}

// Kill adds payload to the dead set (Ruby's DeadSet#kill): the ZADD and
// trim transaction of sendToMorgue, then, unless opts says not to, every
// Config.DeathHandlers with ErrKilledByAPI. The payload is stored
// unchanged; no error fields are added. A payload that is not a JSON object
// is stored too, but no handler is called for it (Ruby raises a
// JSON::ParserError after storing it). Only the dead set takes payloads:
// on the retry or schedule set Kill returns an error (SortedEntry.Kill
// moves an entry of those to the dead set).
func (s *JobSet) Kill(ctx context.Context, payload []byte, opts *KillOpts) error {
	if s.name != contract.KeyDead {
		return fmt.Errorf("sidekiq: kill: payloads are killed into the dead set, not %s", s.name)
	}
	conn, err := s.api.conn(ctx, "kill")
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = s.kill(ctx, conn, payload, opts)
	return err
}

// kill adds payload to the dead set and returns how many entries the
// set's limits dropped (contract.SendToMorgue).
func (s *JobSet) kill(ctx context.Context, conn redis.Conn, payload []byte, opts *KillOpts) (int64, error) {
	dropped, err := contract.SendToMorgue(ctx, conn, contract.MorgueParams{Payload: payload, Now: s.api.clock.Now(), Limits: s.api.morgue})
	if err != nil {
		return 0, err
	}
	if (opts != nil && opts.SkipDeathHandlers) || len(s.api.handlers) == 0 {
		return dropped, nil
	}
	job, perr := wire.ParseJob(payload)
	if perr != nil {
		return dropped, nil
	}
	for _, h := range s.api.handlers {
		h(ctx, job, ErrKilledByAPI)
	}
	return dropped, nil
}

// DeadLimits are the dead set's limits this API trims it to: Sidekiq's
// dead_max_jobs (the trim keeps at most MaxJobs-1 entries, as Ruby's) and
// dead_timeout_in_seconds (Config.DeadMaxJobs, Config.DeadTimeout).
func (a *API) DeadLimits() contract.MorgueLimits { return a.morgue.OrDefault() }
