package durable

import (
	"context"
	"testing"
	"time"

	"github.com/gojob/gojob/sidekiq/wire"
	"github.com/stretchr/testify/require"
)

// A pass that outlasts the lease's time to live keeps the lease: no second
// process reconciles while it runs.
func TestPollerKeepsLeaseDuringLongPass(t *testing.T) {
	t.Parallel()
	urls := backends[1].urls(t)
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
	p1, err := NewPoller(&PollerConfig{Reconciler: r, Pool: b.pool, Identity: "one", Interval: interval})
	require.NoError(t, err)
	p2, err := NewPoller(&PollerConfig{Reconciler: b.reconciler(t, nil), Pool: b.pool, Identity: "two", Interval: interval})
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
	urls := backends[1].urls(t)
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
	p1, err := NewPoller(&PollerConfig{Reconciler: r, Pool: b.pool, Identity: "one", Interval: 100 * time.Millisecond})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := p1.runOnce(ctx)
		done <- err
	}()
	<-entered
	_, err = b.conn.Do("SET", DefaultLeaseKey, "two", "PX", 60_000)
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
	urls := backends[1].urls(t)
	b := setup(t, bundleOpts{urls: urls[:]})
	ctx := context.Background()
	job := newJob(t, "DurableJob")
	b.insert(t, job, ptr(testNow))
	b.clk.Advance(6 * time.Minute)
	r := b.reconciler(t, func(ctx context.Context, _ *wire.Job) { <-ctx.Done() })
	p1, err := NewPoller(&PollerConfig{Reconciler: r, Pool: b.pool, Identity: "one", Interval: time.Minute, MaxPass: 200 * time.Millisecond})
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
