// Package batch groups jobs into batches whose callbacks run once every
// job has succeeded (success) or has either succeeded or died (complete),
// in the manner of Sidekiq Pro's batches (docs/batches.md).
//
// A batch is created open, takes jobs (Push registers each job and pushes
// it in one Lua step), and is sealed once its last job is pushed: its
// callbacks wait for the seal, so that a batch whose first jobs finish
// before the last is pushed does not complete early. Batches nest: a batch
// created with a Parent is a member of it, and succeeds or dies there when
// it succeeds or completes with deaths.
//
// A job of a batch carries the batch id in its payload under "gojob_bid".
// Batches is a sidekiq.Extension: on a job's success it records the
// success and pushes the callbacks that became due in one Lua step,
// before the job is acknowledged; a job run again after a crash changes
// nothing, so a kill -9 anywhere neither loses a callback nor fires one
// twice. Deaths are recorded by JobDied. Jobs of no batch skip
// the extension (PayloadKeys): batches cost them nothing.
//
// A job carrying Sidekiq Pro's "bid" is refused: it goes to the dead set
// (error_class Gojob::UnsupportedBatch) without running, since Pro's
// batch bookkeeping is not public and running the job would leave its Pro
// batch pending for ever. Retry it from the dead set in a Sidekiq Pro
// process.
//
//	b, err := batch.New(&batch.Config{Client: client})
//	st, err := b.Create(ctx, &batch.CreateParams{OnSuccess: "ReportDone"})
//	for _, job := range jobs {
//		b.Push(ctx, st.BID, job)
//	}
//	b.Seal(ctx, st.BID)
package batch
