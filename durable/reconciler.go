package durable

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/gojob/gojob/clock"
	"github.com/gojob/gojob/sidekiq/api"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// FailureNotifier is called with each job the reconciler moved to the dead
// set (Amigo's failure_notifier). When one is set, the death handlers are
// not called, as in Ruby.
type FailureNotifier func(ctx context.Context, job *wire.Job)

// ReconcilerConfig configures a Reconciler.
type ReconcilerConfig struct {
	// Durable holds the storage databases. Required.
	Durable *Durable
	// API reads Redis and kills jobs into the dead set, with its trims
	// (DeadMaxJobs, DeadTimeout) and its DeathHandlers. Required.
	API *api.API
	// FailureNotifier, when set, is called for each killed job instead of
	// the death handlers.
	FailureNotifier FailureNotifier
	// PageSize is the number of overdue rows read at a time. Default 500.
	PageSize int
	// Clock is the time source. Default the Durable's.
	Clock clock.Clock
	// Logger receives one line per lost job and a summary per pass.
	// Default the Durable's.
	Logger *zerolog.Logger
}

func (c *ReconcilerConfig) validate() error {
	if c.Durable == nil {
		return errors.New("durable: ReconcilerConfig.Durable is required")
	}
	if c.API == nil {
		return errors.New("durable: ReconcilerConfig.API is required")
	}
	if c.PageSize < 0 {
		return errors.New("durable: ReconcilerConfig.PageSize must not be negative")
	}
	return nil
}

// Reconciler finds durable jobs that Redis lost (Amigo's poll_jobs). For
// every row whose assume_dead_at has passed, in every database, page by
// page, it looks the jid up in its queue, in the work hashes of live
// processes, and in the retry, schedule and dead sets:
//
//   - waiting in its queue, or running: missing_at cleared, assume_dead_at
//     = now + extension;
//   - in the retry or schedule set: missing_at cleared, assume_dead_at =
//     the entry's time + extension;
//   - in the dead set: the row is deleted (a retry from there pushes a new
//     row);
//   - nowhere, first time (missing_at unset): missing_at = now,
//     assume_dead_at = now + extension (it may have been between two
//     places);
//   - nowhere again: the job is lost. Its stored item, with jid and
//     durable_killed_at added, goes to the dead set (with the trims), the
//     failure notifier or else the death handlers are called, and the row
//     is deleted.
//
// Every change is a compare-and-set on the assume_dead_at that was read,
// so a job that was locked, heartbeated, failed or pushed again meanwhile
// is left for the next pass, and two reconcilers never kill a job twice.
type Reconciler struct {
	d        *Durable
	api      *api.API
	notifier FailureNotifier
	pageSize int
	clock    clock.Clock
	log      zerolog.Logger
}

