package store

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/pgtest"
)

// outboxRow writes a row to push as Enqueue does, outside any transaction.
func outboxRow(t *testing.T, s *sqlStore, jid string, at time.Time) {
	t.Helper()
	q, args, _ := s.OutboxInsert(UpsertParams{JobID: jid, JobClass: "C", ItemJSON: `{"jid":"` + jid + `"}`, Queue: "q",
		InsertedAt: at, AssumeDeadAt: at.Add(time.Minute)})
	_, err := s.exec(context.Background(), q, args...)
	require.NoError(t, err)
}

// The outbox part of the store suite: leases exclude each other until they
// end, a pushed row becomes an ordinary row unless its job took its own
// lock meanwhile, and the reconciler's pages skip rows to push.
func TestStoreOutbox(t *testing.T) {
	t.Parallel()
	pgtest.EachBackend(t, func(t *testing.T, be pgtest.Backend) {
		ctx := context.Background()
		s := openTestStore(t, be)
		t0 := testNow
		for i, jid := range []string{"o1", "o2", "o3"} {
			outboxRow(t, s, jid, t0.Add(time.Duration(i)*time.Second))
		}
		c, err := s.Status(ctx, t0.Add(time.Hour))
		require.NoError(t, err)
		require.Equal(t, Counts{Total: 3, ToPush: 3, NextDue: c.NextDue}, *c)
		due, err := s.ListDue(ctx, ListDueParams{Now: t0.Add(time.Hour), Limit: 10})
		require.NoError(t, err)
		require.Empty(t, due, "rows to push are not the reconciler's")

		lease := func(now time.Time, limit int) []string {
			rows, err := s.OutboxLease(ctx, OutboxLeaseParams{Now: now, Until: now.Add(time.Minute), Limit: limit})
			require.NoError(t, err)
			var jids []string
			for _, r := range rows {
				jids = append(jids, r.JobID)
			}
			return jids
		}
		require.Equal(t, []string{"o1", "o2"}, lease(t0, 2), "oldest first")
		require.Equal(t, []string{"o3"}, lease(t0, 10), "leased rows are skipped")
		require.Empty(t, lease(t0.Add(30*time.Second), 10))

		// o1's job started before its relay cleared the row: its lock stays.
		ok, err := lock(ctx, s, LockParams{JobID: "o1", LockedBy: "host:1:abc", LockedAt: t0, AssumeDeadAt: t0.Add(time.Hour)})
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, s.OutboxPushed(ctx, []string{"o1", "o2", "absent"}))
		r, err := s.Get(ctx, "o1")
		require.NoError(t, err)
		require.Equal(t, "host:1:abc", *r.LockedBy)
		r, err = s.Get(ctx, "o2")
		require.NoError(t, err)
		require.Nil(t, r.LockedBy)
		require.Nil(t, r.LockedAt)

		// o3's relay died: its lease ends and another takes it.
		require.Equal(t, []string{"o3"}, lease(t0.Add(2*time.Minute), 10))
		c, err = s.Status(ctx, t0)
		require.NoError(t, err)
		require.Equal(t, int64(1), c.ToPush)
		require.Equal(t, int64(1), c.Locked)
		require.Equal(t, int64(1), c.Waiting)
	})
}
