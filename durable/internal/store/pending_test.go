package store

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/pgtest"
	"github.com/gojob/gojob/internal/testlog"
)

// One write is kept per row (the later replaces the earlier), the queue is
// bounded, and a database that does not answer stops its round at its
// first write.
func TestPendingWritesReplaceAndBound(t *testing.T) {
	t.Parallel()
	be := pgtest.Backends[1]
	st, err := Open(be.Unreachable, testOptions(uniqueTable()))
	require.NoError(t, err)
	defer st.Close()
	logs := testlog.New(t)
	// The background retry does not run during the test.
	p := NewPending(PendingConfig{Log: zerolog.New(logs), Max: 2, MinDelay: time.Hour, MaxDelay: time.Hour})
	defer p.Stop(context.Background())
	p.Add(&PendingWrite{Store: st, JID: "a", Kind: PendingDelete})
	p.Add(&PendingWrite{Store: st, JID: "a", Kind: PendingUnlock})
	require.Equal(t, 1, p.Len())
	require.Equal(t, PendingUnlock, p.Get(st, "a").Kind)
	p.Add(&PendingWrite{Store: st, JID: "b", Kind: PendingRemove})
	p.Add(&PendingWrite{Store: st, JID: "c", Kind: PendingRemove})
	require.Equal(t, 2, p.Len())
	require.Nil(t, p.Get(st, "c"))
	require.Equal(t, 1, logs.Count("error", "too many durable row writes pending"))
	p.Add(&PendingWrite{Store: st, JID: "b", Kind: PendingRemove})
	require.Equal(t, 2, p.Len(), "replacing a write is not bounded")
	p.Add(&PendingWrite{Store: st, JID: "b", Kind: PendingUnlock})
	require.Equal(t, PendingRemove, p.Get(st, "b").Kind, "a stale copy's removal stands")

	round := p.runOnce(context.Background())
	require.Zero(t, round.Applied)
	require.Equal(t, []Store{st}, round.Unreachable)
	left := p.snapshot(nil)
	require.Len(t, left, 2)
	require.Equal(t, "a", left[0].JID, "oldest first")
}
