package fetch

import (
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/wait"
)

// The batch fetch pops at most one job per idle slot, in one BLMPOP, and
// each job is processed once.
func TestBatchProcessesEachJobOnce(t *testing.T) {
	t.Parallel()
	b := newFetchBundle(t, nil, func(c *Config) { c.Concurrency = 10 })
	const n = 2000
	for i := 0; i < n; i++ {
		b.conn.Send("LPUSH", "queue:default", fmt.Sprintf("j%d", i))
	}
	_, err := b.conn.Do("")
	require.NoError(t, err)
	f, err := NewBatch(b.cfg)
	require.NoError(t, err)
	require.Equal(t, 0, f.Depth())
	b.start(t, f)
	wait.For(t, "every job processed", func() bool { return b.processed() >= n })
	b.mu.Lock()
	defer b.mu.Unlock()
	require.Len(t, b.runs, n)
	require.Less(t, redistest.CommandCalls(t, b.conn, "blmpop"), n, "several jobs per BLMPOP")
	require.Zero(t, redistest.CommandCalls(t, b.conn, "brpop"))
}

// Jobs popped by a BLMPOP that returns after the server went quiet go back
// in their original order (the oldest still runs first).
func TestBatchRequeueAfterQuietKeepsOrder(t *testing.T) {
	t.Parallel()
	b := newFetchBundle(t, nil, func(c *Config) { c.Concurrency = 3 })
	ff, err := NewBatch(b.cfg)
	require.NoError(t, err)
	f, ok := ff.(*batchFetch)
	require.True(t, ok, "the test redis-server has BLMPOP")
	// The fetcher alone, with three idle slots and no workers.
	for i := 0; i < 3; i++ {
		f.idle <- struct{}{}
	}
	f.wg.Add(1)
	go f.fetch()
	wait.For(t, "the fetcher to block in BLMPOP", func() bool {
		cl, _ := redis.String(b.conn.Do("CLIENT", "LIST"))
		return regexp.MustCompile(`flags=[a-zA-Z]*b[a-zA-Z]* .*cmd=blmpop`).MatchString(cl) // blocked: not the probe
	})
	b.quietNow()
	_, err = b.conn.Do("LPUSH", "queue:default", "j1", "j2", "j3") // j1 is the oldest
	require.NoError(t, err)
	f.wg.Wait()
	require.Equal(t, []string{"j3", "j2", "j1"}, b.queue(t, "default"))
	require.Empty(t, f.jobs, "nothing was handed to a worker")
}

// Only a Redis that refuses BLMPOP gets the BRPOP fetch; one that cannot
// answer yet (loading its data after a restart, say) is asked again.
func TestBatchFallsBackOnlyWhenBLMPOPIsRefused(t *testing.T) {
	t.Parallel()
	rs := redistest.StartWith(t, redistest.Options{Args: []string{"--rename-command", "BLMPOP", ""}})
	b := newFetchBundle(t, rs, nil)
	f, err := NewBatch(b.cfg)
	require.NoError(t, err)
	_, isBatch := f.(*batchFetch)
	require.False(t, isBatch, "BLMPOP is renamed away: the BRPOP fetch")

	b = newFetchBundle(t, nil, nil)
	b.rs.Kill()
	go func() {
		time.Sleep(300 * time.Millisecond)
		b.rs.Restart(t)
	}()
	f, err = NewBatch(b.cfg)
	require.NoError(t, err)
	_, isBatch = f.(*batchFetch)
	require.True(t, isBatch, "a Redis that was down at start still has BLMPOP")
}
