package durable

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gojob/gojob/durable/internal/store"
)

// ErrRowGone is what sidekiq.Heartbeat returns for a durable job whose row
// no longer exists: the reconciler declared the job lost and moved it to
// the dead set, or the row was deleted by hand.
var ErrRowGone = errors.New("durable: the job's durable row is gone")

// beat is the job's part of sidekiq.Heartbeat: it moves the row's
// assume_dead_at to now + extension once a quarter of the extension has
// passed since the last time it did (or since the lock), so the deadline
// stays at least three quarters of the extension ahead of a job that
// beats. The write runs in the background, as a heartbeat must not wait
// for a database; its failure is logged, and a row found gone is reported
// by the next beat.
func (a *activeJob) beat(context.Context) error {
	if a.gone.Load() {
		return fmt.Errorf("durable: heartbeat %s: %w", a.jid, ErrRowGone)
	}
	now := a.d.cfg.Clock.Now()
	if now.UnixNano()-a.lastBeat.Load() < int64(a.ext/4) || !a.beating.CompareAndSwap(false, true) {
		return nil
	}
	a.lastBeat.Store(now.UnixNano())
	go func() {
		defer a.beating.Store(false)
		if _, err := a.heartbeat(context.Background(), now); err != nil && !errors.Is(err, ErrRowGone) {
			a.d.log.Warn().Err(err).Str("component", "durable").Str("jid", a.jid).
				Msg("could not move a running durable job's deadline; the next heartbeat tries again")
		}
	}()
	return nil
}

// heartbeat writes assume_dead_at = now + extension and returns it.
func (a *activeJob) heartbeat(ctx context.Context, now time.Time) (time.Time, error) {
	deadline := micro(now.Add(a.ext))
	found, err := a.st.Heartbeat(ctx, store.HeartbeatParams{JobID: a.jid, AssumeDeadAt: deadline})
	if err != nil {
		return time.Time{}, fmt.Errorf("durable: heartbeat %s on %s: %w", a.jid, a.st.Name(), err)
	}
	if !found {
		a.gone.Store(true)
		return time.Time{}, fmt.Errorf("durable: heartbeat %s: %w", a.jid, ErrRowGone)
	}
	return deadline, nil
}
