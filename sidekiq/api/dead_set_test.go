package api_test

import (
	"context"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/api"
	"github.com/gojob/gojob/sidekiq/wire"
)

func TestDeadSetKillCallsHandlers(t *testing.T) {
	t.Parallel()
	pool := redistest.Start(t).Pool(t)
	var calls []string
	var gotErr error
	a, err := api.New(&api.Config{Pool: pool, DeadMaxJobs: 5, DeadTimeout: time.Minute,
		DeathHandlers: []sidekiq.DeathHandler{
			func(ctx context.Context, job *wire.Job, err error) {
				calls = append(calls, "1:"+job.JID())
				gotErr = err
			},
			func(ctx context.Context, job *wire.Job, err error) { calls = append(calls, "2:"+job.JID()) },
		}})
	require.NoError(t, err)
	ctx := context.Background()
	payload := []byte(`{"class":"X","args":[],"jid":"abc"}`)
	require.NoError(t, a.DeadSet().Kill(ctx, payload, nil))
	require.Equal(t, []string{"1:abc", "2:abc"}, calls)
	require.ErrorIs(t, gotErr, api.ErrKilledByAPI)
	require.Equal(t, "sidekiq: job killed by API", gotErr.Error())

	require.NoError(t, a.DeadSet().Kill(ctx, []byte(`{"jid":"quiet"}`), &api.KillOpts{SkipDeathHandlers: true}))
	require.NoError(t, a.DeadSet().Kill(ctx, []byte(`garbage`), nil))
	require.Len(t, calls, 2)
	require.ErrorContains(t, a.RetrySet().Kill(ctx, payload, nil), "dead set, not retry")

	conn := pool.Get()
	defer conn.Close()
	members, err := redis.Strings(conn.Do("ZRANGE", contract.KeyDead, 0, -1))
	require.NoError(t, err)
	require.ElementsMatch(t, []string{string(payload), `{"jid":"quiet"}`, "garbage"}, members)
}

// contract.KillDrops predicts, and KillAll and SortedEntry.Kill report, the dead-set
// entries the cap drops: with DeadMaxJobs 5 the trim keeps 4.
func TestKillReportsWhatTheDeadSetCapDropped(t *testing.T) {
	t.Parallel()
	r := redistest.Start(t)
	pool := r.Pool(t)
	a, err := api.New(&api.Config{Pool: pool, DeadMaxJobs: 5})
	require.NoError(t, err)
	ctx := context.Background()
	conn := pool.Get()
	defer conn.Close()
	now := time.Now().Unix()
	for i := range 3 {
		_, err := conn.Do("ZADD", "dead", now-100+int64(i), `{"class":"X","args":[],"jid":"old`+string(rune('a'+i))+`"}`)
		require.NoError(t, err)
	}
	for i := range 6 {
		_, err := conn.Do("ZADD", "schedule", now+100+int64(i), `{"class":"X","args":[],"jid":"s`+string(rune('a'+i))+`"}`)
		require.NoError(t, err)
	}
	lim := a.DeadLimits()
	require.Equal(t, int64(0), must(contract.KillDrops(ctx, conn, time.Now(), lim, 1)), "3 dead + 1 fits in 4")
	require.Equal(t, int64(5), must(contract.KillDrops(ctx, conn, time.Now(), lim, 6)), "3 + 6 = 9, the trim keeps 4")

	entries, _, err := a.ScheduledSet().Page(ctx, nil, 0, 1)
	require.NoError(t, err)
	dropped, err := entries[0].Kill(ctx, nil)
	require.NoError(t, err)
	require.Equal(t, int64(0), dropped)

	res, err := a.ScheduledSet().KillAll(ctx, nil)
	require.NoError(t, err)
	require.Equal(t, 5, res.Moved)
	require.Equal(t, int64(5), res.Dropped, "4 dead + 5 killed, 4 kept")
	n, err := redis.Int(conn.Do("ZCARD", "dead"))
	require.NoError(t, err)
	require.Equal(t, 4, n)
	require.Equal(t, contract.DeadMaxJobs, must(api.New(&api.Config{Pool: pool})).DeadLimits().MaxJobs)
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
