package api_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/clocktest"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/api"
	"github.com/gojob/gojob/sidekiq/wire"
)

// apiNow is the fake time of the API unit tests.
var apiNow = time.Unix(1795296573, 165170700)

// apiBundle is one API unit test's world: a private redis-server, an API
// with a fake clock and a record of the death handler calls.
type apiBundle struct {
	api    *api.API
	pool   *redis.Pool
	clk    *clocktest.Fake
	deaths []string
}

func apiSetup(t *testing.T, mutate ...func(*api.Config)) *apiBundle {
	t.Helper()
	srv := redistest.Start(t)
	b := &apiBundle{pool: srv.Pool(t), clk: clocktest.NewFake(apiNow)}
	cfg := &api.Config{
		Pool:    b.pool,
		Version: wire.Version6,
		Clock:   b.clk,
		DeathHandlers: []sidekiq.DeathHandler{func(ctx context.Context, job *wire.Job, err error) {
			b.deaths = append(b.deaths, job.JID()+": "+err.Error())
		}},
	}
	for _, m := range mutate {
		m(cfg)
	}
	a, err := api.New(cfg)
	require.NoError(t, err)
	b.api = a
	return b
}

func (b *apiBundle) do(t *testing.T, cmd string, args ...any) any {
	t.Helper()
	c := b.pool.Get()
	defer c.Close()
	v, err := c.Do(cmd, args...)
	require.NoError(t, err)
	return v
}

func (b *apiBundle) strings(t *testing.T, cmd string, args ...any) []string {
	t.Helper()
	v, err := redis.Strings(b.do(t, cmd, args...), nil)
	require.NoError(t, err)
	return v
}

func (b *apiBundle) int(t *testing.T, cmd string, args ...any) int64 {
	t.Helper()
	v, err := redis.Int64(b.do(t, cmd, args...), nil)
	require.NoError(t, err)
	return v
}

// apiPayload is a Ruby 6.4-shaped retry payload.
func apiPayload(jid string, extra string) string {
	return fmt.Sprintf(`{"retry":true,"queue":"default","class":"HardJob","args":[1,"é"],"jid":"%s","created_at":1795296000.5,"enqueued_at":1795296001.25%s}`, jid, extra)
}

func TestNewAPIValidates(t *testing.T) {
	t.Parallel()
	_, err := api.New(nil)
	require.ErrorContains(t, err, "sidekiq: nil Config")
	_, err = api.New(&api.Config{})
	require.ErrorContains(t, err, "Pool is required")
	_, err = api.New(&api.Config{Pool: &redis.Pool{}, DeadMaxJobs: -1})
	require.ErrorContains(t, err, "DeadMaxJobs")
	_, err = api.New(&api.Config{Pool: &redis.Pool{}, DeadTimeout: -time.Second})
	require.ErrorContains(t, err, "DeadTimeout")
	a, err := api.New(&api.Config{Pool: &redis.Pool{}})
	require.NoError(t, err)
	require.NotNil(t, a.Client())
	require.Equal(t, wire.Version6, a.Client().Version())
}

func TestAPIUsesGivenClient(t *testing.T) {
	t.Parallel()
	var seen []string
	b := apiSetup(t, func(c *api.Config) {
		cl, err := sidekiq.NewClient(&sidekiq.ClientConfig{Pool: c.Pool, Version: wire.Version8, Clock: c.Clock,
			Middleware: []sidekiq.Middleware{func(ctx context.Context, job *wire.Job, next func(context.Context) error) error {
				seen = append(seen, job.JID())
				return next(ctx)
			}}})
		require.NoError(t, err)
		c.Client = cl
	})
	b.do(t, "ZADD", "retry", "1795296600.5", apiPayload("j1", `,"retry_count":0`))
	e, err := b.api.RetrySet().FindJob(context.Background(), "j1")
	require.NoError(t, err)
	res, err := e.Retry(context.Background())
	require.NoError(t, err)
	require.Equal(t, "j1", res.JID)
	require.Equal(t, []string{"j1"}, seen)
	// The given client writes 8.x ms timestamps.
	require.Contains(t, string(res.Payload), fmt.Sprintf(`"enqueued_at":%d`, apiNow.UnixMilli()))
}
