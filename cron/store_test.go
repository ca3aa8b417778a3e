package cron

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/monoclock"
	"github.com/gojob/gojob/internal/redistest"
)

// A save Redis refuses (READONLY on a replica, LOADING after a restart) is
// an error, not a job that was never stored.
func TestSaveFailsWhenRedisRefusesTheWrite(t *testing.T) {
	t.Parallel()
	rs := redistest.StartWith(t, redistest.Options{Args: []string{"--replicaof", "127.0.0.1", "1"}})
	st := newStore(t, rs.Pool(t), monoclock.Or(nil), Layout{})
	err := st.Save(context.Background(), &Job{Name: "nightly", Cron: "0 3 * * *", Class: "Report", Enabled: true})
	require.ErrorContains(t, err, "READONLY")
}
