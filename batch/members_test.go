package batch

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// Members names the batch's pending and dead jobs with where they are and
// their last error: a failed job waiting for its retry, one still in its
// queue, one that died.
func TestMembersListPendingAndDeadJobsWithErrors(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	ctx := context.Background()
	st, err := tb.batches.Create(ctx, &CreateParams{OnComplete: "Finished"})
	require.NoError(t, err)
	push := func(job *wire.Job) string {
		jid, ok, err := tb.batches.Push(ctx, st.BID, job)
		require.NoError(t, err)
		require.True(t, ok)
		return jid
	}
	pass := push(newJob(t, "Pass"))
	flaky := newJob(t, "Flaky")
	flaky.Set("retry", rubyjson.IntValue(5))
	flakyJID := push(flaky)
	fatal := newJob(t, "Fatal")
	fatal.Set("retry", rubyjson.IntValue(0))
	fatalJID := push(fatal)
	waiting := newJob(t, "Waiting")
	waiting.SetQueue("elsewhere")
	waitingJID := push(waiting)
	require.NoError(t, tb.batches.Seal(ctx, st.BID))

	tb.startServer(t, map[string]sidekiq.HandlerFunc{
		"Pass":  func(context.Context, *wire.Job) error { return nil },
		"Flaky": func(context.Context, *wire.Job) error { return errors.New("upstream timed out") },
		"Fatal": func(context.Context, *wire.Job) error { return errors.New("card declined") },
	})
	wait.Within(t, 20*time.Second, "one success, one retry, one death", func() bool {
		s, err := tb.batches.Status(ctx, st.BID)
		require.NoError(t, err)
		n, err := redis.Ints(redis.Values(tb.conn.Do("EVAL", "return {redis.call('ZCARD','retry'), redis.call('ZCARD','dead')}", 0)))
		require.NoError(t, err)
		return s.Succeeded == 1 && s.Dead == 1 && n[0] == 1 && n[1] == 1
	})

	pending, dead, nPending, nDead, err := tb.batches.Members(ctx, st.BID, 0)
	require.NoError(t, err)
	require.Equal(t, 2, nPending)
	require.Equal(t, 1, nDead)
	require.Len(t, pending, 2)
	require.Equal(t, flakyJID, pending[0].JID, "the failed one first")
	require.Equal(t, "retry", pending[0].Set)
	require.Equal(t, "Flaky", pending[0].Class)
	require.Contains(t, pending[0].ErrorMessage, "upstream timed out")
	require.NotEmpty(t, pending[0].ErrorClass)
	require.NotNil(t, pending[0].At)
	require.NotNil(t, pending[0].FailedAt)
	require.Equal(t, waitingJID, pending[1].JID)
	require.Empty(t, pending[1].Set, "in its queue")
	require.Len(t, dead, 1)
	require.Equal(t, fatalJID, dead[0].JID)
	require.Equal(t, "dead", dead[0].Set)
	require.Contains(t, dead[0].ErrorMessage, "card declined")
	for _, m := range append(pending, dead...) {
		require.NotEqual(t, pass, m.JID, "a success is not listed")
	}

	p1, d1, n1, _, err := tb.batches.Members(ctx, st.BID, 1)
	require.NoError(t, err)
	require.Len(t, p1, 1, "limit")
	require.Len(t, d1, 1)
	require.Equal(t, 2, n1, "the count is of all")

	_, _, _, _, err = tb.batches.Members(ctx, "nosuchbatch", 0)
	require.ErrorIs(t, err, ErrNotFound)
}
