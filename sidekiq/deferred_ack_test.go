package sidekiq

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq/wire"
)

// Successes whose acknowledgements a middleware holds back stay in the
// in-progress list until it releases them, and ReleaseAcks releases many
// at once: every one of them leaves the list, none twice.
func TestReleaseAcksTakesHeldSuccessesOutOfTheInProgressListTogether(t *testing.T) {
	t.Parallel()
	for _, mode := range []FetchMode{FetchReliable} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			b := newTestServer(t, ServerConfig{Concurrency: 4, Fetch: mode})
			var mu sync.Mutex
			var held []DeferredAck
			b.srv.Use(func(ctx context.Context, job *wire.Job, next func(context.Context) error) error {
				ack, ok := DeferAck(ctx)
				require.True(t, ok, "a reliable fetch defers")
				if err := next(ctx); err != nil {
					return err
				}
				mu.Lock()
				held = append(held, ack)
				mu.Unlock()
				return nil
			})
			b.srv.HandleFunc("HeldJob", func(context.Context, *wire.Job) error { return nil })
			const n = 20
			for i := range n {
				b.push(t, "default", fmt.Sprintf(`{"class":"HeldJob","args":[],"jid":"h%02d","queue":"default","retry":true}`, i))
			}
			b.start(t)
			wait.For(t, "every job run", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(held) == n
			})
			inProgress := func() int { return len(redistest.InProgress(t, b.conn, "")) }
			wait.For(t, "every job's processor done", func() bool { p, _ := b.srv.counters.Pending(); return p == n })
			require.Equal(t, n, inProgress(), "held successes stay in the in-progress list")
			mu.Lock()
			acks := held
			mu.Unlock()
			ReleaseAcks(acks...)
			ReleaseAcks(acks[:3]...) // a second release does nothing
			wait.For(t, "the in-progress hash empty", func() bool { return inProgress() == 0 })
		})
	}
}
