package sidekiq

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/sidekiq/internal/fetch"
	"github.com/gojob/gojob/sidekiq/wire"
)

// A capped queue is skipped by the fetch exactly while it runs its cap,
// whatever the concurrent enters and leaves, and a pause through Redis
// stays apart from it.
func TestQueueCapsFillAndEmptyTheOrder(t *testing.T) {
	t.Parallel()
	order := fetch.NewOrder([]wire.QueueWeight{{Name: "mail"}, {Name: "default"}}, wire.Version7)
	caps := newQueueCaps(map[string]int{"mail": 3}, order)
	require.True(t, caps.enter("default"), "uncapped")
	var wg sync.WaitGroup
	entered := make(chan bool, 50)
	for range 50 {
		wg.Add(1)
		go func() { defer wg.Done(); entered <- caps.enter("mail") }()
	}
	wg.Wait()
	close(entered)
	n := 0
	for ok := range entered {
		if ok {
			n++
		}
	}
	require.Equal(t, 3, n, "never more than the cap")
	require.True(t, order.Paused("mail"), "full: skipped")
	require.False(t, order.PausedByRedis("mail"))
	require.False(t, order.AllPaused())
	caps.leave("mail")
	require.False(t, order.Paused("mail"), "room again")
	require.True(t, caps.enter("mail"))
	require.True(t, order.Paused("mail"))

	require.True(t, order.SetPaused([]string{"default"}))
	require.True(t, order.AllPaused(), "full and paused")
	require.False(t, order.SetPaused([]string{"default"}), "the full queue is no pause")
	caps.leave("mail")
	require.False(t, order.Paused("mail"))
	require.True(t, order.Paused("default"))
	require.Equal(t, "mail=3", caps.String())
	require.Nil(t, newQueueCaps(nil, order))
	require.True(t, (*queueCaps)(nil).enter("mail"))
}
