package durable

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/pgtest"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/wire"
)

// A job pushed while the first database was down has its row in the
// second. When the first is back, the re-push of the same jid (the
// scheduler's, the retry poller's) writes to the first: the copy left in
// the second is stale. It must not outlive the job, or the reconciler
// kills a job that completed into the dead set.
func TestRepushAfterFailoverLeavesNoStaleRow(t *testing.T) {
	t.Parallel()
	pgtest.EachBackend(t, func(t *testing.T, be pgtest.Backend) {
		urls := be.URLs(t)
		table := uniqueTable()
		up := setup(t, bundleOpts{urls: urls[:], table: table})
		down := setup(t, bundleOpts{urls: []string{be.Unreachable, urls[1]}, table: table})
		down.clk.Set(up.clk.Now())
		ctx := context.Background()

		// perform_in(1 hour) during the outage: the row lands in the second
		// database, the job in the schedule set.
		job := newJob(t, "DurableJob", 1)
		res, err := down.client.Push(ctx, job, &sidekiq.PushOpts{In: time.Hour})
		require.NoError(t, err)
		require.NotNil(t, up.rowIn(t, 1, job.JID()))

		// An hour later the first database is back; the scheduler re-pushes
		// the job through the client.
		up.clk.Advance(time.Hour)
		scheduled, err := wire.ParseJob(res.Payload)
		require.NoError(t, err)
		_, err = up.client.Push(ctx, scheduled, &sidekiq.PushOpts{Repush: true})
		require.NoError(t, err)
		require.NotNil(t, up.rowIn(t, 0, job.JID()), "the re-push writes to the first database")
		require.Nil(t, up.rowIn(t, 1, job.JID()), "the stale copy in the second is removed")

		// The job runs and succeeds: no row is left anywhere, and two passes
		// later nothing is in the dead set.
		require.NoError(t, up.d.Run(ctx, &sidekiq.Run{Job: scheduled, Identity: "h:1:n"}, func(context.Context) error { return nil }))
		_, err = up.conn.Do("DEL", contract.QueueKey("default")) // the worker took it
		require.NoError(t, err)
		r := up.reconciler(t, nil)
		for range 2 {
			up.clk.Advance(6 * time.Minute)
			up.reconcile(t, r)
		}
		require.Equal(t, 0, up.zcard(t, contract.KeyDead), "a completed job was killed")
	})
}

// A re-push of a jid whose row is already in the first database refreshes
// it there and touches no other database; a first push never does.
func TestRepushInPlaceTouchesNoOtherDatabase(t *testing.T) {
	t.Parallel()
	urls := pgtest.Backends[1].URLs(t)
	b := setup(t, bundleOpts{urls: []string{urls[0], pgtest.Backends[1].Unreachable}})
	ctx := context.Background()
	job := newJob(t, "DurableJob")
	res, err := b.client.Push(ctx, job, &sidekiq.PushOpts{In: time.Minute})
	require.NoError(t, err)
	b.clk.Advance(time.Hour)
	again, err := wire.ParseJob(res.Payload)
	require.NoError(t, err)
	_, err = b.client.Push(ctx, again, &sidekiq.PushOpts{Repush: true})
	require.NoError(t, err)
	require.True(t, micro(b.clk.Now().Add(5*time.Minute)).Equal(b.row(t, job.JID()).AssumeDeadAt))
	require.Equal(t, 0, b.logs.Count("warn", ""), "the unreachable second database was not asked")
}
