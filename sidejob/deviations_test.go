package sidejob

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/sidejobwire"
)

// Fixes docs/sidejob.md#weakness-1-terminate-lost-under-the-job-lock: a terminate is not lost when the job is locked.
func TestTerminateWhileLockedIsNotLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	w := &hookWorker{}
	j := b.hook(t, w)
	require.NoError(t, j.Terminate(ctx, false))
	token, err := j.lock(ctx, time.Minute, nil)
	require.NoError(t, err)
	b.do(t, "DEL", "queue:testq") // Sidekiq took the item
	require.NoError(t, b.exec(t, j))
	require.Equal(t, "terminating", b.status(t, j))
	require.Equal(t, 1, b.scheduled(t), "rescheduled in 1 s (the gem schedules nothing)")
	_, err = j.unlock(ctx, token)
	require.NoError(t, err)
	require.NoError(t, b.exec(t, j))
	require.Equal(t, "terminated", b.status(t, j))
	require.Equal(t, []string{"shutdown"}, w.calls)
}

// Fixes docs/sidejob.md#weakness-2-orphan-job-after-a-failed-queue: a failed adoption leaves no orphan job.
func TestFailedAdoptionLeavesNoOrphan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	parent := b.queue(t, "TestWorker", nil)
	_, err := b.c.Queue(ctx, "testq", "TestWorker", &QueueOpts{Parent: parent})
	require.ErrorIs(t, err, errAdopt, "missing name")
	_, err = parent.Queue(ctx, "testq", "TestWorker", &QueueOpts{Name: "kid"})
	require.NoError(t, err)
	_, err = parent.Queue(ctx, "testq", "TestWorker", &QueueOpts{Name: "kid"})
	require.ErrorIs(t, err, errAdopt, "duplicate name")
	require.Equal(t, []string{"1", "2"}, b.set(t, "jobs"))
	require.Equal(t, "2", b.str(t, "jobs:last_id"))
	require.False(t, b.exists(t, "job:3:status"))
}

// Fixes docs/sidejob.md#weakness-3-job-stuck-in-running: a job left running by a dead process is queued again; one that a
// live process runs, or whose lock is held, is not.
func TestReaperRequeuesJobsLeftRunning(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	old := sidejobwire.Timestamp(time.Now().Add(-time.Hour))
	stuck := b.queue(t, "TestWorker", nil)
	busy := b.queue(t, "TestWorker", nil)
	locked := b.queue(t, "TestWorker", nil)
	fresh := b.queue(t, "TestWorker", nil)
	b.do(t, "DEL", "queue:testq")
	for _, j := range []*Job{stuck, busy, locked, fresh} {
		require.NoError(t, j.setStatus(ctx, "running"))
		b.do(t, "SET", j.key("ran_at"), old)
	}
	b.do(t, "SET", fresh.key("ran_at"), sidejobwire.Timestamp(time.Now()))
	_, err := locked.lock(ctx, time.Minute, nil)
	require.NoError(t, err)
	// a live Ruby 6.4 process runs busy; a dead one (no heartbeat key) ran stuck
	b.do(t, "SADD", "processes", "host:1:aaa", "gone:2:bbb")
	b.do(t, "HSET", "host:1:aaa", "busy", "1")
	b.do(t, "HSET", "host:1:aaa:workers", "tid1", `{"queue":"testq","payload":"{\"retry\":false,\"queue\":\"testq\",\"jid\":2,\"class\":\"TestWorker\",\"args\":[]}","run_at":1}`)
	b.do(t, "HSET", "gone:2:bbb:workers", "tid2", `{"queue":"testq","payload":"{\"jid\":1,\"class\":\"TestWorker\"}","run_at":1}`)
	res, err := b.c.reap(ctx, nil)
	require.NoError(t, err)
	require.Equal(t, 4, res.Running)
	require.Equal(t, []int64{stuck.id}, res.Requeued)
	require.Equal(t, "queued", b.status(t, stuck))
	require.Equal(t, 1, b.enqueued(t))
	for _, j := range []*Job{busy, locked, fresh} {
		require.Equal(t, "running", b.status(t, j))
	}
	require.NoError(t, b.exec(t, stuck))
	require.Equal(t, "completed", b.status(t, stuck))
}

// Fixes docs/sidejob.md#weakness-4-failure-drops-a-requested-re-run: a failure does not drop a re-run requested during perform.
func TestFailureKeepsARequestedRerun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := &hookWorker{perform: func(ctx context.Context, j *Job) error {
		_, err := j.Run(ctx, nil)
		require.NoError(t, err)
		return errors.New("boom")
	}}
	j := b.hook(t, w)
	b.do(t, "DEL", "queue:testq")
	require.Error(t, b.exec(t, j))
	require.Equal(t, "queued", b.status(t, j), "the gem would write failed")
	require.Equal(t, 1, b.enqueued(t), "the re-run is queued")
	// a startup failure (before running) still fails the job
	w2 := &hookWorker{startup: func() error { return errors.New("no start") }}
	j2 := b.hook(t, w2)
	require.Error(t, b.exec(t, j2))
	require.Equal(t, "failed", b.status(t, j2))
	require.False(t, b.exists(t, j2.key("ran_at")))
}

// Fixes docs/sidejob.md#weakness-5-status-changes-are-not-atomic: conditional status changes are atomic: of many concurrent
// "running → completed" transitions exactly one happens and publishes.
func TestStatusChangesAreAtomic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	j := b.queue(t, "TestWorker", nil)
	require.NoError(t, j.setStatus(ctx, "running"))
	sub := b.subscribe(t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	changed := 0
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := j.setStatusIf(ctx, statusCompleted, "in", statusRunning)
			require.NoError(t, err)
			if ok {
				mu.Lock()
				changed++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Equal(t, 1, changed)
	n := 0
	for _, m := range sub.stop(t, b) {
		if strings.Contains(m.Data, "completed") {
			n++
		}
	}
	require.Equal(t, 1, n)
}

// Fixes docs/sidejob.md#weakness-5-status-changes-are-not-atomic: a terminate requested after the middleware re-read "queued" (here
// during startup) is not overwritten by "running": the job is not performed
// and, as the lock is held, it is terminated right away.
func TestTerminateDuringStartupIsNotLost(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := &hookWorker{}
	j := b.hook(t, w)
	w.startup = func() error { return j.Terminate(context.Background(), false) }
	require.NoError(t, b.exec(t, j))
	require.Equal(t, []string{"startup", "shutdown"}, w.calls, "no perform")
	require.Equal(t, statusTerminated, b.status(t, j))
}
