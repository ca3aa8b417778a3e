package durable

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/wire"
)

// InsertMany writes many jobs' rows as Insert does, in as few statements
// as the databases allow: each database gets the rows still unwritten in
// one group (one multi-row statement), in list order. It returns one
// result and one error per job, in order. A push again of a job (which
// may have to remove a stale copy in another database) and a jid with a
// write pending in this process take Insert's path, one at a time.
func (d *Durable) InsertMany(ctx context.Context, ps []*InsertParams) ([]*InsertResult, []error) {
	jobs, ups := make([]*wire.Job, len(ps)), make([]upsertParams, len(ps))
	rowErrs := make([]error, len(ps))
	for i, p := range ps {
		ups[i], rowErrs[i] = d.rowFor(p)
		if p != nil {
			jobs[i] = p.Job
		}
	}
	return d.insertRows(ctx, jobs, ups, rowErrs)
}

// insertRows writes rows built by rowFor (rowErrs: why one could not be
// built).
func (d *Durable) insertRows(ctx context.Context, jobs []*wire.Job, ups []upsertParams, rowErrs []error) ([]*InsertResult, []error) {
	results, errs := make([]*InsertResult, len(ups)), make([]error, len(ups))
	type pendingRow struct {
		i  int
		up upsertParams
	}
	var rows []pendingRow
	seen := make(map[string]bool, len(ups))
	for i, up := range ups {
		if rowErrs[i] != nil {
			errs[i] = rowErrs[i]
			continue
		}
		if seen[up.JobID] || isRepush(jobs[i], up.InsertedAt) || d.pend.len() > 0 {
			results[i], errs[i] = d.insertRow(ctx, jobs[i], up)
			continue
		}
		seen[up.JobID] = true
		results[i] = &InsertResult{AssumeDeadAt: micro(up.AssumeDeadAt)}
		rows = append(rows, pendingRow{i, up})
	}
	for _, s := range d.stores {
		if len(rows) == 0 {
			break
		}
		ups := make([]upsertParams, len(rows))
		for k, r := range rows {
			ups[k] = r.up
		}
		_, werrs := s.upsertMany(ctx, ups)
		var left []pendingRow
		for k, r := range rows {
			if werrs[k] == nil {
				results[r.i].Database = s.name()
				continue
			}
			results[r.i].Skipped = append(results[r.i].Skipped, fmt.Errorf("%s: %w", s.name(), werrs[k]))
			left = append(left, r)
		}
		rows = left
		if ctx.Err() != nil {
			break
		}
	}
	for _, r := range rows {
		res := results[r.i]
		errs[r.i] = fmt.Errorf("durable: insert %s: %w", r.up.JobID, errors.Join(append([]error{ErrNoDatabase}, res.Skipped...)...))
	}
	return results, errs
}

// bulkInsert gathers the rows of one PushBulk group (sidekiq.PushGroup)
// and writes them together before the group reaches Redis.
type bulkInsert struct {
	d       *Durable
	jobs    []*wire.Job
	ups     []upsertParams
	rowErrs []error
}

// add records a job's row as it is when its middleware runs (what a
// single push writes).
func (b *bulkInsert) add(job *wire.Job, ext time.Duration) {
	up, err := b.d.rowFor(&InsertParams{Job: job, Extension: ext})
	b.jobs, b.ups, b.rowErrs = append(b.jobs, job), append(b.ups, up), append(b.rowErrs, err)
}

// BeforeWrite writes the rows; a row no database took is logged and its
// job pushed without one, as for a single push.
func (b *bulkInsert) BeforeWrite(ctx context.Context) error {
	results, errs := b.d.insertRows(context.WithoutCancel(ctx), b.jobs, b.ups, b.rowErrs)
	for i, job := range b.jobs {
		b.d.logInsert(job, results[i], errs[i])
	}
	return nil
}

var _ sidekiq.PushGroupHook = (*bulkInsert)(nil)
