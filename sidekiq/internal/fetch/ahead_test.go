package fetch

import (
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq/wire"
)

// aheadBundle is a one-slot reliable fetch over queue:default holding
// jobs, whose hook is set by the test.
func aheadBundle(t *testing.T, jobs ...string) (*fetchBundle, Fetcher, string) {
	t.Helper()
	b := reliableBundle(t, nil, func(c *Config) { c.Concurrency, c.Pipeline = 1, 1 })
	for _, j := range jobs {
		b.conn.Send("LPUSH", "queue:default", j)
	}
	_, err := b.conn.Do("")
	require.NoError(t, err)
	return b, newReliable(t, b, "reliable"), wire.WorkingListKey("default", testIdentity)
}

func (b *fetchBundle) list(t *testing.T, key string) []string {
	t.Helper()
	v, err := redis.Strings(b.conn.Do("LRANGE", key, 0, -1))
	require.NoError(t, err)
	return v
}

// A job that calls FetchAhead lets its slot move the next job to the
// in-progress list while it runs; that job is prepared on arrival and is
// the next one its slot runs, once.
func TestJobFetchedAheadWaitsInTheInProgressListAndRunsNextInItsSlot(t *testing.T) {
	t.Parallel()
	b, f, list := aheadBundle(t, "j1", "j2", "j3")
	f.(*reliableFetch).aheadMaxRun = time.Minute // j1 waits for the test
	var mu sync.Mutex
	var order, prepared []string
	b.hook = func(u Unit) {
		p, _ := u.Prepared.(string)
		mu.Lock()
		order = append(order, string(u.Raw))
		prepared = append(prepared, p)
		mu.Unlock()
		require.True(t, u.FetchAhead(func(next *Unit) { next.Prepared = "prepared " + string(next.Raw) }))
		require.False(t, u.FetchAhead(nil), "one fetch ahead per job")
		if string(u.Raw) == "j1" {
			wait.For(t, "j2 fetched ahead into the in-progress list", func() bool {
				return len(b.list(t, list)) == 2
			})
			require.ElementsMatch(t, []string{"j1", "j2"}, b.list(t, list))
			require.Equal(t, []string{"j3"}, b.list(t, "queue:default"))
		}
		f.Finish(u, nil)
	}
	b.start(t, f)
	t.Cleanup(f.Close)
	wait.For(t, "three jobs", func() bool { return b.processed() == 3 })
	mu.Lock()
	require.Equal(t, []string{"j1", "j2", "j3"}, order)
	require.Equal(t, []string{"", "prepared j2", "prepared j3"}, prepared)
	mu.Unlock()
	b.mu.Lock()
	require.Equal(t, map[string]int{"j1": 1, "j2": 1, "j3": 1}, b.runs)
	b.mu.Unlock()
	wait.For(t, "the acknowledgements sent", func() bool { return len(b.list(t, list)) == 0 })
}

// A job fetched ahead of one that runs longer than aheadHold goes back to
// the pop end of its queue (it runs next, here or elsewhere) instead of
// waiting behind it; and a slot whose last job was long does not fetch
// ahead for the next one.
func TestJobFetchedAheadGoesBackToItsQueueWhenItsSlotIsBusyTooLong(t *testing.T) {
	t.Parallel()
	b, f, list := aheadBundle(t, "j1", "j2", "j3")
	b.hook = func(u Unit) {
		switch string(u.Raw) {
		case "j1":
			require.True(t, u.FetchAhead(nil))
			wait.For(t, "j2 fetched ahead", func() bool { return len(b.list(t, list)) == 2 })
			wait.For(t, "j2 given back to its queue", func() bool {
				q := b.list(t, "queue:default")
				return len(q) == 2 && q[1] == "j2" // the pop end
			})
			require.Equal(t, []string{"j1"}, b.list(t, list))
			time.Sleep(aheadMaxRun) // j1 is a long job
		case "j2":
			require.False(t, u.FetchAhead(nil), "no fetch ahead after a long job")
		case "j3":
			require.True(t, u.FetchAhead(nil), "j2 was short")
		}
		f.Finish(u, nil)
	}
	b.start(t, f)
	t.Cleanup(f.Close)
	wait.For(t, "three jobs", func() bool { return b.processed() == 3 })
	b.mu.Lock()
	require.Equal(t, map[string]int{"j1": 1, "j2": 1, "j3": 1}, b.runs)
	b.mu.Unlock()
	wait.For(t, "the acknowledgements sent", func() bool { return len(b.list(t, list)) == 0 })
}

// When the server goes quiet, a job fetched ahead goes back to its queue
// at once, while the job it was fetched for still runs; nothing is left in
// the in-progress list once that one is done.
func TestJobFetchedAheadGoesBackToItsQueueAtQuiet(t *testing.T) {
	t.Parallel()
	b, f, list := aheadBundle(t, "j1", "j2")
	b.hook = func(u Unit) {
		require.Equal(t, "j1", string(u.Raw), "j2 never runs")
		require.True(t, u.FetchAhead(nil))
		wait.For(t, "j2 fetched ahead", func() bool { return len(b.list(t, list)) == 2 })
		b.quietNow()
		wait.For(t, "j2 back in its queue while j1 runs", func() bool {
			return len(b.list(t, "queue:default")) == 1
		})
		f.Finish(u, nil)
	}
	f.Start()
	wait.For(t, "j1 processed", func() bool { return b.processed() == 1 })
	f.Wait()
	f.Close()
	require.Equal(t, []string{"j2"}, b.list(t, "queue:default"))
	require.Empty(t, b.keys(t, "working:*"))
}

// The own-list sweep takes a job in the in-progress list for an orphan
// only when no slot holds it: the job a slot fetched ahead is held until
// it runs (then as the slot's job) or is given back.
func TestSlotHoldsTheJobItFetchedAheadUntilItRunsOrGoesBack(t *testing.T) {
	t.Parallel()
	var st slotState
	running, ahead := []byte("j1"), []byte("j2")
	st.hold("l", running)
	st.holdAhead("l", ahead)
	held := func() map[string]int {
		in := map[string]map[string]int{}
		st.held(in)
		return in["l"]
	}
	require.Equal(t, map[string]int{"j1": 1, "j2": 1}, held())
	st.dropIf(running) // j1 acknowledged
	require.Equal(t, map[string]int{"j2": 1}, held())
	st.promote() // j2 runs
	require.Equal(t, map[string]int{"j2": 1}, held())
	st.holdAhead("l", []byte("j3"))
	st.dropIf([]byte("j3")) // an equal copy is not the job held
	require.Equal(t, map[string]int{"j2": 1, "j3": 1}, held())
}
