package sidejob

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/sidejobwire"
	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"
)

// sidejob_spec.rb and job_spec.rb
func TestQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	_, err := b.c.Queue(ctx, "nope", "TestWorker", nil)
	require.ErrorIs(t, err, errNotRegistered)
	_, err = b.c.Queue(ctx, "testq", "Nope", nil)
	require.ErrorIs(t, err, errNotRegistered)
	j := b.queue(t, "TestWorker", &QueueOpts{Args: []any{1, 2}})
	require.Equal(t, int64(1), j.ID())
	require.Equal(t, "queued", b.status(t, j))
	require.Equal(t, 1, b.enqueued(t))
	j2 := b.queue(t, "TestWorker", &QueueOpts{At: time.Now().Add(time.Minute)})
	require.Equal(t, int64(2), j2.ID())
	require.Equal(t, 1, b.scheduled(t))
	info, err := j.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, "[1,2]", string(info.Args.Encode()))
	require.Equal(t, "", info.RanAt)
	require.Equal(t, "queued", info.Status)
	require.Equal(t, []string{}, info.Aliases)
	_, err = sidejobwire.ParseTimestamp(info.CreatedAt)
	require.NoError(t, err)
	j3 := b.queue(t, "TestSum", &QueueOpts{Inports: `{"in":{"default":3}}`, By: "me"})
	require.Equal(t, "3", b.read(t, b.input(t, j3, "in")))
	require.Equal(t, "me", b.str(t, "job:3:created_by"))
	found, err := b.c.Find(ctx, "3")
	require.NoError(t, err)
	require.True(t, found.equal(j3))
	require.Len(t, sidejobwire.Timestamp(time.Now()), len("2026-01-01T00:00:00.000000000Z"))
	require.Equal(t, "2026-01-02T03:04:05.100000000Z", sidejobwire.Timestamp(time.Date(2026, 1, 2, 3, 4, 5, 1e8, time.UTC)))
}

func TestStatusPublish(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	j := b.queue(t, "TestWorker", nil)
	sub := b.subscribe(t)
	require.NoError(t, j.setStatus(ctx, "newstatus"))
	require.NoError(t, j.setStatus(ctx, "newstatus"))
	require.Equal(t, []string{`/sidejob/job/1  {"status":"newstatus"}`}, normalize(sub.stop(t, b)))
}

func TestAliases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	j := b.queue(t, "TestWorker", nil)
	other := b.queue(t, "TestWorker", nil)
	info, err := j.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{}, info.Aliases)
	require.NoError(t, j.AddAlias(ctx, "a1"))
	require.NoError(t, j.AddAlias(ctx, "a1"))
	require.NoError(t, j.AddAlias(ctx, "b2"))
	require.Equal(t, []string{"a1", "b2"}, b.set(t, "job:1:aliases"))
	require.Equal(t, map[string]string{"a1": "1", "b2": "1"}, b.hash(t, "jobs:aliases"))
	for _, bad := range []string{"1234", "!", ""} {
		require.ErrorIs(t, j.AddAlias(ctx, bad), errAlias)
	}
	require.ErrorIs(t, other.AddAlias(ctx, "a1"), errAlias)
	require.NoError(t, j.removeAlias(ctx, "b2"))
	require.ErrorIs(t, j.removeAlias(ctx, "b2"), errAlias)
	f, err := b.c.Find(ctx, "a1")
	require.NoError(t, err)
	require.True(t, f.equal(j))
}

func TestRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	j := b.queue(t, "TestWorker", nil)
	for _, st := range []string{"queued", "running", "suspended", "completed"} {
		b.do(t, "DEL", "queue:testq")
		require.NoError(t, j.setStatus(ctx, st))
		got, err := j.Run(ctx, nil)
		require.NoError(t, err)
		require.True(t, got.equal(j))
		require.Equal(t, "queued", b.status(t, j))
		require.Equal(t, 1, b.enqueued(t), st)
	}
	_, err := j.Run(ctx, nil)
	require.NoError(t, err)
	require.Equal(t, 1, b.enqueued(t), "already queued: no second push")
	for _, st := range []string{"failed", "terminating", "terminated"} {
		b.do(t, "DEL", "queue:testq")
		require.NoError(t, j.setStatus(ctx, st))
		got, err := j.Run(ctx, nil)
		require.NoError(t, err)
		require.Nil(t, got)
		require.Equal(t, 0, b.enqueued(t))
		got, err = j.Run(ctx, &RunOpts{Force: true})
		require.NoError(t, err)
		require.NotNil(t, got)
		require.Equal(t, 1, b.enqueued(t), st)
	}
	got, err := j.Run(ctx, &RunOpts{Parent: true})
	require.NoError(t, err)
	require.Nil(t, got, "no parent")
	at := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	b.do(t, "DEL", "queue:testq")
	_, err = j.Run(ctx, &RunOpts{At: at})
	require.NoError(t, err)
	sched, err := redis.Strings(b.do(t, "ZRANGE", "schedule", 0, -1, "WITHSCORES"), nil)
	require.NoError(t, err)
	score, err := strconv.ParseFloat(sched[1], 64)
	require.NoError(t, err)
	want, _ := strconv.ParseFloat(contract.Score(at), 64)
	require.Equal(t, want, score, "exactly that time")
	_, err = j.Run(ctx, &RunOpts{Wait: time.Minute})
	require.NoError(t, err)
	require.Equal(t, 2, b.scheduled(t))
	// unregistered class → terminated and an error
	b.do(t, "HDEL", "workers:testq", "TestWorker")
	_, err = j.Run(ctx, &RunOpts{Force: true})
	require.ErrorIs(t, err, errNotRegistered)
	require.Equal(t, "terminated", b.status(t, j))
	b.registerAll(t)
	// deleted job
	ok, err := j.Delete(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	_, err = j.Run(ctx, nil)
	require.ErrorIs(t, err, ErrJobNotFound)
}

func TestFamilyAndDelete(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	p := b.queue(t, "TestWorker", nil)
	c1, err := p.Queue(ctx, "testq", "TestSum", &QueueOpts{Name: "c1"})
	require.NoError(t, err)
	require.Equal(t, "job:1", b.str(t, "job:2:created_by"))
	gc, err := c1.Queue(ctx, "testq", "TestWorker", &QueueOpts{Name: "g"})
	require.NoError(t, err)
	require.NoError(t, gc.AddAlias(ctx, "grand"))
	b.write(t, b.input(t, c1, "in"), 1)
	ch, err := p.child(ctx, "c1")
	require.NoError(t, err)
	require.True(t, ch.equal(c1))
	par, err := c1.Parent(ctx)
	require.NoError(t, err)
	require.True(t, par.equal(p))
	require.ErrorIs(t, p.adopt(ctx, p, "self"), errAdopt)
	require.ErrorIs(t, p.adopt(ctx, gc, "x"), errAdopt, "already has a parent")
	orphan := b.queue(t, "TestWorker", nil)
	require.ErrorIs(t, p.adopt(ctx, orphan, ""), errAdopt)
	require.ErrorIs(t, p.adopt(ctx, orphan, "c1"), errAdopt)
	require.NoError(t, p.adopt(ctx, orphan, "o"))
	require.NoError(t, p.disownNamed(ctx, "o"))
	require.ErrorIs(t, p.disownNamed(ctx, "o"), errNotChild)
	require.NoError(t, p.adopt(ctx, orphan, "o"))
	require.NoError(t, p.disownJob(ctx, orphan))

	ok, err := p.Delete(ctx)
	require.NoError(t, err)
	require.False(t, ok, "not terminated")
	require.NoError(t, p.Terminate(ctx, false))
	require.Equal(t, "queued", b.status(t, c1), "children untouched unless recursive")
	require.NoError(t, p.Terminate(ctx, true))
	for _, j := range []*Job{p, c1, gc} {
		require.Equal(t, "terminating", b.status(t, j))
		require.NoError(t, j.setStatus(ctx, "terminated"))
	}
	term, err := p.terminated(ctx)
	require.NoError(t, err)
	require.True(t, term)
	sub := b.subscribe(t)
	ok, err = c1.Delete(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, []string{`/sidejob/job/3  {"deleted":true}`, `/sidejob/job/2  {"deleted":true}`}, normalize(sub.stop(t, b)))
	keys := func(pattern string) []string {
		ks, err := redis.Strings(b.do(t, "KEYS", pattern), nil)
		require.NoError(t, err)
		return ks
	}
	require.Empty(t, keys("job:2:*"))
	require.Empty(t, keys("job:3:*"))
	require.Empty(t, b.hash(t, "job:1:children"), "disowned")
	require.Empty(t, b.hash(t, "jobs:aliases"))
	require.Equal(t, []string{"1", "4"}, b.set(t, "jobs"))
}

