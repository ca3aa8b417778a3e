package expiry_test

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/expiry"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

type fixed struct{ t time.Time }

func (f fixed) Now() time.Time { return f.t }

// TestPushSetsExpiresAt: ExpiresIn and a payload's expires_in become
// expires_at, counted from the time the job is due.
func TestPushSetsExpiresAt(t *testing.T) {
	rs := redistest.Start(t)
	now := time.Unix(1700000000, 0)
	c, err := sidekiq.NewClient(&sidekiq.ClientConfig{Pool: rs.Pool(t), Clock: fixed{now}, Version: wire.Version6})
	require.NoError(t, err)
	ctx := context.Background()
	expiresAt := func(payload []byte) (float64, bool) {
		j, err := wire.ParseJob(payload)
		require.NoError(t, err)
		require.False(t, j.Has("expires_in"))
		v, ok := j.Get("expires_at")
		f, _ := v.Float()
		return f, ok
	}

	j, _ := wire.NewJob("A", 1)
	res, err := c.Push(ctx, j, &sidekiq.PushOpts{ExpiresIn: time.Hour})
	require.NoError(t, err)
	at, ok := expiresAt(res.Payload)
	require.True(t, ok)
	require.Equal(t, 1700003600.0, at)
	require.Contains(t, string(res.Payload), `"expires_at":1700003600.0,"enqueued_at"`)

	j, _ = wire.NewJob("A", 1)
	res, err = c.Push(ctx, j, &sidekiq.PushOpts{In: 2 * time.Hour, ExpiresIn: time.Hour})
	require.NoError(t, err)
	at, _ = expiresAt(res.Payload)
	require.Equal(t, 1700010800.0, at, "a scheduled job expires after its run time")

	j, _ = wire.NewJob("A", 1)
	j.Set("expires_in", rubyjson.IntValue(60))
	res, err = c.Push(ctx, j, nil)
	require.NoError(t, err)
	at, _ = expiresAt(res.Payload)
	require.Equal(t, 1700000060.0, at)

	jobs := []*wire.Job{}
	for range 3 {
		j, _ := wire.NewJob("B", 1)
		jobs = append(jobs, j)
	}
	_, err = c.PushBulk(ctx, jobs, &sidekiq.PushOpts{ExpiresIn: time.Minute})
	require.NoError(t, err)
	for _, j := range jobs {
		f, _ := j.Get("expires_at")
		x, _ := f.Float()
		require.Equal(t, 1700000060.0, x)
	}

	j, _ = wire.NewJob("A", 1)
	res, err = c.Push(ctx, j, nil)
	require.NoError(t, err)
	_, ok = expiresAt(res.Payload)
	require.False(t, ok, "no expiry unless asked")
}