// NewReconciler returns a reconciler.
func NewReconciler(cfg *ReconcilerConfig) (*Reconciler, error) {
	if cfg == nil {
		return nil, errors.New("durable: nil ReconcilerConfig")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	r := &Reconciler{
		d:        cfg.Durable,
		api:      cfg.API,
		notifier: cfg.FailureNotifier,
		pageSize: cmp.Or(cfg.PageSize, 500),
		clock:    cfg.Clock,
		log:      cfg.Durable.log,
	}
	if r.clock == nil {
		r.clock = cfg.Durable.cfg.Clock
	}
	if cfg.Logger != nil {
		r.log = *cfg.Logger
	}
	return r, nil
}

// ReconcileCounts counts what a pass did to the rows it checked.
type ReconcileCounts struct {
	// Checked rows were overdue.
	Checked int `json:"checked"`
	// Queued jobs were waiting in their queue.
	Queued int `json:"queued"`
	// Running jobs were in a live process's work hash.
	Running int `json:"running"`
	// InProgress jobs were in a reliable-fetch in-progress list: taken by a
	// process that runs them, or by one that died, whose jobs the live
	// processes push back to their queues.
	InProgress int `json:"in_progress"`
	// Retrying jobs were in the retry set.
	Retrying int `json:"retrying"`
	// Scheduled jobs were in the schedule set.
	Scheduled int `json:"scheduled"`
	// AlreadyDead jobs were in the dead set; their rows were deleted.
	AlreadyDead int `json:"already_dead"`
	// Marked jobs were missing for the first time (missing_at set).
	Marked int `json:"marked"`
	// Killed jobs were missing twice and moved to the dead set.
	Killed int `json:"killed"`
	// Changed rows were modified by someone else during the check, or have
	// a write pending in this process (their job finished while their
	// database did not answer), and were left for the next pass.
	Changed int `json:"changed"`
	// Failed rows could not be handled (see Errors).
	Failed int `json:"failed"`
}

func (c *ReconcileCounts) add(o ReconcileCounts) {
	c.Checked += o.Checked
	c.Queued += o.Queued
	c.Running += o.Running
	c.InProgress += o.InProgress
	c.Retrying += o.Retrying
	c.Scheduled += o.Scheduled
	c.AlreadyDead += o.AlreadyDead
	c.Marked += o.Marked
	c.Killed += o.Killed
	c.Changed += o.Changed
	c.Failed += o.Failed
}

// DatabaseReconcile is one database's part of a pass.
type DatabaseReconcile struct {
	ReconcileCounts
	// Database is the URL without its password.
	Database string `json:"database"`
	// Err is why the database's pass stopped early.
	Err error `json:"-"`
}

// ReconcileResult reports one pass.
type ReconcileResult struct {
	ReconcileCounts
	// Databases has one entry per database reached by the pass.
	Databases []DatabaseReconcile `json:"databases"`
	// KilledJIDs are the jobs moved to the dead set.
	KilledJIDs []string `json:"killed_jids"`
	// Errors are the row-level failures (an unreadable job_item_json, …);
	// each affected only its row.
	Errors []error `json:"-"`
}

// RunOnce makes one pass over every database. A database that fails is
// reported in its entry and the pass goes on with the next one; a Redis
// error ends the pass and is returned.
func (r *Reconciler) RunOnce(ctx context.Context) (*ReconcileResult, error) {
	now := r.clock.Now()
	res := &ReconcileResult{}
	var dbErrs []error
	for _, st := range r.d.stores {
		dr := DatabaseReconcile{Database: st.name()}
		redisErr := r.reconcileStore(ctx, st, now, &dr, res)
		res.Databases = append(res.Databases, dr)
		res.ReconcileCounts.add(dr.ReconcileCounts)
		if redisErr != nil {
			return res, redisErr
		}
		if dr.Err != nil {
			dbErrs = append(dbErrs, dr.Err)
			r.log.Error().Err(dr.Err).Str("component", "durable-reconciler").Str("database", dr.Database).
				Msg("reconcile pass stopped on this database")
		}
	}
	if res.Checked > 0 {
		r.log.Info().Str("component", "durable-reconciler").Int("checked", res.Checked).Int("killed", res.Killed).
			Int("marked_missing", res.Marked).Int("changed", res.Changed).Int("failed", res.Failed).Msg("reconcile pass")
	}
	return res, errors.Join(dbErrs...)
}

// reconcileStore pages through one database's overdue rows. Database
// errors go to dr.Err; a Redis error is returned.
func (r *Reconciler) reconcileStore(ctx context.Context, st store, now time.Time, dr *DatabaseReconcile, res *ReconcileResult) error {
	var after *row
	for {
		rows, err := st.listDue(ctx, listDueParams{Now: now, Limit: r.pageSize, After: after})
		if err != nil {
			dr.Err = fmt.Errorf("durable: list overdue rows of %s: %w", st.name(), err)
			return nil
		}
		if len(rows) == 0 {
			return nil
		}
		dbErr, redisErr := r.checkPage(ctx, st, rows, dr, res)
		if redisErr != nil {
			return redisErr
		}
		if dbErr != nil {
			dr.Err = dbErr
			return nil
		}
		if len(rows) < r.pageSize {
			return nil
		}
		after = rows[len(rows)-1]
	}
}

// pageCheck is one page being resolved: the rows not yet placed.
type pageCheck struct {
	r       *Reconciler
	st      store
	now     time.Time
	pending map[string]*row
	dr      *DatabaseReconcile
}

func (p *pageCheck) wanted() []string {
	out := make([]string, 0, len(p.pending))
	for jid := range p.pending {
		out = append(out, jid)
	}
	return out
}

// found moves a row out of pending with a compare-and-set of its deadline.
func (p *pageCheck) found(ctx context.Context, rw *row, deadline time.Time, counter *int) error {
	delete(p.pending, rw.JobID)
	ok, err := p.st.touch(ctx, touchParams{JobID: rw.JobID, Expect: rw.AssumeDeadAt, AssumeDeadAt: deadline})
	if err != nil {
		return fmt.Errorf("durable: update %s in %s: %w", rw.JobID, p.st.name(), err)
	}
	if !ok {
		p.dr.Changed++
		return nil
	}
	*counter++
	return nil
}

func (r *Reconciler) ext(rw *row) time.Duration { return r.d.rowExtension(rw.JobClass, rw.ItemJSON) }

// checkPage resolves one page of overdue rows. The pass's start time only
// selects the rows; what the page writes (new deadlines, missing_at,
// durable_killed_at) is relative to the time of the check itself, so that
// a long pass cannot bring a second strike less than one extension after
// the first.
func (r *Reconciler) checkPage(ctx context.Context, st store, rows []*row, dr *DatabaseReconcile, res *ReconcileResult) (dbErr, redisErr error) {
	now := r.clock.Now()
	dr.Checked += len(rows)
	p := &pageCheck{r: r, st: st, now: now, pending: make(map[string]*row, len(rows)), dr: dr}
	byQueue := map[string][]string{}
	var queues []string
	for _, rw := range rows {
		p.pending[rw.JobID] = rw
		if byQueue[rw.Queue] == nil {
			queues = append(queues, rw.Queue)
		}
		byQueue[rw.Queue] = append(byQueue[rw.Queue], rw.JobID)
	}
	conn, err := r.api.Client().Pool().GetContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("durable: redis: %w", err)
	}
	defer conn.Close()

	// 1. Waiting in its queue.
	for _, q := range queues {
		found, err := wire.FindInQueue(ctx, conn, q, byQueue[q])
		if err != nil {
			return nil, err
		}
		for jid := range found {
			rw := p.pending[jid]
			if err := p.found(ctx, rw, now.Add(r.ext(rw)), &dr.Queued); err != nil {
				return err, nil
			}
		}
	}
	// 2. Running in a live process (Ruby would strike a job that runs
	// longer than its extension without heartbeating, then kill it).
	if len(p.pending) > 0 {
		running, err := runningJIDs(ctx, r.api)
		if err != nil {
			return nil, err
		}
		for jid, rw := range p.pending {
			if !running[jid] {
				continue
			}
			r.log.Warn().Str("component", "durable-reconciler").Str("jid", jid).Str("class", rw.JobClass).
				Msg("durable job runs longer than its heartbeat extension; call durable.Heartbeat or raise the extension")
			if err := p.found(ctx, rw, now.Add(r.ext(rw)), &dr.Running); err != nil {
				return err, nil
			}
		}
	}
	// 3. In an in-progress list of reliable fetch: running, or waiting to
	// be recovered from a dead process. Not lost either way.
	if len(p.pending) > 0 {
		found, err := wire.FindInWorkingLists(ctx, conn, p.wanted())
		if err != nil {
			return nil, err
		}
		for jid := range found {
			rw := p.pending[jid]
			if err := p.found(ctx, rw, now.Add(r.ext(rw)), &dr.InProgress); err != nil {
				return err, nil
			}
		}
	}
	// 4. Retry and schedule sets: wait until the entry is due.
	for _, set := range []struct {
		key     string
		counter *int
	}{{wire.KeyRetry, &dr.Retrying}, {wire.KeySchedule, &dr.Scheduled}} {
		found, err := wire.FindInSet(ctx, conn, set.key, p.wanted())
		if err != nil {
			return nil, err
		}
		for jid, m := range found {
			rw := p.pending[jid]
			if err := p.found(ctx, rw, wire.FromEpochSeconds(m.Score).Add(r.ext(rw)), set.counter); err != nil {
				return err, nil
			}
		}
	}
	// 5. Already dead: the row has done its job.
	found, err := wire.FindInSet(ctx, conn, wire.KeyDead, p.wanted())
	if err != nil {
		return nil, err
	}
	for jid := range found {
		rw := p.pending[jid]
		delete(p.pending, jid)
		ok, err := st.claim(ctx, claimParams{JobID: jid, Expect: rw.AssumeDeadAt})
		if err != nil {
			return fmt.Errorf("durable: delete %s in %s: %w", jid, st.name(), err), nil
		}
		if ok {
			dr.AlreadyDead++
		} else {
			dr.Changed++
		}
	}
	// 6. Nowhere: first strike, or lost. Each is dated after the lookups
	// that missed the job (and after any slow failure notifier before it).
	for _, rw := range rows {
		if _, ok := p.pending[rw.JobID]; !ok {
			continue
		}
		if r.d.pend.holds(ctx, st, rw.JobID) {
			// The job finished in this process while the database did not
			// answer; the write that settles its row is being retried.
			dr.Changed++
			r.log.Info().Str("component", "durable-reconciler").Str("jid", rw.JobID).Str("database", st.name()).
				Msg("durable row not found in Redis but its job finished in this process; the row's write is pending, left alone")
			continue
		}
		now := r.clock.Now()
		if rw.MissingAt == nil {
			missing := now
			ok, err := st.touch(ctx, touchParams{JobID: rw.JobID, Expect: rw.AssumeDeadAt, AssumeDeadAt: now.Add(r.ext(rw)), MissingAt: &missing})
			if err != nil {
				return fmt.Errorf("durable: mark %s missing in %s: %w", rw.JobID, st.name(), err), nil
			}
			if ok {
				dr.Marked++
			} else {
				dr.Changed++
			}
			continue
		}
		dbErr, redisErr := r.kill(ctx, st, rw, now, dr, res)
		if dbErr != nil || redisErr != nil {
			return dbErr, redisErr
		}
	}
	return nil, nil
}

