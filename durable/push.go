package durable

import (
	"context"
	"time"

	"github.com/gojob/gojob/durable/internal/store"
	"github.com/gojob/gojob/sidekiq/wire"
)

// BeforePush writes the rows of a push's durable jobs before the push
// reaches Redis (Amigo's ClientMiddleware and insert_job;
// sidekiq.Extension): for each job of a durable class it upserts the row
// into the first database that accepts it, with assume_dead_at = run time
// ("at" when scheduled, else now) + the class's extension. A bulk push's
// rows are written together. It runs after every client middleware, so a
// middleware that stops a push leaves no row behind, and the row always
// precedes the job in Redis.
//
// A push never fails because of the databases: when none accepts the row,
// the error is logged and the job is pushed without one (Ruby logs "no
// database available to insert" the same way). Items carrying Amigo's
// legacy durable_reenqueued_at marker are not recorded.
func (d *Durable) BeforePush(ctx context.Context, jobs []*wire.Job) error {
	if ctx.Value(outboxKey{}) != nil {
		return nil // a relay's push: the rows exist
	}
	ctx = context.WithoutCancel(ctx)
	var bulk *bulkInsert
	for _, job := range jobs {
		ext, ok := d.jobExtension(job)
		if !ok || job.Has("durable_reenqueued_at") {
			continue
		}
		if len(jobs) == 1 {
			res, err := d.insert(ctx, &insertParams{Job: job, Extension: ext})
			d.logInsert(job, res, err)
			return nil
		}
		if bulk == nil {
			bulk = &bulkInsert{d: d}
		}
		bulk.add(job, ext)
	}
	if bulk != nil {
		bulk.write(ctx)
	}
	return nil
}

// logInsert logs the databases an insert skipped, and its failure: the
// job is then pushed without a row.
func (d *Durable) logInsert(job *wire.Job, res *insertResult, err error) {
	if res != nil {
		for _, skipped := range res.Skipped {
			d.log.Warn().Err(skipped).Str("component", "durable").Str("class", job.Class()).Str("jid", job.JID()).
				Msg("durable insert failed; trying the next database")
		}
	}
	if err != nil {
		d.log.Error().Err(err).Str("component", "durable").Str("class", job.Class()).Str("jid", job.JID()).
			Msg("no database available to insert; the job is pushed without a durable row")
	}
}

// bulkInsert gathers the rows of one bulk push and writes them together.
type bulkInsert struct {
	d       *Durable
	jobs    []*wire.Job
	ups     []store.UpsertParams
	rowErrs []error
}

// add records a job's row (what a single push writes).
func (b *bulkInsert) add(job *wire.Job, ext time.Duration) {
	up, err := b.d.rowFor(&insertParams{Job: job, Extension: ext})
	b.jobs, b.ups, b.rowErrs = append(b.jobs, job), append(b.ups, up), append(b.rowErrs, err)
}

// write writes the rows; a row no database took is logged and its job
// pushed without one, as for a single push.
func (b *bulkInsert) write(ctx context.Context) {
	results, errs := b.d.insertRows(ctx, b.jobs, b.ups, b.rowErrs)
	for i, job := range b.jobs {
		b.d.logInsert(job, results[i], errs[i])
	}
}
