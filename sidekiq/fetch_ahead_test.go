package sidekiq

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/sidekiq/wire"
)

// With the reliable fetch, a job that calls FetchAhead gets its slot's
// next job prepared on arrival: that job runs with PreparedAhead set to
// what prepare returned for it. The other fetches do not fetch ahead.
func TestJobFetchedAheadRunsWithWhatItsPrepareReturned(t *testing.T) {
	t.Parallel()
	for _, mode := range []FetchMode{FetchReliable, FetchBRPOP} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			b := newTestServer(t, ServerConfig{Concurrency: 1, Fetch: mode, Queues: []wire.QueueWeight{{Name: "default"}}})
			const n = 4
			for i := range n {
				b.push(t, "default", fmt.Sprintf(`{"class":"Job","args":[],"jid":"j%d","queue":"default"}`, i))
			}
			var mu sync.Mutex
			started := 0
			prepared := map[string]any{}
			b.srv.Use(func(ctx context.Context, job *wire.Job, next func(context.Context) error) error {
				v, ok := PreparedAhead(ctx)
				ahead := FetchAhead(ctx, func(next *wire.Job) any { return "prepared " + next.JID() })
				mu.Lock()
				if ok {
					prepared[job.JID()] = v
				}
				if ahead {
					started++
				}
				mu.Unlock()
				return next(ctx)
			})
			b.srv.Handle("Job", HandlerFunc(func(context.Context, *wire.Job) error { return nil }), nil)
			b.start(t)
			b.waitProcessed(t, n)
			mu.Lock()
			defer mu.Unlock()
			if mode != FetchReliable {
				require.Zero(t, started)
				require.Empty(t, prepared)
				return
			}
			// A slot whose last job took 5 ms or more (a loaded machine)
			// does not fetch ahead, so not every job need have been.
			require.NotZero(t, started)
			require.NotEmpty(t, prepared)
			for jid, v := range prepared {
				require.Equal(t, "prepared "+jid, v)
				require.NotEqual(t, "j0", jid, "the first job was fetched by its slot")
			}
		})
	}
}
