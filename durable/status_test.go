package durable

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/pgtest"
)

// Status before Migrate says the table is missing (ErrNoTable) and how to
// create it, on PostgreSQL and SQLite alike.
func TestStatusBeforeMigrateHintsAtMigrate(t *testing.T) {
	pgtest.EachBackend(t, func(t *testing.T, be pgtest.Backend) {
		urls := be.URLs(t)
		d, err := New(&Config{URLs: urls[:1], Table: uniqueTable(), Classes: map[string]time.Duration{"X": 0}, ConnectTimeout: 2 * time.Second})
		require.NoError(t, err)
		defer d.Close()
		st, err := d.Status(context.Background())
		require.NoError(t, err)
		require.Len(t, st.Databases, 1)
		serr := st.Databases[0].Err
		require.Error(t, serr)
		require.True(t, errors.Is(serr, ErrNoTable), "%v", serr)
		require.Contains(t, serr.Error(), "gojob durable migrate")

		_, err = d.Migrate(context.Background())
		require.NoError(t, err)
		st, err = d.Status(context.Background())
		require.NoError(t, err)
		require.NoError(t, st.Databases[0].Err)
	})
}
