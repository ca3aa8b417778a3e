package durable

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gojob/gojob/durable/internal/store"
	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// The writes of the client and server middleware across the databases:
// a push's row goes to the first database that accepts it, a lock to the
// first that has the row.

// insertParams is one durable row to write (Amigo's insert_job).
type insertParams struct {
	// Job is the item as pushed. Its "at" (epoch seconds), when present, is
	// the run time; otherwise now.
	Job *wire.Job
	// Queue defaults to the job's queue.
	Queue string
	// Extension defaults to the class's, or Config.DefaultExtension.
	Extension time.Duration

	missingAt *time.Time // tests: a row that already had its first strike
}

// insertResult reports where a row was written.
type insertResult struct {
	// Database is the database that accepted the row.
	Database string
	// AssumeDeadAt is the row's deadline: run time + extension.
	AssumeDeadAt time.Time
	// Skipped lists the databases tried before, with their errors.
	Skipped []error
}

// insert upserts the job's row into the first database that accepts it
// (the client middleware's write): assume_dead_at = run time + extension.
// A database that fails (connection or SQL error) is skipped; when none
// accepts the row the error wraps errNoDatabase. For a push again of a
// job, the removal of a copy that an earlier push may have left in a
// database that did not answer is retried in the background (see Outages
// in the package doc).
func (d *Durable) insert(ctx context.Context, p *insertParams) (*insertResult, error) {
	up, err := d.rowFor(p)
	if err != nil {
		return nil, err
	}
	return d.insertRow(ctx, p.Job, up)
}

// rowFor builds the row of an insert.
func (d *Durable) rowFor(p *insertParams) (store.UpsertParams, error) {
	if p == nil || p.Job == nil {
		return store.UpsertParams{}, errors.New("durable: insert: nil job")
	}
	job := p.Job
	jid := job.JID()
	if jid == "" {
		return store.UpsertParams{}, errors.New("durable: insert: job has no jid")
	}
	ext := p.Extension
	if ext == 0 {
		ext = d.cfg.DefaultExtension
		if e, ok := d.jobExtension(job); ok {
			ext = e
		}
	}
	now := d.cfg.Clock.Now()
	runAt := now
	if v, ok := job.Get("at"); ok {
		if f, isNum := v.Float(); isNum {
			runAt = contract.FromEpochSeconds(f)
		}
	}
	return store.UpsertParams{
		JobID:        jid,
		JobClass:     job.Class(),
		ItemJSON:     string(job.Bytes()),
		Queue:        cmp.Or(p.Queue, job.Queue(), "default"),
		InsertedAt:   now,
		AssumeDeadAt: runAt.Add(ext),
		MissingAt:    p.missingAt,
	}, nil
}

// insertRow writes one row as insert does.
func (d *Durable) insertRow(ctx context.Context, job *wire.Job, up store.UpsertParams) (*insertResult, error) {
	jid, now := up.JobID, up.InsertedAt
	res := &insertResult{AssumeDeadAt: micro(up.AssumeDeadAt)}
	release := d.pend.Settle(ctx, jid, d.stores)
	defer release()
	var unanswered []store.Store
	for i, s := range d.stores {
		created, err := s.Upsert(ctx, up)
		if err == nil {
			res.Database = s.Name()
			// A removal pending here meant a later database holds the jid's
			// row: this push made this row the current one instead.
			replacedStale := d.pend.Supersede(s, jid) == store.PendingRemove
			if created && isRepush(job, now) || replacedStale {
				d.removeStaleCopies(ctx, jid, d.stores[i+1:])
			}
			if isRepush(job, now) {
				d.queueStaleRemovals(jid, unanswered)
			}
			return res, nil
		}
		if ctx.Err() != nil {
			return res, fmt.Errorf("durable: insert %s: %w", jid, err)
		}
		if s.IsConnError(err) {
			unanswered = append(unanswered, s)
		}
		res.Skipped = append(res.Skipped, fmt.Errorf("%s: %w", s.Name(), err))
	}
	return res, fmt.Errorf("durable: insert %s: %w", jid, errors.Join(append([]error{errNoDatabase}, res.Skipped...)...))
}

// repushSlack is how much older than now a job's created_at must be for a
// push to count as a push again of a job pushed before.
const repushSlack = time.Second

// isRepush reports whether job was created before this push: the
// scheduler's and the retry poller's re-pushes, a retry from the API, a
// push of the same jid from inside the job.
func isRepush(job *wire.Job, now time.Time) bool {
	created, ok := job.Time("created_at")
	return ok && created.Before(now.Add(-repushSlack))
}

// removeStaleCopies deletes a jid's rows from later databases after a push
// again of the job created its row in an earlier one. The earlier push
// wrote to a later database only because the earlier one failed then, and
// a copy left there would outlive the job: the worker locks and deletes
// the first row it finds, and the reconciler would kill the completed job
// from the stale copy. Only such re-pushes pay for these statements: a
// first push, or a re-push that found its row in place, asks no other
// database. A database that does not answer gets the removal queued for
// retry; one that fails otherwise keeps its copy.
func (d *Durable) removeStaleCopies(ctx context.Context, jid string, later []store.Store) {
	for _, s := range later {
		removed, err := s.DeleteJob(ctx, jid)
		switch {
		case err != nil && s.IsConnError(err):
			d.queueStaleRemovals(jid, []store.Store{s})
		case err != nil:
			d.log.Warn().Err(err).Str("component", "durable").Str("database", s.Name()).Str("jid", jid).
				Msg("could not remove the stale durable row of a job pushed again")
		case removed:
			d.log.Info().Str("component", "durable").Str("database", s.Name()).Str("jid", jid).
				Msg("removed the stale durable row of a job pushed again into an earlier database")
		}
	}
}

