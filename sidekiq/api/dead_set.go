package api

import (
	"context"

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
// JSON::ParserError after storing it).
func (d *DeadSet) Kill(ctx context.Context, payload []byte, opts *KillOpts) error {
	conn, err := d.api.conn(ctx, "kill")
	if err != nil {
		return err
	}
	defer conn.Close()
	return d.kill(ctx, conn, payload, opts)
}

func (d *DeadSet) kill(ctx context.Context, conn redis.Conn, payload []byte, opts *KillOpts) error {
	err := wire.SendToMorgue(ctx, conn, wire.MorgueParams{Payload: payload, Now: d.api.clock.Now(), Limits: d.api.morgue})
	if err != nil {
		return err
	}
	if (opts != nil && opts.SkipDeathHandlers) || len(d.api.handlers) == 0 {
		return nil
	}
	job, perr := wire.ParseJob(payload)
	if perr != nil {
		return nil
	}
	for _, h := range d.api.handlers {
		h(ctx, job, ErrKilledByAPI)
	}
	return nil
}
