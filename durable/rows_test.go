package durable

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/pgtest"
	"github.com/gojob/gojob/sidekiq/rubyjson"
)

func TestRowsListsEveryDatabaseEarliestDeadlineFirst(t *testing.T) {
	t.Parallel()
	pgtest.EachBackend(t, func(t *testing.T, be pgtest.Backend) {
		urls := be.URLs(t)
		b := setup(t, bundleOpts{urls: urls[:]})
		ctx := context.Background()
		later := newJob(t, "DurableJob", 1)
		later.Set("at", rubyjson.FloatValue(contract.EpochSeconds(testNow.Add(10*time.Minute))))
		rubyPush(t, b, later)
		sooner := newJob(t, "DurableJob", 2)
		rubyPush(t, b, sooner)

		rows, err := b.d.Rows(ctx, 0)
		require.NoError(t, err)
		require.Len(t, rows, 2)
		require.Equal(t, []string{sooner.JID(), later.JID()}, []string{rows[0].JobID, rows[1].JobID})
		require.Equal(t, "DurableJob", rows[0].JobClass)
		require.NotEmpty(t, rows[0].Database)

		rows, err = b.d.Rows(ctx, 1)
		require.NoError(t, err)
		require.Len(t, rows, 1)
	})
}
