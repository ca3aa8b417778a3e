package sidekiq_test

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/clocktest"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

var fixedNow = time.Unix(1795296573, 165170700)

func newClient(t *testing.T, v wire.Version, mw ...sidekiq.Middleware) (*sidekiq.Client, *redis.Pool, *clocktest.Fake) {
	t.Helper()
	srv := redistest.Start(t)
	pool := srv.Pool(t)
	clk := clocktest.NewFake(fixedNow)
	c, err := sidekiq.NewClient(&sidekiq.ClientConfig{Pool: pool, Version: v, Clock: clk, Middleware: mw})
	require.NoError(t, err)
	return c, pool, clk
}

func TestPushImmediate(t *testing.T) {
	t.Parallel()
	c, pool, _ := newClient(t, wire.Version6)
	job, err := wire.NewJob("HardJob", 1, "two", map[string]any{"three": 3.5})
	require.NoError(t, err)
	res, err := c.Push(context.Background(), job, nil)
	require.NoError(t, err)
	require.Regexp(t, regexp.MustCompile(`^[0-9a-f]{24}$`), res.JID)
	conn := pool.Get()
	defer conn.Close()
	got, err := redis.String(conn.Do("LINDEX", "queue:default", 0))
	require.NoError(t, err)
	require.Equal(t, `{"retry":true,"queue":"default","class":"HardJob","args":[1,"two",{"three":3.5}],"jid":"`+res.JID+`","created_at":1795296573.1651707,"enqueued_at":1795296573.1651707}`, got)
	members, err := redis.Strings(conn.Do("SMEMBERS", "queues"))
	require.NoError(t, err)
	require.Equal(t, []string{"default"}, members)
}

func TestPushScheduledV8(t *testing.T) {
	t.Parallel()
	c, pool, _ := newClient(t, wire.Version8)
	job, _ := wire.NewJob("Later", "x")
	job.SetQueue("low")
	res, err := c.Push(context.Background(), job, &sidekiq.PushOpts{In: time.Hour})
	require.NoError(t, err)
	require.True(t, res.Scheduled)
	conn := pool.Get()
	defer conn.Close()
	vals, err := redis.Strings(conn.Do("ZRANGE", "schedule", 0, -1, "WITHSCORES"))
	require.NoError(t, err)
	require.Equal(t, `{"retry":true,"queue":"low","class":"Later","args":["x"],"jid":"`+res.JID+`","created_at":1795296573165}`, vals[0])
	require.Equal(t, "1795300173.1651707", vals[1])
	n, _ := redis.Int(conn.Do("SCARD", "queues"))
	require.Zero(t, n)
}

func TestPushBulkAndMiddleware(t *testing.T) {
	t.Parallel()
	c, pool, _ := newClient(t, wire.Version7, func(ctx context.Context, job *wire.Job, next func(context.Context) error) error {
		if a := job.Args(); len(a) > 0 {
			if n, _ := a[0].Int(); n%2 == 1 {
				return nil // stop odd ones
			}
		}
		return next(ctx)
	})
	var jobs []*wire.Job
	for i := 0; i < 2500; i++ {
		j, _ := wire.NewJob("Bulk", i)
		jobs = append(jobs, j)
	}
	jids, err := c.PushBulk(context.Background(), jobs, nil)
	require.NoError(t, err)
	require.Len(t, jids, 2500)
	require.Empty(t, jids[1])
	require.NotEmpty(t, jids[2])
	conn := pool.Get()
	defer conn.Close()
	n, _ := redis.Int(conn.Do("LLEN", "queue:default"))
	require.Equal(t, 1250, n)
}

