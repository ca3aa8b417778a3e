package durable

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"

	"github.com/gojob/gojob/clock"
	"github.com/gojob/gojob/durable/internal/redisfind"
	"github.com/gojob/gojob/durable/internal/store"
	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq/api"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// failureNotifier is called with each job the reconciler moved to the dead
// set (Amigo's failure_notifier). When one is set, the death handlers are
// not called, as in Ruby.
type failureNotifier = func(ctx context.Context, job *wire.Job)

// ReconcilerConfig configures a Reconciler.
type ReconcilerConfig struct {
	// Durable holds the storage databases. Required.
	Durable *Durable
	// API reads Redis and kills jobs into the dead set, with its trims
	// (DeadMaxJobs, DeadTimeout) and its DeathHandlers. Required.
	API *api.API
	// FailureNotifier, when set, is called for each killed job instead of
	// the death handlers.
	FailureNotifier func(ctx context.Context, job *wire.Job)
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
	notifier failureNotifier
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
		dr := DatabaseReconcile{Database: st.Name()}
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

// reconcileStore pages through one database's overdue rows, then settles
// those the targeted lookups did not find (resolveRest). Database errors
// go to dr.Err; a Redis error is returned.
func (r *Reconciler) reconcileStore(ctx context.Context, st store.Store, now time.Time, dr *DatabaseReconcile, res *ReconcileResult) error {
	var unresolved []*store.Row
	if err := r.pageStore(ctx, st, now, dr, &unresolved); err != nil || dr.Err != nil {
		return err
	}
	dbErr, redisErr := r.resolveRest(ctx, st, unresolved, dr, res)
	if dbErr != nil {
		dr.Err = dbErr
	}
	return redisErr
}

func (r *Reconciler) pageStore(ctx context.Context, st store.Store, now time.Time, dr *DatabaseReconcile, unresolved *[]*store.Row) error {
	var after *store.Row
	for {
		rows, err := st.ListDue(ctx, store.ListDueParams{Now: now, Limit: r.pageSize, After: after})
		if err != nil {
			dr.Err = fmt.Errorf("durable: list overdue rows of %s: %w", st.Name(), err)
			return nil
		}
		if len(rows) == 0 {
			return nil
		}
		dbErr, redisErr := r.checkPage(ctx, st, rows, dr, unresolved)
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

// pageCheck is one page being resolved: the rows not yet placed, and the
// compare-and-set writes decided for the others, applied together.
type pageCheck struct {
	r       *Reconciler
	st      store.Store
	now     time.Time
	pending map[string]*store.Row
	want    map[string]bool
	looks   map[string]*lookupRow
	touches []store.TouchParams
	counts  []*int
	claims  []store.ClaimParams
}

// found places a row: its deadline moves (compare-and-set) with the page's
// writes.
func (p *pageCheck) found(rw *store.Row, deadline time.Time, counter *int) {
	delete(p.pending, rw.JobID)
	delete(p.want, rw.JobID)
	p.touches = append(p.touches, store.TouchParams{JobID: rw.JobID, Expect: rw.AssumeDeadAt, AssumeDeadAt: deadline})
	p.counts = append(p.counts, counter)
}

// dead places a row whose job is in the dead set: it is deleted.
func (p *pageCheck) dead(rw *store.Row) {
	delete(p.pending, rw.JobID)
	delete(p.want, rw.JobID)
	p.claims = append(p.claims, store.ClaimParams{JobID: rw.JobID, Expect: rw.AssumeDeadAt})
}

// inSet places the rows found in a sorted set: dead in the dead set
// (counter nil); in the retry or schedule set, due at their entry's time
// plus their extension, counted in counter.
func (p *pageCheck) inSet(found map[string]contract.SetMember, counter *int) {
	for jid, m := range found {
		rw := p.pending[jid]
		if counter == nil {
			p.dead(rw)
			continue
		}
		p.found(rw, contract.FromEpochSeconds(m.Score).Add(p.r.ext(rw)), counter)
	}
}

func (p *pageCheck) rowsLeft(rows []*store.Row) []*lookupRow {
	var out []*lookupRow
	for _, rw := range rows {
		if _, ok := p.pending[rw.JobID]; ok {
			out = append(out, p.looks[rw.JobID])
		}
	}
	return out
}

// apply writes the page's touches and claims, one statement each.
func (p *pageCheck) apply(ctx context.Context, dr *DatabaseReconcile) error {
	changed, err := p.st.TouchMany(ctx, p.touches)
	if err != nil {
		return fmt.Errorf("durable: update overdue rows in %s: %w", p.st.Name(), err)
	}
	for i, ok := range changed {
		if ok {
			*p.counts[i]++
		} else {
			dr.Changed++
		}
	}
	deleted, err := p.st.ClaimMany(ctx, p.claims)
	if err != nil {
		return fmt.Errorf("durable: delete rows of dead jobs in %s: %w", p.st.Name(), err)
	}
	for _, ok := range deleted {
		if ok {
			dr.AlreadyDead++
		} else {
			dr.Changed++
		}
	}
	p.touches, p.counts, p.claims = nil, nil, nil
	return nil
}

func (r *Reconciler) ext(rw *store.Row) time.Duration {
	return r.d.rowExtension(rw.JobClass, rw.ItemJSON)
}

// checkPage resolves one page of overdue rows with targeted lookups (see
// lookup.go). The pass's start time only selects the rows; what the page
// writes (new deadlines, missing_at, durable_killed_at) is relative to the
// time of the check itself, so that a long pass cannot bring a second
// strike less than one extension after the first.
func (r *Reconciler) checkPage(ctx context.Context, st store.Store, rows []*store.Row, dr *DatabaseReconcile, unresolved *[]*store.Row) (dbErr, redisErr error) {
	now := r.clock.Now()
	dr.Checked += len(rows)
	p := &pageCheck{r: r, st: st, now: now, pending: make(map[string]*store.Row, len(rows)), want: make(map[string]bool, len(rows)),
		looks: make(map[string]*lookupRow, len(rows))}
	byQueue := map[string][]*lookupRow{}
	var queues []string
	for _, rw := range rows {
		p.pending[rw.JobID] = rw
		p.want[rw.JobID] = true
		l := r.lookupRow(rw)
		p.looks[rw.JobID] = l
		if byQueue[rw.Queue] == nil {
			queues = append(queues, rw.Queue)
		}
		byQueue[rw.Queue] = append(byQueue[rw.Queue], l)
	}
	conn, err := r.api.Client().Pool().GetContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("durable: redis: %w", err)
	}
	defer conn.Close()

	// 1. Waiting in its queue: the oldest jobs, down to the page's latest
	// base.
	for _, q := range queues {
		want := map[string]bool{}
		var until time.Time
		for _, l := range byQueue[q] {
			want[l.rw.JobID] = true
			if l.base.After(until) {
				until = l.base
			}
		}
		found, err := redisfind.InQueueHead(ctx, conn, q, want, until.Add(windowSlack))
		if err != nil {
			return nil, err
		}
		for jid := range found {
			rw := p.pending[jid]
			p.found(rw, now.Add(r.ext(rw)), &dr.Queued)
		}
	}
	// 2. Running in a live process (Ruby would strike a job that runs
	// longer than its extension without heartbeating, then kill it).
	if len(p.pending) > 0 {
		running, err := redisfind.Running(ctx, r.api)
		if err != nil {
			return nil, err
		}
		for jid, rw := range p.pending {
			if !running[jid] {
				continue
			}
			r.log.Warn().Str("component", "durable-reconciler").Str("jid", jid).Str("class", rw.JobClass).
				Msg("durable job runs longer than its heartbeat extension; call sidekiq.Heartbeat or raise the extension")
			p.found(rw, now.Add(r.ext(rw)), &dr.Running)
		}
	}
	// 3. In an in-progress list of reliable fetch: running, or waiting to
	// be recovered from a dead process. Not lost either way.
	if len(p.pending) > 0 {
		found, err := redisfind.InRegisteredLists(ctx, conn, p.want)
		if err != nil {
			return nil, err
		}
		for jid := range found {
			rw := p.pending[jid]
			p.found(rw, now.Add(r.ext(rw)), &dr.InProgress)
		}
	}
	// 4. Retry and schedule sets, at the base: wait until the entry is due.
	// 5. Failed jobs: the retry set within the default delay, or the dead
	// set (their row has done its job).
	failed := func() []*lookupRow {
		var out []*lookupRow
		for _, l := range p.rowsLeft(rows) {
			if l.failed {
				out = append(out, l)
			}
		}
		return out
	}
	for _, set := range []struct {
		key     string
		win     func(*lookupRow) redisfind.Window
		rows    func() []*lookupRow
		counter *int
	}{
		{contract.KeyRetry, exactWindow, func() []*lookupRow { return p.rowsLeft(rows) }, &dr.Retrying},
		{contract.KeySchedule, exactWindow, func() []*lookupRow { return p.rowsLeft(rows) }, &dr.Scheduled},
		{contract.KeyRetry, retryWindow, failed, &dr.Retrying},
		{contract.KeyDead, deadWindow, failed, nil},
	} {
		found, err := redisfind.InWindows(ctx, conn, set.key, windows(set.rows(), set.win), p.want)
		if err != nil {
			return nil, err
		}
		p.inSet(found, set.counter)
	}
	// 6. Not found by the targeted lookups: left for the end of the pass.
	for _, rw := range rows {
		if _, ok := p.pending[rw.JobID]; ok {
			*unresolved = append(*unresolved, rw)
		}
	}
	if err := p.apply(ctx, dr); err != nil {
		return err, nil
	}
	return nil, nil
}

// resolveRest handles the rows of a pass that the targeted lookups did not
// find: they are searched the long way, all at once (their queues, every
// in-progress list, the whole retry, schedule and dead sets: one stream of
// each for the whole pass, paid only when such rows exist), then whatever
// is still nowhere gets its first strike or, at its second, is killed.
func (r *Reconciler) resolveRest(ctx context.Context, st store.Store, rows []*store.Row, dr *DatabaseReconcile, res *ReconcileResult) (dbErr, redisErr error) {
	if len(rows) == 0 {
		return nil, nil
	}
	p := &pageCheck{r: r, st: st, now: r.clock.Now(), pending: make(map[string]*store.Row, len(rows)), want: make(map[string]bool, len(rows))}
	for _, rw := range rows {
		p.pending[rw.JobID] = rw
		p.want[rw.JobID] = true
	}
	conn, err := r.api.Client().Pool().GetContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("durable: redis: %w", err)
	}
	if err := r.searchEverywhere(ctx, conn, p, rows, dr); err != nil {
		conn.Close()
		return nil, err
	}
	conn.Close()
	// Nowhere: first strike, or lost, in row order. Each strike is dated
	// after the lookups that missed the job and after the kills before it
	// (a slow failure notifier), so that a long pass cannot bring a second
	// strike less than one extension after the first.
	for _, rw := range rows {
		if _, ok := p.pending[rw.JobID]; !ok {
			continue
		}
		if r.d.pend.Holds(ctx, st, rw.JobID) {
			// The job finished in this process while the database did not
			// answer; the write that settles its row is being retried.
			dr.Changed++
			r.log.Info().Str("component", "durable-reconciler").Str("jid", rw.JobID).Str("database", st.Name()).
				Msg("durable row not found in Redis but its job finished in this process; the row's write is pending, left alone")
			continue
		}
		now := r.clock.Now()
		if rw.MissingAt == nil {
			missing := now
			p.touches = append(p.touches, store.TouchParams{JobID: rw.JobID, Expect: rw.AssumeDeadAt, AssumeDeadAt: now.Add(r.ext(rw)), MissingAt: &missing})
			p.counts = append(p.counts, &dr.Marked)
			continue
		}
		if dbErr, redisErr := r.kill(ctx, st, rw, now, dr, res); dbErr != nil || redisErr != nil {
			if err := p.apply(ctx, dr); err != nil && dbErr == nil {
				dbErr = err
			}
			return dbErr, redisErr
		}
	}
	if err := p.apply(ctx, dr); err != nil {
		return err, nil
	}
	return nil, nil
}

// searchEverywhere looks for the kill candidates by streaming their queues,
// every in-progress list (registered or found by SCAN) and the whole
// retry, schedule and dead sets (stopping when all are found).
func (r *Reconciler) searchEverywhere(ctx context.Context, conn redis.Conn, p *pageCheck, candidates []*store.Row, dr *DatabaseReconcile) error {
	now := r.clock.Now()
	byQueue := map[string][]string{}
	var jids []string
	for _, rw := range candidates {
		byQueue[rw.Queue] = append(byQueue[rw.Queue], rw.JobID)
		jids = append(jids, rw.JobID)
	}
	left := func() []string {
		var out []string
		for _, jid := range jids {
			if _, ok := p.pending[jid]; ok {
				out = append(out, jid)
			}
		}
		return out
	}
	for q, qj := range byQueue {
		found, err := contract.FindInQueue(ctx, conn, q, qj)
		if err != nil {
			return err
		}
		for jid := range found {
			rw := p.pending[jid]
			p.found(rw, now.Add(r.ext(rw)), &dr.Queued)
		}
	}
	found, err := contract.FindInWorkingLists(ctx, conn, left())
	if err != nil {
		return err
	}
	for jid := range found {
		rw := p.pending[jid]
		p.found(rw, now.Add(r.ext(rw)), &dr.InProgress)
	}
	for _, set := range []struct {
		key     string
		counter *int
	}{{contract.KeyRetry, &dr.Retrying}, {contract.KeySchedule, &dr.Scheduled}, {contract.KeyDead, nil}} {
		found, err := contract.FindInSet(ctx, conn, set.key, left())
		if err != nil {
			return err
		}
		p.inSet(found, set.counter)
	}
	return nil
}

// kill moves a lost job to the dead set: claim the row (compare-and-set
// delete), add the item with jid and durable_killed_at to the dead set with
// the trims, then call the failure notifier or the death handlers. If Redis
// fails, the row is put back.
func (r *Reconciler) kill(ctx context.Context, st store.Store, rw *store.Row, now time.Time, dr *DatabaseReconcile, res *ReconcileResult) (dbErr, redisErr error) {
	m, err := rubyjson.ParseObject([]byte(rw.ItemJSON))
	if err != nil {
		dr.Failed++
		e := fmt.Errorf("durable: job %s (%s) in %s: job_item_json is not a JSON object: %w", rw.JobID, rw.JobClass, st.Name(), err)
		res.Errors = append(res.Errors, e)
		r.log.Error().Err(e).Str("component", "durable-reconciler").Str("jid", rw.JobID).Msg("lost durable job cannot be moved to the dead set")
		return nil, nil
	}
	job := wire.JobFromMap(m)
	if v, ok := job.Get("jid"); !ok || v.Kind() == rubyjson.Null {
		job.Set("jid", rubyjson.StringValue(rw.JobID))
	}
	job.Set("durable_killed_at", contract.TimestampValue(now, r.api.Client().Version()))
	ok, err := st.Claim(ctx, store.ClaimParams{JobID: rw.JobID, Expect: rw.AssumeDeadAt})
	if err != nil {
		return fmt.Errorf("durable: claim %s in %s: %w", rw.JobID, st.Name(), err), nil
	}
	if !ok {
		dr.Changed++
		return nil, nil
	}
	payload := job.Bytes()
	if err := r.killToDeadSet(ctx, rw.JobID, payload); err != nil {
		if rerr := st.Restore(context.WithoutCancel(ctx), rw); rerr != nil {
			r.log.Error().Err(rerr).Str("component", "durable-reconciler").Str("jid", rw.JobID).Str("database", st.Name()).
				Bytes("payload", payload).Msg("could not put back the row of a lost job after a Redis error")
		}
		return nil, fmt.Errorf("durable: kill %s: %w", rw.JobID, err)
	}
	dr.Killed++
	res.KilledJIDs = append(res.KilledJIDs, rw.JobID)
	r.log.Warn().Str("component", "durable-reconciler").Str("jid", rw.JobID).Str("class", rw.JobClass).Str("queue", rw.Queue).
		Str("database", st.Name()).Msg("durable job lost; moved to the dead set")
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