// kill moves a lost job to the dead set: claim the row (compare-and-set
// delete), add the item with jid and durable_killed_at to the dead set with
// the trims, then call the failure notifier or the death handlers. If Redis
// fails, the row is put back.
func (r *Reconciler) kill(ctx context.Context, st store, rw *row, now time.Time, dr *DatabaseReconcile, res *ReconcileResult) (dbErr, redisErr error) {
	m, err := rubyjson.ParseObject([]byte(rw.ItemJSON))
	if err != nil {
		dr.Failed++
		e := fmt.Errorf("durable: job %s (%s) in %s: job_item_json is not a JSON object: %w", rw.JobID, rw.JobClass, st.name(), err)
		res.Errors = append(res.Errors, e)
		r.log.Error().Err(e).Str("component", "durable-reconciler").Str("jid", rw.JobID).Msg("lost durable job cannot be moved to the dead set")
		return nil, nil
	}
	job := wire.JobFromMap(m)
	if v, ok := job.Get("jid"); !ok || v.IsNull() {
		job.SetJID(rw.JobID)
	}
	job.Set("durable_killed_at", wire.TimestampValue(now, r.api.Version()))
	ok, err := st.claim(ctx, claimParams{JobID: rw.JobID, Expect: rw.AssumeDeadAt})
	if err != nil {
		return fmt.Errorf("durable: claim %s in %s: %w", rw.JobID, st.name(), err), nil
	}
	if !ok {
		dr.Changed++
		return nil, nil
	}
	payload := job.Encode()
	if err := r.killToDeadSet(ctx, rw.JobID, payload); err != nil {
		if rerr := st.restore(context.WithoutCancel(ctx), rw); rerr != nil {
			r.log.Error().Err(rerr).Str("component", "durable-reconciler").Str("jid", rw.JobID).Str("database", st.name()).
				Bytes("payload", payload).Msg("could not put back the row of a lost job after a Redis error")
		}
		return nil, fmt.Errorf("durable: kill %s: %w", rw.JobID, err)
	}
	dr.Killed++
	res.KilledJIDs = append(res.KilledJIDs, rw.JobID)
	r.log.Warn().Str("component", "durable-reconciler").Str("jid", rw.JobID).Str("class", rw.JobClass).Str("queue", rw.Queue).
		Str("database", st.name()).Msg("durable job lost; moved to the dead set")
	if r.notifier != nil {
		func() {
			defer func() {
				if p := recover(); p != nil {
					r.log.Error().Interface("panic", p).Str("component", "durable-reconciler").Msg("failure notifier panicked")
				}
			}()
			r.notifier(ctx, job.Clone())
		}()
	}
	return nil, nil
}

// killToDeadSet adds the payload to the dead set with the trims and calls
// the death handlers unless a failure notifier is set. The handlers run
// after the job is stored, so a handler that panics (the server recovers
// those of its own failures too) is logged and the job counts as killed:
// the reconciler runs inside every worker process and must not crash it.
func (r *Reconciler) killToDeadSet(ctx context.Context, jid string, payload []byte) (err error) {
	defer func() {
		if p := recover(); p != nil {
			r.log.Error().Interface("panic", p).Str("component", "durable-reconciler").Str("jid", jid).Msg("death handler panicked")
			err = nil
		}
	}()
	return r.api.DeadSet().Kill(ctx, payload, &api.KillOpts{SkipDeathHandlers: r.notifier != nil})
}
