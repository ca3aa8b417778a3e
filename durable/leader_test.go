package durable

import (
	"context"
	"testing"
	"time"

	"github.com/gojob/gojob/internal/pgtest"
	"github.com/gojob/gojob/sidekiq/wire"
	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"
)

func TestPollerLeaderElection(t *testing.T) {
	t.Parallel()
	urls := pgtest.Backends[1].URLs(t)
	b := setup(t, bundleOpts{urls: urls[:]})
	ctx := context.Background()
	newPoller := func(id string) *poller {
		p, err := newPoller(&PollerConfig{Reconciler: b.reconciler(t, nil), Pool: b.pool, Identity: id, Interval: time.Minute})
		require.NoError(t, err)
		return p
	}
	p1, p2 := newPoller("one"), newPoller("two")

	o, err := p1.runOnce(ctx)
	require.NoError(t, err)
	require.True(t, o.leader)
	require.NotNil(t, o.result)
	o, err = p2.runOnce(ctx)
	require.NoError(t, err)
	require.False(t, o.leader, "one process polls at a time")
	o, err = p1.runOnce(ctx)
	require.NoError(t, err)
	require.True(t, o.leader, "the leader renews its lease")
	ttl, err := redis.Int64(b.conn.Do("PTTL", defaultLeaseKey))
	require.NoError(t, err)
	require.InDelta(t, 2*time.Minute.Milliseconds(), ttl, 5000)

	// A stopped leader releases the lease (Stop without Start is fine).
	require.NoError(t, p1.Stop(ctx))
	require.NoError(t, p1.Start(ctx))
	require.ErrorIs(t, p1.Start(ctx), errPollerRunning)
	require.NoError(t, p1.Stop(ctx))
	n, err := redis.Int(b.conn.Do("EXISTS", defaultLeaseKey))
	require.NoError(t, err)
	require.Equal(t, 0, n)
	o, err = p2.runOnce(ctx)
	require.NoError(t, err)
	require.True(t, o.leader, "another process takes over")

	// A leader that died is replaced once its lease expires.
	_, err = b.conn.Do("PEXPIRE", defaultLeaseKey, 1)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		o, err := p1.runOnce(ctx)
		return err == nil && o.leader
	}, 5*time.Second, 5*time.Millisecond)
}

func TestPollerLoopReconciles(t *testing.T) {
	t.Parallel()
	urls := pgtest.Backends[1].URLs(t)
	b := setup(t, bundleOpts{urls: urls[:]})
	job := newJob(t, "DurableJob")
	b.insert(t, job, ptr(testNow))
	b.clk.Advance(6 * time.Minute)
	killed := make(chan string, 1)
	r := b.reconciler(t, func(_ context.Context, j *wire.Job) { killed <- j.JID() })
	p, err := newPoller(&PollerConfig{Reconciler: r, Pool: b.pool, Interval: 20 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, p.Start(context.Background()))
	select {
	case jid := <-killed:
		require.Equal(t, job.JID(), jid)
	case <-time.After(time.Minute): // a hung poller, not a slow one
		t.Fatal("the poller did not reconcile")
	}
	require.NoError(t, p.Stop(context.Background()))
}

// A pass that outlasts the lease's time to live keeps the lease: no second
// process reconciles while it runs.
func TestPollerKeepsLeaseDuringLongPass(t *testing.T) {
	t.Parallel()
	urls := pgtest.Backends[1].URLs(t)
	b := setup(t, bundleOpts{urls: urls[:]})
	ctx := context.Background()
	job := newJob(t, "DurableJob")
	b.insert(t, job, ptr(testNow))
	b.clk.Advance(6 * time.Minute)
	entered, release := make(chan struct{}), make(chan struct{})
	r := b.reconciler(t, func(context.Context, *wire.Job) {
		close(entered)
		<-release
	})
	const interval = 100 * time.Millisecond // lease time to live: 200 ms
	p1, err := newPoller(&PollerConfig{Reconciler: r, Pool: b.pool, Identity: "one", Interval: interval})
	require.NoError(t, err)
	p2, err := newPoller(&PollerConfig{Reconciler: b.reconciler(t, nil), Pool: b.pool, Identity: "two", Interval: interval})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := p1.runOnce(ctx)
		done <- err
	}()
	<-entered
	// Three lease lifetimes pass while the first pass runs.
	require.Never(t, func() bool {
		held, err := p2.acquire(ctx)
		return err == nil && held
	}, 6*interval, 10*time.Millisecond, "a second process took the lease during a running pass")
	close(release)
	require.NoError(t, <-done)
}

// A leader that finds its lease taken by another process stops its pass.
func TestPollerStopsPassWhenLeaseIsLost(t *testing.T) {
	t.Parallel()
	urls := pgtest.Backends[1].URLs(t)
	b := setup(t, bundleOpts{urls: urls[:]})
	ctx := context.Background()
	job := newJob(t, "DurableJob")
	b.insert(t, job, ptr(testNow))
	b.clk.Advance(6 * time.Minute)
	entered := make(chan struct{})
	r := b.reconciler(t, func(ctx context.Context, _ *wire.Job) {
		close(entered)
		<-ctx.Done()
	})
	p1, err := newPoller(&PollerConfig{Reconciler: r, Pool: b.pool, Identity: "one", Interval: 100 * time.Millisecond})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := p1.runOnce(ctx)
		done <- err
	}()
	<-entered
	_, err = b.conn.Do("SET", defaultLeaseKey, "two", "PX", 60_000)
	require.NoError(t, err)
	select {
	case err := <-done:
		require.ErrorIs(t, err, errLeaseLost)
	case <-time.After(10 * time.Second):
		t.Fatal("the pass went on after the lease was lost")
	}
}

// A pass stuck past MaxPass is cancelled, so the lease cannot be held
// forever by a process that makes no progress.
func TestPollerBoundsAStuckPass(t *testing.T) {
	t.Parallel()
	urls := pgtest.Backends[1].URLs(t)
	b := setup(t, bundleOpts{urls: urls[:]})
	ctx := context.Background()
	job := newJob(t, "DurableJob")
	b.insert(t, job, ptr(testNow))
	b.clk.Advance(6 * time.Minute)
	r := b.reconciler(t, func(ctx context.Context, _ *wire.Job) { <-ctx.Done() })
	p1, err := newPoller(&PollerConfig{Reconciler: r, Pool: b.pool, Identity: "one", Interval: time.Minute, MaxPass: 200 * time.Millisecond})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := p1.runOnce(ctx)
		done <- err
	}()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.DeadlineExceeded)
	case <-time.After(10 * time.Second):
		t.Fatal("a stuck pass was not cancelled")
	}
}
