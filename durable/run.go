package durable

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/gojob/gojob/durable/internal/store"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/wire"
)

// activeKey is the context key of the durable job a handler runs.
type activeKey struct{}

// activeJob is the row Run locked for a running job.
type activeJob struct {
	d        *Durable
	st       store.Store
	jid      string
	ext      time.Duration
	identity string
	lockedAt time.Time
	// The heartbeat's state (heartbeat.go): the time of the last deadline
	// written (Unix nanoseconds), a write in flight, and the row found gone.
	lastBeat atomic.Int64
	beating  atomic.Bool
	gone     atomic.Bool
}

var _ sidekiq.Extension = (*Durable)(nil)

// Run runs a job as Amigo's ServerMiddleware does (sidekiq.Extension):
// for a durable class it locks the job's row in the first database that
// has it (locked_by = the process identity, locked_at = now,
// assume_dead_at = now + extension, missing_at cleared), runs the job,
// then
//
//   - on success deletes the row, if it is still the one it locked (a push
//     of the same jid from inside the job replaces the lock and keeps the
//     row for the new push);
//   - on an error or a panic clears the lock, moves assume_dead_at to now +
//     extension and stores the job with error_class and error_message as
//     job_item_json, then returns the error (or re-panics) so the retry
//     logic runs as usual.
//
// While the job runs, each sidekiq.Heartbeat moves assume_dead_at to now
// + extension (at most once a quarter of the extension, in the
// background), so that a long job is not taken for lost (Amigo's
// heartbeat!).
//
// With one PostgreSQL database (and no Adopt, no outage writes pending)
// the job starts as soon as its lock is queued, and a success before a
// group took the lock writes the delete in the lock's place (queueLock);
// a failure waits for the lock before the unlock.
//
// Otherwise, with the reliable fetch the slot takes its next jobs while this one
// waits for its lock's group (their locks queued as they arrive:
// Prepare), and a success leaves its in-progress list only once its row
// is gone, while the slot already runs the next job: a crash in between
// leaves the job recoverable rather than lost.
//
// A delete or unlock that fails because the database does not answer is
// retried in the background until it does (see Outages in the package
// doc). With no row anywhere it writes one when Config.Adopt is set and
// every database answered; otherwise it logs an error and runs the job
// normally, as Ruby does; if a database could not be asked and the job succeeds,
// the row is deleted there (retried likewise).
func (d *Durable) Run(ctx context.Context, r *sidekiq.Run, next func(context.Context) error) error {
	job, identity := r.Job, r.Identity
	ext, ok := d.jobExtension(job)
	if !ok {
		return next(ctx)
	}
	jid := job.JID()
	bg := context.WithoutCancel(ctx) // bookkeeping survives a cancelled job
	run, _ := r.Prepared.(*jobRun)
	if run == nil || run.ahead.JID() != jid {
		run = &jobRun{}
	}
	lr := &run.lr
	if run.aheadSt == nil && d.startsUnlocked() {
		d.queueLock(bg, run, jid, job.Class(), identity, ext)
	}
	if !run.unlocked {
		// The slot may fetch its next jobs while this one waits for its
		// lock's group, and queue their locks (Prepare).
		r.FetchAhead()
		if !d.waitLockAhead(bg, run) {
			d.lockJob(bg, jid, identity, d.cfg.Clock.Now(), ext, lr, &run.lockOp)
		}
	}
	for _, f := range lr.failed {
		d.log.Warn().Err(f).Str("component", "durable").Str("class", job.Class()).Str("jid", jid).
			Msg("durable lock: database skipped")
	}
	if lr.st == nil && d.cfg.Adopt && len(lr.failed) == 0 {
		// Every database answered and none has the row: write it now.
		if _, err := d.insert(bg, &insertParams{Job: job, Extension: ext}); err == nil {
			*lr = lockResult{}
			d.lockJob(bg, jid, identity, d.cfg.Clock.Now(), ext, lr, &store.Op{})
		} else {
			d.log.Warn().Err(err).Str("component", "durable").Str("class", job.Class()).Str("jid", jid).
				Msg("could not write the durable row of a job that started without one")
		}
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
	a.lastBeat.Store(lr.lockedAt.UnixNano())
	r.OnHeartbeat(a.beat)
	failed := true
	defer func() {
		if !failed {
			return
		}
		if p := recover(); p != nil {
			if d.lockLanded(bg, run, job) {
				d.unlock(bg, a, job, &sidekiq.PanicError{Value: p})
			}
			panic(p)
		}
	}()
	run.ctx = runCtx{Context: ctx, run: run}
	err := next(&run.ctx)
	failed = false
	if err != nil {
		if d.lockLanded(bg, run, job) {
			d.unlock(bg, a, job, err)
		}
		return err
	}
	if run.unlocked {
		d.completeUnlocked(bg, r, run, job)
		return nil
	}
	dp := store.DeleteParams{JobID: jid, LockedBy: identity, LockedAt: a.lockedAt}
	if release, ok := r.HoldAck(); ok {
		// Reliable fetch: the job stays in its in-progress list until
		// its row is deleted, and the slot moves on meanwhile.
		// If the database does not answer, the job stays there until
		// the retried delete lands.
		run.delOp.SetDelete(dp)
		run.release = release
		a.st.Group().DeleteAsync(&run.delOp, run)
		return nil
	}
	deleted, derr := a.st.DeleteLocked(bg, dp)
	d.deleted(a.st, jid, dp, deleted, derr, nil)
	return nil
}

// Prepare queues the lock of a durable job fetched ahead of the one its
// slot runs (sidekiq.Extension), so that it is committed while that one
// finishes; Run finds it in the job's Prepared.
func (d *Durable) Prepare(r *sidekiq.Run) any { return d.lockAhead(r.Job, r.Identity) }

// jobRun is the server middleware's state for one durable job, in one
// allocation rather than one per piece: the row it locked (which the
// handler's context carries), where the lock was taken, and the ops of the
// lock and of the success delete, with the acknowledgement the delete
// releases.
type jobRun struct {
	active activeJob
	lr     lockResult
	lockOp store.Op
	delOp  store.Op
	// release lets the job's acknowledgement go once its row is deleted.
	release func()
	ctx     runCtx
	// ahead is the lock queued when the job was fetched ahead (lockAhead),
	// in the store st; its lockOp is not used then.
	ahead   store.Op
	aheadSt store.Store
	// unlocked marks a job that started without waiting for its lock
	// (queueLock): lockOp is queued, and may become its success delete.
	unlocked bool
	class    string
}

// startsUnlocked reports whether a durable job starts as soon as its
// lock is queued, without waiting for it to be committed (queueLock):
// with one PostgreSQL database, no writes of an outage pending, and no
// Adopt (which writes a missing row before the job runs).
func (d *Durable) startsUnlocked() bool {
	return len(d.stores) == 1 && d.stores[0].Kind() == "postgres" && !d.cfg.Adopt && d.pend.Len() == 0
}

// unlockedBacklog bounds the writes waiting for a group when a job is to
// start without waiting for its lock: past it, the job waits for the
// groups ahead of it to be written first (queueLock). Jobs that do not
// wait would otherwise complete faster than the database deletes their
// rows, and their acknowledgements, held until then, would pile up; so
// the slots run at the database's pace, and the locks still queued are
// still replaced by deletes.
const unlockedBacklog = 2000

// queueLock queues the lock of a job about to start, which then runs
// without waiting for it. A job that completes before a group took its
// lock writes its success delete in the lock's place
// (store.Group.DeleteInsteadOfLock), and its row is written once instead of
// twice (an UPDATE and a DELETE); a longer job has its lock written by
// the next group, a few milliseconds after its start, with locked_at and
// assume_dead_at from its start.
func (d *Durable) queueLock(ctx context.Context, run *jobRun, jid, class, identity string, ext time.Duration) {
	st := d.stores[0]
	st.Group().WaitQueue(ctx, unlockedBacklog)
	now := d.cfg.Clock.Now()
	run.lockOp.SetLock(store.LockParams{JobID: jid, LockedBy: identity, LockedAt: now, AssumeDeadAt: now.Add(ext)}, true)
	if st.Group().LockStart(&run.lockOp) != nil {
		return // closed: lockJob reports it
	}
	run.lr.st = st
	run.lr.lockedAt = micro(now)
	run.unlocked = true
	run.class = class
}

// lockLanded waits for the lock of a job that started without waiting for
// it (queueLock) and reports whether it holds the row (true for a job that
// waited for its lock at start). Without it, the job's failure leaves the
// row as it is: either there is none, or the database did not answer, and
// the row keeps its deadline.
func (d *Durable) lockLanded(ctx context.Context, run *jobRun, job *wire.Job) bool {
	if !run.unlocked {
		return true
	}
	found, err := run.lr.st.Group().Wait(ctx, &run.lockOp)
	if err == nil && found {
		return true
	}
	d.lockMissed(run.lr.st, job, err)
	return false
}

// lockMissed logs the lock of a job that started without waiting for it
// and found no row (as lockJob's caller does) or failed.
func (d *Durable) lockMissed(st store.Store, job *wire.Job, err error) {
	if err != nil {
		d.log.Warn().Err(err).Str("component", "durable").Str("database", st.Name()).Str("class", job.Class()).Str("jid", job.JID()).
			Msg("durable lock: database skipped")
		return
	}
	d.log.Error().Str("component", "durable").Str("class", job.Class()).Str("jid", job.JID()).
		Msg("DurableJob: " + job.Class() + "[" + job.JID() + "]: no row found in database")
}

// completeUnlocked deletes the row of a job that started without waiting
// for its lock and succeeded: in the lock's place when no group took the
// lock yet, otherwise after the lock, as a locked job's delete.
func (d *Durable) completeUnlocked(ctx context.Context, r *sidekiq.Run, run *jobRun, job *wire.Job) {
	a := &run.active
	release, hold := r.HoldAck()
	var then store.Then
	if hold {
		run.release = release
		then = run
	}
	if a.st.Group().DeleteInsteadOfLock(&run.lockOp, then) {
		if !hold {
			deleted, err := a.st.Group().Wait(ctx, &run.lockOp)
			d.deletedUnlocked(a.st, a.jid, job.Class(), deleted, err, nil)
		}
		return
	}
	found, err := a.st.Group().Wait(ctx, &run.lockOp)
	if err != nil || !found {
		d.lockMissed(a.st, job, err)
		if err != nil {
			// The row may be there: remove it once the database answers,
			// as for a job that ran while its database did not answer.
			d.removeUnlockedRows(ctx, a.jid, &lockResult{failedStores: []store.Store{a.st}})
		}
		if hold {
			release()
		}
		return
	}
	dp := store.DeleteParams{JobID: a.jid, LockedBy: a.identity, LockedAt: a.lockedAt}
	if hold {
		run.delOp.SetDelete(dp)
		a.st.Group().DeleteAsync(&run.delOp, run)
		return
	}
	deleted, derr := a.st.DeleteLocked(ctx, dp)
	d.deleted(a.st, a.jid, dp, deleted, derr, nil)
}

// deletedUnlocked handles the answer of a delete written in its job's
// lock's place (store.Group.DeleteInsteadOfLock), as deleted does for a locked
// job's: a database that did not answer gets the removal retried (the row
// was never locked, so it is removed whatever its lock), and no row means
// the job ran without one.
func (d *Durable) deletedUnlocked(st store.Store, jid, class string, deleted bool, derr error, ack func()) (release bool) {
	switch {
	case derr != nil && st.IsConnError(derr):
		d.pend.Add(&store.PendingWrite{Store: st, JID: jid, Kind: store.PendingRemove, Done: ack})
		d.log.Warn().Err(derr).Str("component", "durable").Str("database", st.Name()).Str("jid", jid).
			Msg("could not delete the durable row of a completed job: the database does not answer; retrying in the background (with reliable fetch the job stays in its in-progress list meanwhile)")
		return false
	case derr != nil:
		d.log.Error().Err(derr).Str("component", "durable").Str("database", st.Name()).Str("jid", jid).
			Msg("could not delete the durable row of a completed job; the reconciler will report it as lost")
	case !deleted:
		d.log.Error().Str("component", "durable").Str("class", class).Str("jid", jid).
			Msg("DurableJob: " + class + "[" + jid + "]: no row found in database")
	}
	return true
}

// lockAhead queues the lock of a durable job fetched ahead of the one its
// slot runs (Prepare), so that it is committed while that one
// finishes, and returns the jobRun that carries it (nil when the job is
// not durable, or the lock must take lockJob's path: several databases, or
// writes of an outage still pending, which lockJob settles first). The
// lock is the one lockJob would take when the job starts, taken a little
// earlier: assume_dead_at is now + extension from the fetch, and a job
// given back to its queue without running keeps the lock until its next
// run takes it again, as a job pushed back at shutdown does.
func (d *Durable) lockAhead(job *wire.Job, identity string) any {
	ext, ok := d.jobExtension(job)
	if !ok || len(d.stores) != 1 || d.pend.Len() != 0 || d.startsUnlocked() {
		return nil
	}
	now := d.cfg.Clock.Now()
	run := &jobRun{aheadSt: d.stores[0]}
	run.ahead.SetLock(store.LockParams{JobID: job.JID(), LockedBy: identity, LockedAt: now, AssumeDeadAt: now.Add(ext)}, true)
	if run.aheadSt.Group().LockStart(&run.ahead) != nil {
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
	found, err := run.aheadSt.Group().Wait(ctx, &run.ahead)
	if err != nil || !found || d.pend.Len() != 0 {
		return false
	}
	run.lr.st = run.aheadSt
	run.lr.lockedAt = micro(run.ahead.LockedAt())
	return true
}

// Answered is the answer of the success delete written through
// Group.DeleteAsync (store.Then).
func (r *jobRun) Answered(deleted bool, err error) (release bool) {
	a := &r.active
	if r.lockOp.DeleteUnlocked() {
		return a.d.deletedUnlocked(a.st, a.jid, r.class, deleted, err, r.release)
	}
	dp := store.DeleteParams{JobID: a.jid, LockedBy: a.identity, LockedAt: a.lockedAt}
	return a.d.deleted(a.st, a.jid, dp, deleted, err, r.release)
}

// releaseAcks releases the acknowledgements of the jobs whose row deletes
// a group committed (store.Options.Release).
func releaseAcks(runs []store.Then) {
	for _, r := range runs {
		if release := r.(*jobRun).release; release != nil {
			release()
		}
	}
}

// runCtx is the context a durable job's handler runs with: its parent
// with the locked row under activeKey, as context.WithValue would make it,
// kept in the jobRun.
type runCtx struct {
	context.Context
	run *jobRun
}

func (c *runCtx) Value(key any) any {
	switch key.(type) {
	case activeKey:
		return &c.run.active
	case runKey:
		return c.run
	}
	return c.Context.Value(key)
}

type runKey struct{}

// deleted handles the answer of a completed job's row delete. It reports
// whether the job's acknowledgement (release, when held) may be released
// now: once the row is gone or the delete was refused. When the database
// did not answer, the retried delete releases it once it lands.
func (d *Durable) deleted(st store.Store, jid string, dp store.DeleteParams, deleted bool, derr error, ack func()) (release bool) {
	release = true
	if derr != nil && st.IsConnError(derr) {
		d.pend.Add(&store.PendingWrite{Store: st, JID: jid, Kind: store.PendingDelete, Delete: dp, Done: ack})
		release = false
	}
	switch {
	case derr != nil && st.IsConnError(derr):
		d.log.Warn().Err(derr).Str("component", "durable").Str("database", st.Name()).Str("jid", jid).
			Msg("could not delete the durable row of a completed job: the database does not answer; retrying in the background (with reliable fetch the job stays in its in-progress list meanwhile)")
	case derr != nil:
		d.log.Error().Err(derr).Str("component", "durable").Str("database", st.Name()).Str("jid", jid).
			Msg("could not delete the durable row of a completed job; the reconciler will report it as lost")
	case !deleted:
		d.log.Debug().Str("component", "durable").Str("jid", jid).
			Msg("durable row changed while the job ran (pushed again, or reconciled); kept")
	}
	return release
}

func (d *Durable) unlock(ctx context.Context, a *activeJob, job *wire.Job, failure error) {
	up := store.UnlockParams{
		JobID:        a.jid,
		LockedBy:     a.identity,
		LockedAt:     a.lockedAt,
		AssumeDeadAt: d.cfg.Clock.Now().Add(a.ext),
		ItemJSON:     errorItem(job, failure),
	}
	_, err := a.st.Unlock(ctx, up)
	switch {
	case err != nil && a.st.IsConnError(err):
		d.pend.Add(&store.PendingWrite{Store: a.st, JID: a.jid, Kind: store.PendingUnlock, Unlock: up})
		d.log.Warn().Err(err).Str("component", "durable").Str("database", a.st.Name()).Str("jid", a.jid).
			Msg("could not unlock the durable row of a failed job: the database does not answer; retrying in the background")
	case err != nil:
		d.log.Error().Err(err).Str("component", "durable").Str("database", a.st.Name()).Str("jid", a.jid).
			Msg("could not unlock the durable row of a failed job")
	}
}

// removeUnlockedRows deletes a completed job's row in the databases that
// could not be asked for the lock; one that still does not answer gets
// the delete queued for retry.
func (d *Durable) removeUnlockedRows(ctx context.Context, jid string, lr *lockResult) {
	for _, s := range lr.failedStores {
		_, err := s.DeleteJob(ctx, jid)
		if err != nil && s.IsConnError(err) {
			d.pend.Add(&store.PendingWrite{Store: s, JID: jid, Kind: store.PendingRemove})
			d.log.Warn().Err(err).Str("component", "durable").Str("database", s.Name()).Str("jid", jid).
				Msg("could not delete the durable row of a job that completed without its lock: the database does not answer; retrying in the background")
		}
	}
}
