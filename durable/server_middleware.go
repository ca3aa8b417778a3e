package durable

import (
	"context"
	"time"

	"github.com/gojob/gojob/sidekiq"
)

// activeKey is the context key of the durable job a handler runs.
type activeKey struct{}

// activeJob is the row the server middleware locked for a running job.
type activeJob struct {
	d        *Durable
	st       store
	jid      string
	ext      time.Duration
	identity string
	lockedAt time.Time
}

// ServerMiddleware returns the server middleware of durable jobs (Amigo's
// ServerMiddleware): for a durable class it locks the job's row in the
// first database that has it (locked_by = identity, locked_at = now,
// assume_dead_at = now + extension, missing_at cleared), runs the job with
// the row in its context (for Heartbeat), then
//
//   - on success deletes the row, if it is still the one it locked (a push
//     of the same jid from inside the job replaces the lock and keeps the
//     row for the new push);
//   - on an error or a panic clears the lock, moves assume_dead_at to now +
//     extension and stores the job with error_class and error_message as
//     job_item_json, then returns the error (or re-panics) so the retry
//     logic runs as usual.
//
// With no row anywhere it logs an error and runs the job normally, as
// Ruby does. identity is the process identity (Server.Identity()), the
// locked_by value Ruby writes too. Add it early in the server chain so
// that it sees the failures of the middleware after it.
func (d *Durable) ServerMiddleware(identity string) sidekiq.ServerMiddleware {
	return func(ctx context.Context, job *sidekiq.Job, next func(context.Context) error) error {
		ext, ok := d.jobExtension(job)
		if !ok {
			return next(ctx)
		}
		jid := job.JID()
		bg := context.WithoutCancel(ctx) // bookkeeping survives a cancelled job
		lr := d.lockJob(bg, jid, identity, d.cfg.Clock.Now(), ext)
		for _, f := range lr.failed {
			d.log.Warn().Err(f).Str("component", "durable").Str("class", job.Class()).Str("jid", jid).
				Msg("durable lock: database skipped")
		}
		if lr.st == nil {
			d.log.Error().Str("component", "durable").Str("class", job.Class()).Str("jid", jid).
				Msg("DurableJob: " + job.Class() + "[" + jid + "]: no row found in database")
			err := next(ctx)
			if err == nil && len(lr.failed) > 0 {
				// The row may sit in a database that did not answer: remove it
				// now if it is back, or the reconciler would report a job that
				// completed.
				d.deleteEverywhere(bg, jid)
			}
			return err
		}
		a := &activeJob{d: d, st: lr.st, jid: jid, ext: ext, identity: identity, lockedAt: lr.lockedAt}
		failed := true
		defer func() {
			if !failed {
				return
			}
			if p := recover(); p != nil {
				d.unlock(bg, a, job, &sidekiq.PanicError{Value: p})
				panic(p)
			}
		}()
		err := next(context.WithValue(ctx, activeKey{}, a))
		failed = false
		if err != nil {
			d.unlock(bg, a, job, err)
			return err
		}
		deleted, derr := a.st.deleteLocked(bg, deleteLockedParams{JobID: jid, LockedBy: identity, LockedAt: a.lockedAt})
		switch {
		case derr != nil:
			d.log.Error().Err(derr).Str("component", "durable").Str("database", a.st.name()).Str("jid", jid).
				Msg("could not delete the durable row of a completed job; the reconciler will report it as lost")
		case !deleted:
			d.log.Debug().Str("component", "durable").Str("jid", jid).
				Msg("durable row changed while the job ran (pushed again, or reconciled); kept")
		}
		return nil
	}
}

func (d *Durable) unlock(ctx context.Context, a *activeJob, job *sidekiq.Job, failure error) {
	_, err := a.st.unlock(ctx, unlockParams{
		JobID:        a.jid,
		LockedBy:     a.identity,
		LockedAt:     a.lockedAt,
		AssumeDeadAt: d.cfg.Clock.Now().Add(a.ext),
		ItemJSON:     errorItem(job, failure),
	})
	if err != nil {
		d.log.Error().Err(err).Str("component", "durable").Str("database", a.st.name()).Str("jid", a.jid).
			Msg("could not unlock the durable row of a failed job")
	}
}

func (d *Durable) deleteEverywhere(ctx context.Context, jid string) {
	for _, s := range d.stores {
		_, _ = s.deleteJob(ctx, jid) // best effort; an unreachable database keeps its row
	}
}
