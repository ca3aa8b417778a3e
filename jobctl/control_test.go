package jobctl

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/api"
	"github.com/gojob/gojob/sidekiq/wire"
)

type testBundle struct {
	pool    *redis.Pool
	ctl     *Control
	api     *api.API
	conn    redis.Conn
	started chan string
}

// setup runs a server whose "Block" jobs wait for their context to end.
func setup(t *testing.T, poll time.Duration) *testBundle {
	t.Helper()
	rs := redistest.Start(t)
	pool := rs.Pool(t)
	ctl, err := New(&Config{Pool: pool, PollInterval: poll})
	require.NoError(t, err)
	srv, err := sidekiq.NewServer(&sidekiq.ServerConfig{Pool: pool, Concurrency: 2, Logger: zerolog.Nop(),
		Extensions: []sidekiq.Extension{ctl}})
	require.NoError(t, err)
	tb := &testBundle{pool: pool, ctl: ctl, started: make(chan string, 4)}
	srv.HandleFunc("Block", func(ctx context.Context, job *wire.Job) error {
		tb.started <- job.JID()
		<-ctx.Done()
		return context.Cause(ctx)
	})
	require.NoError(t, srv.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Stop(ctx)
	})
	tb.api, err = api.New(&api.Config{Pool: pool})
	require.NoError(t, err)
	tb.conn = pool.Get()
	t.Cleanup(func() { tb.conn.Close() })
	return tb
}

func (tb *testBundle) push(t *testing.T, queue string) string {
	t.Helper()
	res, err := tb.api.Client().Enqueue(context.Background(), queue, "Block")
	require.NoError(t, err)
	return res.JID
}

// deadEntry waits for the dead set's one entry.
func (tb *testBundle) deadEntry(t *testing.T) map[string]any {
	t.Helper()
	var dead [][]byte
	wait.For(t, "the dead set", func() bool {
		dead, _ = redis.ByteSlices(tb.conn.Do("ZRANGE", contract.KeyDead, 0, -1))
		return len(dead) == 1
	})
	var m map[string]any
	require.NoError(t, json.Unmarshal(dead[0], &m))
	return m
}

// The channel's wake-up cancels a running job's context at once (the poll
// is an hour away); the job dies as Gojob::Cancelled, not retried.
func TestCancelRunningJobThroughChannel(t *testing.T) {
	t.Parallel()
	tb := setup(t, time.Hour)
	ctx := context.Background()
	require.NoError(t, tb.ctl.Start(ctx))
	t.Cleanup(func() { tb.ctl.Stop(ctx) })
	// The subscription is up once the channel has a subscriber.
	wait.For(t, "the subscription", func() bool {
		v, _ := redis.Values(tb.conn.Do("PUBSUB", "NUMSUB", contract.CancelChannel))
		n, _ := redis.Int(v[1], nil)
		return n == 1
	})
	jid := tb.push(t, "default")
	require.Equal(t, jid, <-tb.started)
	_, err := tb.api.Cancel(ctx, jid)
	require.ErrorIs(t, err, api.ErrJobNotFound, "not yet in the work hash; the request is recorded anyway")
	m := tb.deadEntry(t)
	require.Equal(t, jid, m["jid"])
	require.Equal(t, "Gojob::Cancelled", m["error_class"])
	n, err := redis.Int(tb.conn.Do("ZCARD", contract.KeyRetry))
	require.NoError(t, err)
	require.Zero(t, n)
}

// Without the channel (Start not called), the poll of the cancel keys
// finds a request made before the job started.
func TestCancelKeySurvivesWithoutSubscription(t *testing.T) {
	t.Parallel()
	tb := setup(t, 50*time.Millisecond)
	ctx := context.Background()
	jid := wire.NewJID()
	_, err := tb.conn.Do("SET", contract.CancelKey(jid), 1, "EX", 60)
	require.NoError(t, err)
	job, err := wire.NewJob("Block")
	require.NoError(t, err)
	job.SetJID(jid)
	_, err = tb.api.Client().Push(ctx, job, nil)
	require.NoError(t, err)
	require.Equal(t, jid, <-tb.started)
	got, err := tb.ctl.runOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{jid}, got)
	m := tb.deadEntry(t)
	require.Equal(t, "Gojob::Cancelled", m["error_class"])
	n, err := redis.Int(tb.conn.Do("EXISTS", contract.CancelKey(jid)))
	require.NoError(t, err)
	require.Zero(t, n, "done with once the job ended")
}

// A cancel of a job waiting in a queue or the schedule set removes it.
func TestCancelWaitingJobRemovesIt(t *testing.T) {
	t.Parallel()
	tb := setup(t, time.Hour)
	ctx := context.Background()
	jid := tb.push(t, "not-worked")
	res, err := tb.api.Cancel(ctx, jid)
	require.NoError(t, err)
	require.Equal(t, "queue:not-worked", res.From)
	n, err := redis.Int(tb.conn.Do("LLEN", "queue:not-worked"))
	require.NoError(t, err)
	require.Zero(t, n)

	job, err := wire.NewJob("Block")
	require.NoError(t, err)
	pr, err := tb.api.Client().Push(ctx, job, &sidekiq.PushOpts{In: time.Hour})
	require.NoError(t, err)
	res, err = tb.api.Cancel(ctx, pr.JID)
	require.NoError(t, err)
	require.Equal(t, contract.KeySchedule, res.From)
}

// A status written is read back; a job without one reads nil.
func TestStatusRoundTrip(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	pool := rs.Pool(t)
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 500_000_000)
	p := 0.25
	require.NoError(t, WriteStatus(ctx, pool, "j1", &Status{Progress: &p, Message: "a quarter"}, now))
	require.NoError(t, WriteStatus(ctx, pool, "j1", &Status{Result: json.RawMessage(`{"n":1}`), Outcome: "success"}, now.Add(time.Second)))
	st, err := ReadStatus(ctx, pool, "j1")
	require.NoError(t, err)
	require.InDelta(t, 0.25, *st.Progress, 1e-9)
	require.Equal(t, "a quarter", st.Message)
	require.JSONEq(t, `{"n":1}`, string(st.Result))
	require.Equal(t, "success", st.Outcome)
	require.WithinDuration(t, now.Add(time.Second), st.UpdatedAt, time.Millisecond)
	conn := pool.Get()
	defer conn.Close()
	ttl, err := redis.Int(conn.Do("TTL", contract.StatusKey("j1")))
	require.NoError(t, err)
	require.Greater(t, ttl, contract.StatusTTL-10)

	err = WriteStatus(ctx, pool, "j1", &Status{Result: json.RawMessage(`{bad`)}, now)
	require.Error(t, err)
	st, err = ReadStatus(ctx, pool, "nobody")
	require.NoError(t, err)
	require.Nil(t, st)
	require.True(t, errors.Is(&CancelledError{JID: "x", Err: context.Canceled}, context.Canceled))
}