// A bulk push without opts.At or In schedules each job by its own numeric
// "at" when it is in the future, as Push does, and pushes the others now;
// the stored payloads carry no "at", and middleware sees each job's own.
func TestPushBulkPerJobAt(t *testing.T) {
	t.Parallel()
	var seen []string
	c, pool, _ := newClient(t, wire.Version7, func(ctx context.Context, job *wire.Job, next func(context.Context) error) error {
		at := ""
		if v, ok := job.Get("at"); ok {
			at = string(v.Encode())
		}
		seen = append(seen, at)
		return next(ctx)
	})
	now := float64(fixedNow.UnixNano()) / 1e9
	var jobs []*wire.Job
	for i, at := range []float64{0, now + 60, now - 60, now + 3600} {
		j, err := wire.NewJob("Each", i)
		require.NoError(t, err)
		if at != 0 {
			j.Set("at", rubyjson.FloatValue(at))
		}
		jobs = append(jobs, j)
	}
	jids, err := c.PushBulk(context.Background(), jobs, nil)
	require.NoError(t, err)
	for _, jid := range jids {
		require.NotEmpty(t, jid)
	}
	require.Equal(t, []string{"", "1795296633.1651707", "", "1795300173.1651707"}, seen)
	conn := pool.Get()
	defer conn.Close()
	queued, err := redis.Strings(conn.Do("LRANGE", "queue:default", 0, -1))
	require.NoError(t, err)
	require.Len(t, queued, 2)
	sched, err := redis.Values(conn.Do("ZRANGE", "schedule", 0, -1, "WITHSCORES"))
	require.NoError(t, err)
	require.Len(t, sched, 4)
	require.Contains(t, string(sched[0].([]byte)), `"args":[1]`)
	require.Equal(t, "1795296633.1651707", string(sched[1].([]byte)))
	require.Contains(t, string(sched[2].([]byte)), `"args":[3]`)
	for _, v := range append(queued, string(sched[0].([]byte)), string(sched[2].([]byte))) {
		require.NotContains(t, v, `"at"`)
	}
	// opts.In wins over a job's own "at".
	j, _ := wire.NewJob("Both")
	j.Set("at", rubyjson.FloatValue(now+60))
	_, err = c.PushBulk(context.Background(), []*wire.Job{j}, &sidekiq.PushOpts{In: 2 * time.Hour})
	require.NoError(t, err)
	n, err := redis.Int(conn.Do("ZCOUNT", "schedule", now+7199, now+7201))
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

func TestMiddlewareSeesAt(t *testing.T) {
	t.Parallel()
	var seen []string
	c, pool, _ := newClient(t, wire.Version6, func(ctx context.Context, job *wire.Job, next func(context.Context) error) error {
		at := ""
		if v, ok := job.Get("at"); ok {
			at = string(v.Encode())
		}
		seen = append(seen, at)
		return next(ctx)
	})
	job, _ := wire.NewJob("Later")
	_, err := c.Push(context.Background(), job, &sidekiq.PushOpts{In: time.Minute})
	require.NoError(t, err)
	// Ruby's Client.push("at" => ...) form.
	job2, _ := wire.NewJob("Later2")
	job2.Set("at", rubyjson.FloatValue(1795296573.1651707+120))
	res, err := c.Push(context.Background(), job2, nil)
	require.NoError(t, err)
	require.True(t, res.Scheduled)
	now, _ := wire.NewJob("Now")
	_, err = c.Push(context.Background(), now, nil)
	require.NoError(t, err)
	require.Equal(t, []string{"1795296633.1651707", "1795296693.1651707", ""}, seen)
	conn := pool.Get()
	defer conn.Close()
	vals, err := redis.Strings(conn.Do("ZRANGE", "schedule", 0, -1))
	require.NoError(t, err)
	require.Len(t, vals, 2)
	for _, v := range vals {
		require.NotContains(t, v, `"at"`)
	}
}

// A write Redis refuses (READONLY on a replica after a failover, LOADING
// while a restarted Redis reads its data, OOM) is the push's error: the
// caller must not take a job Redis refused for an enqueued one.
func TestPushFailsWhenRedisRefusesTheWrite(t *testing.T) {
	t.Parallel()
	// A replica of a master that is not there: every write is refused
	// with READONLY.
	srv := redistest.StartWith(t, redistest.Options{Args: []string{"--replicaof", "127.0.0.1", "1"}})
	c, err := sidekiq.NewClient(&sidekiq.ClientConfig{Pool: srv.Pool(t), Version: wire.Version7})
	require.NoError(t, err)
	ctx := context.Background()
	job, err := wire.NewJob("HardJob", 1)
	require.NoError(t, err)
	_, err = c.Push(ctx, job, nil)
	require.ErrorContains(t, err, "READONLY")
	_, err = c.Push(ctx, job, &sidekiq.PushOpts{In: time.Hour})
	require.ErrorContains(t, err, "READONLY")
	jobs := make([]*wire.Job, 3)
	for i := range jobs {
		jobs[i], err = wire.NewJob("HardJob", i)
		require.NoError(t, err)
	}
	_, err = c.PushBulk(ctx, jobs, nil)
	require.ErrorContains(t, err, "READONLY")
}
