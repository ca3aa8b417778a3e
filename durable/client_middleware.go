package durable

import (
	"context"

	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/wire"
)

// ClientMiddleware returns the client middleware that writes a durable
// job's row before the job reaches Redis (Amigo's ClientMiddleware and
// insert_job): it lets the rest of the chain run, then, for a durable
// class, upserts the row into the first database that accepts it, with
// assume_dead_at = run time ("at" when scheduled, else now) + the class's
// extension. The push itself happens after the whole chain returns, so the
// row always precedes the job in Redis.
//
// A push never fails because of the databases: when none accepts the row,
// the error is logged and the job is pushed without one (Ruby logs "no
// database available to insert" the same way). Items carrying Amigo's
// legacy durable_reenqueued_at marker are not recorded.
//
// Add it last in the client chain (as in Ruby, where it must be last):
// a middleware after it that stops the push would leave a row for a job
// that never reached Redis, which the reconciler then reports as lost.
// Install it on every client that pushes durable jobs, including the
// server's own client (in-job pushes and the retry/schedule poller's
// re-pushes go through it).
func (d *Durable) ClientMiddleware() sidekiq.ClientMiddleware {
	return func(ctx context.Context, job *wire.Job, next func(context.Context) error) error {
		if err := next(ctx); err != nil {
			return err
		}
		ext, ok := d.jobExtension(job)
		if !ok || job.Has("durable_reenqueued_at") {
			return nil
		}
		if g := sidekiq.PushGroupFrom(ctx); g != nil {
			// PushBulk: the group's rows are written together, before it
			// reaches Redis.
			b := g.Attach(d, func() sidekiq.PushGroupHook { return &bulkInsert{d: d} }).(*bulkInsert)
			b.add(job, ext)
			return nil
		}
		res, err := d.Insert(context.WithoutCancel(ctx), &InsertParams{Job: job, Extension: ext})
		d.logInsert(job, res, err)
		return nil
	}
}

// logInsert logs the databases an insert skipped, and its failure: the
// job is then pushed without a row.
func (d *Durable) logInsert(job *wire.Job, res *InsertResult, err error) {
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
