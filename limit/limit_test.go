package limit

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/clocktest"
	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/wire"
)

// A concurrent limiter of 3 shared by three servers of 5 slots each never
// lets a fourth job of the class run, and all the jobs run.
func TestConcurrentLimitHoldsAcrossServers(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	pool := rs.Pool(t)
	var running, peak, done atomic.Int64
	for i := range 3 {
		srv, err := sidekiq.NewServer(&sidekiq.ServerConfig{Pool: pool, Concurrency: 5, DisablePoller: true,
			Fetch: "reliable", Logger: zerolog.Nop(), Tag: fmt.Sprint("s", i)})
		require.NoError(t, err)
		l, err := NewConcurrent(pool, "class:Limited", 3, &Options{WaitTimeout: time.Minute})
		require.NoError(t, err)
		srv.Use(ClassMiddleware("Limited", l))
		srv.Handle("Limited", sidekiq.HandlerFunc(func(ctx context.Context, job *wire.Job) error {
			n := running.Add(1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			time.Sleep(20 * time.Millisecond)
			running.Add(-1)
			done.Add(1)
			return nil
		}), nil)
		require.NoError(t, srv.Start(context.Background()))
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			srv.Stop(ctx)
		})
	}
	c, err := sidekiq.NewClient(&sidekiq.ClientConfig{Pool: pool})
	require.NoError(t, err)
	for i := range 60 {
		_, err := c.Enqueue(context.Background(), "default", "Limited", i)
		require.NoError(t, err)
	}
	defer func() {
		if t.Failed() {
			conn := pool.Get()
			defer conn.Close()
			slots, _ := redis.Strings(conn.Do("ZRANGE", keyPrefix+"class:Limited:concurrent", 0, -1, "WITHSCORES"))
			sched, _ := redis.Int(conn.Do("ZCARD", contract.KeySchedule))
			q, _ := redis.Int(conn.Do("LLEN", "queue:default"))
			t.Logf("done %d, running %d, slots %v, scheduled %d, queued %d", done.Load(), running.Load(), slots, sched, q)
		}
	}()
	wait.Within(t, 30*time.Second, "every job", func() bool { return done.Load() == 60 })
	require.Equal(t, int64(3), peak.Load(), "three at a time, never four")
	// The handler counts itself done before the middleware releases its
	// slot: the last release may still be on its way.
	conn := pool.Get()
	defer conn.Close()
	wait.Within(t, 5*time.Second, "every slot freed", func() bool {
		n, err := redis.Int(conn.Do("ZCARD", keyPrefix+"class:Limited:concurrent"))
		require.NoError(t, err)
		return n == 0
	})
}

// A slot whose holder died (it stopped refreshing) frees after the lock
// timeout; a live holder keeps its slot beyond it.
func TestConcurrentSlotOfACrashedHolderFreesAfterItsTimeout(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	pool := rs.Pool(t)
	l, err := NewConcurrent(pool, "one", 1, &Options{NoWait: true, LockTimeout: 600 * time.Millisecond})
	require.NoError(t, err)
	conn := pool.Get()
	defer conn.Close()
	// A holder that took the slot and was killed: nothing refreshes it.
	_, err = conn.Do("ZADD", l.(*concurrent).key(), time.Now().Add(600*time.Millisecond).UnixMilli(), "dead-holder")
	require.NoError(t, err)
	ran := func() error { return l.Within(context.Background(), func(context.Context) error { return nil }) }
	var ol *sidekiq.OverLimitError
	require.ErrorAs(t, ran(), &ol)
	require.Equal(t, "one", ol.Limiter)
	wait.Within(t, 5*time.Second, "the dead holder's slot to free", func() bool { return ran() == nil })

	// A live holder running for 3 lock timeouts keeps the slot.
	release := make(chan struct{})
	go l.Within(context.Background(), func(context.Context) error { <-release; return nil })
	wait.For(t, "the holder to take the slot", func() bool {
		n, _ := redis.Int(conn.Do("ZCARD", l.(*concurrent).key()))
		return n == 1
	})
	time.Sleep(1800 * time.Millisecond)
	require.ErrorAs(t, ran(), &ol, "still held")
	close(release)
	wait.For(t, "the slot to free", func() bool { return ran() == nil })
}

// A bucket allows N per aligned interval and says when the next one
// starts; a window allows N in any sliding interval and says when the
// oldest use leaves it.
func TestBucketAndWindowLimits(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	pool := rs.Pool(t)
	clk := clocktest.NewFake(time.Unix(1795296000, 250*int64(time.Millisecond)))
	ok := func(context.Context) error { return nil }
	b, err := NewBucket(pool, "api", 3, time.Second, &Options{Clock: clk})
	require.NoError(t, err)
	for range 3 {
		require.NoError(t, b.Within(context.Background(), ok))
	}
	var ol *sidekiq.OverLimitError
	require.ErrorAs(t, b.Within(context.Background(), ok), &ol)
	require.Equal(t, 750*time.Millisecond, ol.RetryAfter)
	clk.Advance(750 * time.Millisecond)
	require.NoError(t, b.Within(context.Background(), ok), "a new second")

	w, err := NewWindow(pool, "mail", 2, time.Second, &Options{Clock: clk})
	require.NoError(t, err)
	require.NoError(t, w.Within(context.Background(), ok))
	clk.Advance(400 * time.Millisecond)
	require.NoError(t, w.Within(context.Background(), ok))
	clk.Advance(200 * time.Millisecond)
	require.ErrorAs(t, w.Within(context.Background(), ok), &ol)
	require.Equal(t, 400*time.Millisecond, ol.RetryAfter)
	clk.Advance(401 * time.Millisecond)
	require.NoError(t, w.Within(context.Background(), ok), "the first use left the window")

	clk.Advance(2 * time.Second)
	failing := errors.New("handler failed")
	require.ErrorIs(t, w.Within(context.Background(), func(context.Context) error { return failing }), failing)
}
