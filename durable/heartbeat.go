package durable

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrNoActiveJob is returned by Heartbeat when its context does not carry
// a durable job (Ruby's "DurableJob.heartbeat called but no durable job is
// in TLS").
var ErrNoActiveJob = errors.New("durable: heartbeat called but no durable job is active in ctx")

// ErrRowGone is returned by Heartbeat when the job's row no longer exists:
// the reconciler declared the job lost and moved it to the dead set, or the
// row was deleted by hand.
var ErrRowGone = errors.New("durable: the job's durable row is gone")

// Heartbeat pushes the deadline of the durable job running in ctx to now +
// its extension, so that a long job is not taken for lost (Amigo's
// heartbeat!). Call it from the handler with the context it received, more
// often than the extension. It returns the new deadline.
func Heartbeat(ctx context.Context) (time.Time, error) {
	a, _ := ctx.Value(activeKey{}).(*activeJob)
	if a == nil {
		return time.Time{}, ErrNoActiveJob
	}
	deadline := micro(a.d.cfg.Clock.Now().Add(a.ext))
	found, err := a.st.heartbeat(context.WithoutCancel(ctx), heartbeatParams{JobID: a.jid, AssumeDeadAt: deadline})
	if err != nil {
		return time.Time{}, fmt.Errorf("durable: heartbeat %s on %s: %w", a.jid, a.st.name(), err)
	}
	if !found {
		return time.Time{}, fmt.Errorf("durable: heartbeat %s: %w", a.jid, ErrRowGone)
	}
	return deadline, nil
}

// Active reports whether ctx carries a durable job, and its jid.
func Active(ctx context.Context) (jid string, ok bool) {
	a, _ := ctx.Value(activeKey{}).(*activeJob)
	if a == nil {
		return "", false
	}
	return a.jid, true
}
