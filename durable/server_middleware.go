package durable

import (
	"context"
	"time"

	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/wire"
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
// A delete or unlock that fails because the database does not answer is
// retried in the background until it does (see Outages in the package
// doc). With no row anywhere it logs an error and runs the job normally,
// as Ruby does; if a database could not be asked and the job succeeds,
// the row is deleted there (retried likewise). identity is the process identity (Server.Identity()), the
// locked_by value Ruby writes too. Add it early in the server chain so
// that it sees the failures of the middleware after it.
func (d *Durable) ServerMiddleware(identity string) sidekiq.ServerMiddleware {
	lockAhead := func(next *wire.Job) any { return d.lockAhead(next, identity) }
	return func(ctx context.Context, job *wire.Job, next func(context.Context) error) error {
		ext, ok := d.jobExtension(job)
		if !ok {
			return next(ctx)
		}
		jid := job.JID()
		bg := context.WithoutCancel(ctx) // bookkeeping survives a cancelled job
		run := lockedAhead(ctx, jid)
		if run == nil {
			run = &jobRun{}
		}
		lr := &run.lr
		// The slot may fetch its next jobs while this one waits for its
		// lock's group, and queue their locks (sidekiq.FetchAhead).
		sidekiq.FetchAhead(ctx, lockAhead)
		if !d.waitLockAhead(bg, run) {
			d.lockJob(bg, jid, identity, d.cfg.Clock.Now(), ext, lr, &run.lockOp)
		}
		for _, f := range lr.failed {
			d.log.Warn().Err(f).Str("component", "durable").Str("class", job.Class()).Str("jid", jid).
				Msg("durable lock: database skipped")
		}
		if lr.st == nil {
			d.log.Error().Str("component", "durable").Str("class", job.Class()).Str("jid", jid).
				Msg("DurableJob: " + job.Class() + "[" + jid + "]: no row found in database")
			err := next(ctx)
			if err == nil && len(lr.failed) > 0 {
				// The row may sit in a database that could not be asked: remove
				// it there now if it is back (later if it still does not
				// answer), or the reconciler would report a job that completed.
				// The databases that answered had no row: one there now comes
				// from a push again during the job and is kept.
				d.removeUnlockedRows(bg, jid, lr)
			}
			return err
		}
		a := &run.active
		*a = activeJob{d: d, st: lr.st, jid: jid, ext: ext, identity: identity, lockedAt: lr.lockedAt}
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
		run.ctx = runCtx{Context: ctx, a: a}
		err := next(&run.ctx)
		failed = false
		if err != nil {
			d.unlock(bg, a, job, err)
			return err
		}
		dp := deleteLockedParams{JobID: jid, LockedBy: identity, LockedAt: a.lockedAt}
		if ack, ok := sidekiq.DeferAck(ctx); ok {
			// Reliable fetch: the job stays in its in-progress list until
			// its row is deleted, and the slot moves on meanwhile.
			// If the database does not answer, the job stays there until
			// the retried delete lands.
			run.delOp = gcOp{kind: gcDelete, del: dp}
			a.st.deleteLockedAsync(&run.delOp, ack, run)
			return nil
		}
		deleted, derr := a.st.deleteLocked(bg, dp)
		d.deleted(a.st, jid, dp, deleted, derr, sidekiq.DeferredAck{})
		return nil
	}
}

// jobRun is the server middleware's state for one durable job, in one
// allocation rather than one per piece: the row it locked (which the
// handler's context carries), where the lock was taken, and the ops of the
// lock and of the success delete.
type jobRun struct {
	active activeJob
	lr     lockResult
	lockOp gcOp
	delOp  gcOp
	ctx    runCtx
	// ahead is the lock queued when the job was fetched ahead (lockAhead),
	// in the store st; its lockOp is not used then.
	ahead   gcOp
	aheadSt store
}

// lockAhead queues the lock of a durable job fetched ahead of the one its
// slot runs (sidekiq.FetchAhead), so that it is committed while that one
// finishes, and returns the jobRun that carries it (nil when the job is
// not durable, or the lock must take lockJob's path: several databases, or
// writes of an outage still pending, which lockJob settles first). The
// lock is the one lockJob would take when the job starts, taken a little
// earlier: assume_dead_at is now + extension from the fetch, and a job
// given back to its queue without running keeps the lock until its next
// run takes it again, as a job pushed back at shutdown does.
func (d *Durable) lockAhead(job *wire.Job, identity string) any {
	ext, ok := d.jobExtension(job)
	if !ok || len(d.stores) != 1 || d.pend.count.Load() != 0 {
		return nil
	}
	now := d.cfg.Clock.Now()
	run := &jobRun{aheadSt: d.stores[0]}
	run.ahead = gcOp{kind: gcLock, early: true, lk: lockParams{JobID: job.JID(), LockedBy: identity, LockedAt: now, AssumeDeadAt: now.Add(ext)}}
	if run.aheadSt.lockStart(&run.ahead) != nil {
		return nil
	}
	return run
}

// lockedAhead returns the jobRun lockAhead made for the job ctx runs, nil
// when there is none.
func lockedAhead(ctx context.Context, jid string) *jobRun {
	v, ok := sidekiq.PreparedAhead(ctx)
	if !ok {
		return nil
	}
	run, _ := v.(*jobRun)
	if run == nil || run.ahead.lk.JobID != jid {
		return nil
	}
	return run
}

// waitLockAhead waits for the lock lockAhead queued for run and reports
// whether it holds the row, filling run's lockResult as lockJob would.
// false (no lock ahead, the row not found, an error, or writes of an
// outage pending since) sends the job through lockJob, which settles the
// pending writes, asks every database and reports their failures.
func (d *Durable) waitLockAhead(ctx context.Context, run *jobRun) bool {
	if run.aheadSt == nil {
		return false
	}
	found, err := run.aheadSt.lockWait(ctx, &run.ahead)
	if err != nil || !found || d.pend.count.Load() != 0 {
		return false
	}
	run.lr.st = run.aheadSt
	run.lr.lockedAt = micro(run.ahead.lk.LockedAt)
	return true
}

// answered is the answer of the success delete written through
// deleteLockedAsync (gcThen).
func (r *jobRun) answered(deleted bool, err error) (release bool) {
	a := &r.active
	return a.d.deleted(a.st, a.jid, r.delOp.del, deleted, err, r.delOp.ack)
}

// runCtx is the context a durable job's handler runs with: its parent
// with the locked row under activeKey, as context.WithValue would make it,
// kept in the jobRun.
type runCtx struct {
	context.Context
	a *activeJob
}

func (c *runCtx) Value(key any) any {
	if _, ok := key.(activeKey); ok {
		return c.a
	}
	return c.Context.Value(key)
}

// deleted handles the answer of a completed job's row delete. It reports
// whether the job's acknowledgement (ack, when deferred) may be released
// now: once the row is gone or the delete was refused. When the database
// did not answer, the retried delete releases it once it lands.
func (d *Durable) deleted(st store, jid string, dp deleteLockedParams, deleted bool, derr error, ack sidekiq.DeferredAck) (release bool) {
	release = true
	if derr != nil && st.isConnError(derr) {
		d.pend.add(&pendingWrite{st: st, jid: jid, kind: pendingDelete, del: dp, done: ack.Release})
		release = false
	}
	switch {
	case derr != nil && st.isConnError(derr):
		d.log.Warn().Err(derr).Str("component", "durable").Str("database", st.name()).Str("jid", jid).
			Msg("could not delete the durable row of a completed job: the database does not answer; retrying in the background (with reliable fetch the job stays in its in-progress list meanwhile)")
	case derr != nil:
		d.log.Error().Err(derr).Str("component", "durable").Str("database", st.name()).Str("jid", jid).
			Msg("could not delete the durable row of a completed job; the reconciler will report it as lost")
	case !deleted:
		d.log.Debug().Str("component", "durable").Str("jid", jid).
			Msg("durable row changed while the job ran (pushed again, or reconciled); kept")
	}
	return release
}

func (d *Durable) unlock(ctx context.Context, a *activeJob, job *wire.Job, failure error) {
	up := unlockParams{
		JobID:        a.jid,
		LockedBy:     a.identity,
		LockedAt:     a.lockedAt,
		AssumeDeadAt: d.cfg.Clock.Now().Add(a.ext),
		ItemJSON:     errorItem(job, failure),
	}
	_, err := a.st.unlock(ctx, up)
	switch {
	case err != nil && a.st.isConnError(err):
		d.pend.add(&pendingWrite{st: a.st, jid: a.jid, kind: pendingUnlock, unl: up})
		d.log.Warn().Err(err).Str("component", "durable").Str("database", a.st.name()).Str("jid", a.jid).
			Msg("could not unlock the durable row of a failed job: the database does not answer; retrying in the background")
	case err != nil:
		d.log.Error().Err(err).Str("component", "durable").Str("database", a.st.name()).Str("jid", a.jid).
			Msg("could not unlock the durable row of a failed job")
	}
}

// removeUnlockedRows deletes a completed job's row in the databases that
// could not be asked for the lock; one that still does not answer gets
// the delete queued for retry.
func (d *Durable) removeUnlockedRows(ctx context.Context, jid string, lr *lockResult) {
	for _, s := range lr.failedStores {
		_, err := s.deleteJob(ctx, jid)
		if err != nil && s.isConnError(err) {
			d.pend.add(&pendingWrite{st: s, jid: jid, kind: pendingRemove})
			d.log.Warn().Err(err).Str("component", "durable").Str("database", s.name()).Str("jid", jid).
				Msg("could not delete the durable row of a job that completed without its lock: the database does not answer; retrying in the background")
		}
	}
}
