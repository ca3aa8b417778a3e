package sidekiq

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

func uniqueJob(t *testing.T, class string, uniqueFor float64, until string, args ...any) *wire.Job {
	t.Helper()
	j, err := wire.NewJob(class, args...)
	require.NoError(t, err)
	j.SetQueue("default")
	j.Set("unique_for", rubyjson.FloatValue(uniqueFor))
	if until != "" {
		j.Set("unique_until", rubyjson.StringValue(until))
	}
	return j
}

// Twenty concurrent pushes of one unique job leave one job in the queue;
// the others report a duplicate; other arguments or another queue are
// other jobs. The lock lasts unique_for, plus the delay of a scheduled job.
func TestUniqueJobIsPushedOnceUnderConcurrency(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	pool := rs.Pool(t)
	c, err := NewClient(&ClientConfig{Pool: pool})
	require.NoError(t, err)
	ctx := context.Background()
	var wg sync.WaitGroup
	var mu sync.Mutex
	pushed, dups := 0, 0
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := c.Push(ctx, uniqueJob(t, "Report", 60, "", 1, "a"), nil)
			require.NoError(t, err)
			mu.Lock()
			defer mu.Unlock()
			if res.Duplicate {
				require.Empty(t, res.JID)
				dups++
			} else {
				pushed++
			}
		}()
	}
	wg.Wait()
	require.Equal(t, 1, pushed)
	require.Equal(t, 19, dups)
	conn := pool.Get()
	defer conn.Close()
	n, err := redis.Int(conn.Do("LLEN", "queue:default"))
	require.NoError(t, err)
	require.Equal(t, 1, n)
	ttl, err := redis.Int(conn.Do("PTTL", contract.UniqueKey(uniqueJob(t, "Report", 60, "", 1, "a"))))
	require.NoError(t, err)
	require.InDelta(t, 60000, ttl, 2000)

	other := uniqueJob(t, "Report", 60, "", 2, "a")
	res, err := c.Push(ctx, other, nil)
	require.NoError(t, err)
	require.False(t, res.Duplicate, "other arguments")
	elsewhere := uniqueJob(t, "Report", 60, "", 1, "a")
	elsewhere.SetQueue("low")
	res, err = c.Push(ctx, elsewhere, nil)
	require.NoError(t, err)
	require.False(t, res.Duplicate, "another queue")

	later := uniqueJob(t, "Later", 10, "")
	res, err = c.Push(ctx, later, &PushOpts{In: time.Hour})
	require.NoError(t, err)
	require.True(t, res.Scheduled)
	ttl, err = redis.Int(conn.Do("PTTL", contract.UniqueKey(later)))
	require.NoError(t, err)
	require.InDelta(t, (time.Hour + 10*time.Second).Milliseconds(), ttl, 2000, "unique_for after the run time")
	bulk, err := c.PushBulk(ctx, []*wire.Job{uniqueJob(t, "Later", 10, ""), uniqueJob(t, "Bulk", 10, "")}, nil)
	require.NoError(t, err)
	require.Empty(t, bulk[0], "held by the scheduled one")
	require.Len(t, bulk[1], 24)

	_, err = c.Push(ctx, uniqueJob(t, "Bad", -1, ""), nil)
	require.ErrorContains(t, err, "unique_for must be a positive number")
	_, err = c.Push(ctx, uniqueJob(t, "Bad", 5, "later"), nil)
	require.ErrorContains(t, err, "unique_until")
}

// The lock goes when the job succeeds (the default) or starts
// (unique_until: start); a retry keeps it; the dead set releases it; a job
// retried from the dead set is pushed even while another holds the lock.
func TestUniqueLockReleasedAtSuccessStartOrDeath(t *testing.T) {
	t.Parallel()
	b := newTestServer(t, ServerConfig{Concurrency: 2})
	release := make(chan struct{})
	started := make(chan string, 10)
	b.srv.Handle("Slow", HandlerFunc(func(ctx context.Context, job *wire.Job) error {
		started <- job.JID()
		<-release
		return nil
	}), nil)
	b.srv.Handle("Fails", HandlerFunc(func(ctx context.Context, job *wire.Job) error { return errors.New("boom") }), nil)
	b.start(t)
	c := b.srv.Client()
	ctx := context.Background()
	locked := func(j *wire.Job) bool {
		n, err := redis.Int(b.conn.Do("EXISTS", contract.UniqueKey(j)))
		require.NoError(t, err)
		return n == 1
	}

	succ := uniqueJob(t, "Slow", 60, "", "s")
	_, err := c.Push(ctx, succ, nil)
	require.NoError(t, err)
	<-started
	require.True(t, locked(succ), "held while it runs (until success)")
	res, err := c.Push(ctx, uniqueJob(t, "Slow", 60, "", "s"), nil)
	require.NoError(t, err)
	require.True(t, res.Duplicate)

	atStart := uniqueJob(t, "Slow", 60, "start", "t")
	_, err = c.Push(ctx, atStart, nil)
	require.NoError(t, err)
	<-started
	wait.For(t, "the start to release its lock", func() bool { return !locked(atStart) })
	close(release)
	wait.For(t, "the success to release its lock", func() bool { return !locked(succ) })

	retried := uniqueJob(t, "Fails", 60, "", "r")
	retried.Set("retry", rubyjson.IntValue(3))
	_, err = c.Push(ctx, retried, nil)
	require.NoError(t, err)
	wait.For(t, "the retry", func() bool {
		n, _ := redis.Int(b.conn.Do("ZCARD", contract.KeyRetry))
		return n == 1
	})
	require.True(t, locked(retried), "a retry keeps the lock")

	dies := uniqueJob(t, "Fails", 60, "", "d")
	dies.Set("retry", rubyjson.IntValue(0)) // straight to the dead set
	_, err = c.Push(ctx, dies, nil)
	require.NoError(t, err)
	wait.For(t, "the death", func() bool {
		n, _ := redis.Int(b.conn.Do("ZCARD", contract.KeyDead))
		return n == 1
	})
	wait.For(t, "the death to release the lock", func() bool { return !locked(dies) })

	// Another job takes the lock; retrying the dead one still pushes it.
	holder := uniqueJob(t, "Fails", 60, "", "d")
	res, err = c.Push(ctx, holder, nil)
	require.NoError(t, err)
	require.False(t, res.Duplicate)
	dead, err := redis.ByteSlices(b.conn.Do("ZRANGE", contract.KeyDead, 0, -1))
	require.NoError(t, err)
	deadJob, err := wire.ParseJob(dead[0])
	require.NoError(t, err)
	res, err = c.Push(ctx, deadJob, &PushOpts{Repush: true})
	require.NoError(t, err)
	require.False(t, res.Duplicate)
	require.Len(t, res.JID, 24)
}
