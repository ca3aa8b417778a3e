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