// queueStaleRemovals queues the removal of a jid's rows in databases that
// did not answer a push again of the job, which wrote its row to a later
// one: a copy left there from an earlier push would outlive the job.
func (d *Durable) queueStaleRemovals(jid string, unanswered []store.Store) {
	for _, s := range unanswered {
		d.pend.Add(&store.PendingWrite{Store: s, JID: jid, Kind: store.PendingRemove})
		d.log.Warn().Str("component", "durable").Str("database", s.Name()).Str("jid", jid).
			Msg("a durable job pushed again may have a stale row in a database that does not answer; its removal is retried in the background")
	}
}

// lockResult is where the server middleware found and locked a row.
type lockResult struct {
	st       store.Store
	lockedAt time.Time
	// failed lists the databases that could not be asked, with their
	// errors.
	failed       []error
	failedStores []store.Store
}

// lockJob walks the databases in order and locks the row in the first one
// that has it (Amigo's lock_job, in one UPDATE instead of SELECT+UPDATE),
// after the jid's pending writes.
//
// It fills res; op is the lock's op in the first database (the caller's
// allocation), a later database gets one of its own.
func (d *Durable) lockJob(ctx context.Context, jid, identity string, now time.Time, ext time.Duration, res *lockResult, op *store.Op) {
	res.lockedAt = micro(now)
	release := d.pend.Settle(ctx, jid, d.stores)
	defer release()
	for i, s := range d.stores {
		if i > 0 {
			op = &store.Op{}
		}
		op.SetLock(store.LockParams{JobID: jid, LockedBy: identity, LockedAt: now, AssumeDeadAt: now.Add(ext)}, false)
		found, err := s.Group().Lock(ctx, op)
		if err != nil {
			res.failed = append(res.failed, fmt.Errorf("%s: %w", s.Name(), err))
			res.failedStores = append(res.failedStores, s)
			continue
		}
		if found {
			res.st = s
			return
		}
	}
}

// insertRows writes the rows of a bulk push, built by rowFor (rowErrs:
// why one could not be built), as insert does, in as few statements as the
// databases allow: each database gets the rows still unwritten in one
// group (one multi-row statement), in list order. It returns one result
// and one error per job, in order. A push again of a job (which may have
// to remove a stale copy in another database) and a jid with a write
// pending in this process take insert's path, one at a time.
func (d *Durable) insertRows(ctx context.Context, jobs []*wire.Job, ups []store.UpsertParams, rowErrs []error) ([]*insertResult, []error) {
	results, errs := make([]*insertResult, len(ups)), make([]error, len(ups))
	type pendingRow struct {
		i  int
		up store.UpsertParams
	}
	var rows []pendingRow
	seen := make(map[string]bool, len(ups))
	for i, up := range ups {
		if rowErrs[i] != nil {
			errs[i] = rowErrs[i]
			continue
		}
		if seen[up.JobID] || isRepush(jobs[i], up.InsertedAt) || d.pend.Len() > 0 {
			results[i], errs[i] = d.insertRow(ctx, jobs[i], up)
			continue
		}
		seen[up.JobID] = true
		results[i] = &insertResult{AssumeDeadAt: micro(up.AssumeDeadAt)}
		rows = append(rows, pendingRow{i, up})
	}
	for _, s := range d.stores {
		if len(rows) == 0 {
			break
		}
		ups := make([]store.UpsertParams, len(rows))
		for k, r := range rows {
			ups[k] = r.up
		}
		_, werrs := s.UpsertMany(ctx, ups)
		var left []pendingRow
		for k, r := range rows {
			if werrs[k] == nil {
				results[r.i].Database = s.Name()
				continue
			}
			results[r.i].Skipped = append(results[r.i].Skipped, fmt.Errorf("%s: %w", s.Name(), werrs[k]))
			left = append(left, r)
		}
		rows = left
		if ctx.Err() != nil {
			break
		}
	}
	for _, r := range rows {
		res := results[r.i]
		errs[r.i] = fmt.Errorf("durable: insert %s: %w", r.up.JobID, errors.Join(append([]error{errNoDatabase}, res.Skipped...)...))
	}
	return results, errs
}

// errorItem returns the job's JSON with error_class and error_message set,
// as the server middleware records a failure on the row.
func errorItem(job *wire.Job, failure error) string {
	j, err := wire.ParseJob(job.Bytes())
	if err != nil {
		j = job.Clone()
	}
	j.Set("error_class", rubyjson.StringValue(sidekiq.ErrorClassOf(failure)))
	j.Set("error_message", rubyjson.StringValue(truncateMessage(failure.Error())))
	return string(j.Bytes())
}

// truncateMessage keeps Sidekiq's 10,000-character limit of error_message.
func truncateMessage(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if r := []rune(s); len(r) > 10_000 {
		return string(r[:10_000])
	}
	return s
}