func TestStateAndLocks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	j := b.queue(t, "TestWorker", nil)
	_, ok, err := j.get(ctx, "x")
	require.NoError(t, err)
	require.False(t, ok)
	require.NoError(t, j.Set(ctx, "x", map[string]any{"a": []any{1}}))
	require.NoError(t, j.Set(ctx, "y", 2))
	v, ok, err := j.get(ctx, "x")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, `{"a":[1]}`, string(v.Encode()))
	require.Equal(t, map[string]string{"x": `{"a":[1]}`, "y": "2"}, b.hash(t, "job:1:state"))
	require.NoError(t, j.unset(ctx, "x"))
	st, err := j.State(ctx)
	require.NoError(t, err)
	require.Equal(t, `{"y":2}`, string(st.Encode()))

	token, err := j.lock(ctx, 30*time.Second, nil)
	require.NoError(t, err)
	require.Regexp(t, `^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`, token)
	require.Equal(t, token, b.str(t, "job:1:lock"))
	ttl, _ := b.do(t, "TTL", "job:1:lock").(int64)
	require.InDelta(t, 30, ttl, 1)
	again, err := j.lock(ctx, 30*time.Second, &lockOpts{Retries: 1})
	require.NoError(t, err)
	require.Empty(t, again)
	ok, err = j.refreshLock(ctx, 100*time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	ttl, _ = b.do(t, "TTL", "job:1:lock").(int64)
	require.InDelta(t, 100, ttl, 1)
	ok, err = j.unlock(ctx, "wrong")
	require.NoError(t, err)
	require.False(t, ok)
	ok, err = j.unlock(ctx, token)
	require.NoError(t, err)
	require.True(t, ok)

	ok, _ = j.Delete(ctx)
	require.False(t, ok)
	require.NoError(t, j.setStatus(ctx, "terminated"))
	ok, err = j.Delete(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	_, err = j.State(ctx)
	require.ErrorIs(t, err, ErrJobNotFound)
}

// Ruby's status= checks that the job exists (docs/sidejob.md#ruby-api: "nearly every method
// first checks that the job exists", and 4.0's status= went through set,
// which raised "Job N does not exist!"). SetStatus on a deleted job fails
// and does not recreate job:<id>:status or publish; the middleware's final
// status writes on a job deleted during perform leave it gone too.
func TestSetStatusOnADeletedJobFails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	j := b.queue(t, "TestWorker", nil)
	require.NoError(t, j.setStatus(ctx, statusTerminated))
	deleted, err := j.Delete(ctx)
	require.NoError(t, err)
	require.True(t, deleted)
	sub := b.subscribe(t)
	err = j.setStatus(ctx, statusQueued)
	require.ErrorIs(t, err, ErrJobNotFound)
	var nf *jobNotFoundError
	require.True(t, errors.As(err, &nf))
	require.Equal(t, j.ID(), nf.ID)
	require.False(t, b.exists(t, j.key("status")))
	require.Empty(t, sub.stop(t, b), "nothing published")

	// a job that deletes itself during perform and then fails: the gem's
	// failed write would raise; here nothing is written and the worker's
	// error is what comes back
	w := &hookWorker{perform: func(ctx context.Context, j *Job) error {
		require.NoError(t, j.setStatus(ctx, statusTerminated))
		ok, err := j.Delete(ctx)
		require.NoError(t, err)
		require.True(t, ok)
		return errors.New("boom")
	}}
	j2 := b.hook(t, w)
	err = b.exec(t, j2)
	require.EqualError(t, err, "boom")
	require.False(t, b.exists(t, j2.key("status")), "failed is not written to a deleted job")
	// and one that completes normally
	w3 := &hookWorker{perform: func(ctx context.Context, j *Job) error {
		require.NoError(t, j.setStatus(ctx, statusTerminated))
		_, err := j.Delete(ctx)
		return err
	}}
	j3 := b.hook(t, w3)
	require.NoError(t, b.exec(t, j3))
	require.False(t, b.exists(t, j3.key("status")))
}