// TestExpiredJobsDoNotRun: a Pro client's payload whose expires_at has
// passed is acknowledged without running, counted, and logged once per
// class; a job not yet expired and one without expires_at run.
func TestExpiredJobsDoNotRun(t *testing.T) {
	rs := redistest.Start(t)
	pool := rs.Pool(t)
	var logs bytes.Buffer
	var logMu sync.Mutex
	logger := zerolog.New(zerolog.SyncWriter(writerFunc(func(p []byte) (int, error) {
		logMu.Lock()
		defer logMu.Unlock()
		return logs.Write(p)
	})))
	ext := expiry.New(expiry.Config{Logger: logger})
	srv, err := sidekiq.NewServer(&sidekiq.ServerConfig{Pool: pool, Concurrency: 2, Queues: []wire.QueueWeight{{Name: "default"}},
		DisablePoller: true, Logger: zerolog.Nop(), Extensions: []sidekiq.Extension{ext}})
	require.NoError(t, err)
	var mu sync.Mutex
	ran := map[string]bool{}
	srv.Handle("Digest", sidekiq.HandlerFunc(func(ctx context.Context, job *wire.Job) error {
		mu.Lock()
		defer mu.Unlock()
		ran[job.JID()] = true
		return nil
	}), nil)
	ctx := context.Background()
	conn := pool.Get()
	defer conn.Close()
	past := float64(time.Now().Add(-time.Minute).Unix())
	for _, jid := range []string{"expired1", "expired2"} {
		// The payload a Sidekiq Pro client writes with set(expires_in: 60).
		payload := `{"retry":true,"queue":"default","class":"Digest","args":[1],"jid":"` + jid + `","created_at":` +
			string(rubyjson.FloatValue(past-60).Encode()) + `,"expires_at":` + string(rubyjson.FloatValue(past).Encode()) + `,"enqueued_at":` + string(rubyjson.FloatValue(past-60).Encode()) + `}`
		_, err := conn.Do("LPUSH", "queue:default", payload)
		require.NoError(t, err)
	}
	fresh, _ := wire.NewJob("Digest", 2)
	r1, err := srv.Client().Push(ctx, fresh, &sidekiq.PushOpts{ExpiresIn: time.Hour})
	require.NoError(t, err)
	plain, _ := wire.NewJob("Digest", 3)
	r2, err := srv.Client().Push(ctx, plain, nil)
	require.NoError(t, err)

	require.NoError(t, srv.Start(ctx))
	defer srv.Stop(ctx)
	wait.For(t, "four jobs processed", func() bool {
		n, _ := redis.Int(conn.Do("GET", "stat:processed"))
		return n == 4
	})
	mu.Lock()
	require.Equal(t, map[string]bool{r1.JID: true, r2.JID: true}, ran)
	mu.Unlock()
	require.Equal(t, map[string]int64{"Digest": 2}, ext.ExpiredByClass())
	n, err := redis.Int(conn.Do("LLEN", "queue:default"))
	require.NoError(t, err)
	require.Zero(t, n)
	for _, k := range []string{"retry", "dead"} {
		n, err := redis.Int(conn.Do("ZCARD", k))
		require.NoError(t, err)
		require.Zero(t, n, k)
	}
	logMu.Lock()
	defer logMu.Unlock()
	require.Equal(t, 1, strings.Count(logs.String(), "expired job skipped"), logs.String())
	require.Contains(t, logs.String(), `"class":"Digest"`)
}

type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestRunHookReadsSecondsAndMilliseconds: expires_at in epoch seconds (as
// Pro writes it) or milliseconds (Sidekiq 8's unit) is compared with now;
// a job exactly at its expiry still runs, as in Pro (expires_at >= now).
func TestRunHookReadsSecondsAndMilliseconds(t *testing.T) {
	now := time.Unix(1700000000, 0)
	ext := expiry.New(expiry.Config{Logger: zerolog.Nop(), Clock: fixed{now}})
	for _, c := range []struct {
		at  string
		ran bool
	}{
		{`1700000000.0`, true},
		{`1700000000`, true},
		{`1699999999.999`, false},
		{`1700000001000`, true},
		{`1699999999000`, false},
		{`"soon"`, true},
	} {
		job, err := wire.ParseJob([]byte(`{"class":"A","args":[],"jid":"j","expires_at":` + c.at + `}`))
		require.NoError(t, err)
		ran := false
		require.NoError(t, ext.Run(context.Background(), &sidekiq.Run{Job: job}, func(context.Context) error { ran = true; return nil }))
		require.Equal(t, c.ran, ran, c.at)
	}
	require.Equal(t, map[string]int64{"A": 2}, ext.ExpiredByClass())
}

// TestPushPayloadSetsExpiresAt: a payload's expires_in becomes expires_at
// on the path the poller and the cron scheduler push through too.
func TestPushPayloadSetsExpiresAt(t *testing.T) {
	rs := redistest.Start(t)
	c, err := sidekiq.NewClient(&sidekiq.ClientConfig{Pool: rs.Pool(t), Clock: fixed{time.Unix(1700000000, 0)}, Version: wire.Version6})
	require.NoError(t, err)
	j, _ := wire.NewJob("Tick", 1)
	j.Set("expires_in", rubyjson.FloatValue(90.5))
	_, payload, ok, err := c.PushPayload(context.Background(), j)
	require.NoError(t, err)
	require.True(t, ok)
	require.Contains(t, string(payload), `"expires_at":1700000090.5,"enqueued_at":`)
	require.NotContains(t, string(payload), "expires_in")
}
