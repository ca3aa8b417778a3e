package jobctl

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
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
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

type testBundle struct {
	rs      *redistest.Server
	pool    *redis.Pool
	ctl     *control
	api     *api.API
	conn    redis.Conn
	started chan string
}

// setup runs a server whose "Block" jobs wait for their context to end.
func setup(t *testing.T, poll time.Duration) *testBundle {
	t.Helper()
	rs := redistest.Start(t)
	pool := rs.Pool(t)
	srv, err := sidekiq.NewServer(&sidekiq.ServerConfig{Pool: pool, Concurrency: 2, Logger: zerolog.Nop()})
	require.NoError(t, err)
	ctl, err := newControl(&Config{Pool: pool, Server: srv, PollInterval: poll})
	require.NoError(t, err)
	tb := &testBundle{rs: rs, pool: pool, ctl: ctl, started: make(chan string, 4)}
	srv.Handle("Block", sidekiq.HandlerFunc(func(ctx context.Context, job *wire.Job) error {
		tb.started <- job.JID()
		<-ctx.Done()
		return context.Cause(ctx)
	}), nil)
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
	jid := contract.NewJID()
	_, err := tb.conn.Do("SET", contract.CancelKey(jid), 1, "EX", 60)
	require.NoError(t, err)
	job, err := wire.NewJob("Block")
	require.NoError(t, err)
	job.Set("jid", rubyjson.StringValue(jid))
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

// rubyCancel does what Sidekiq's Client#cancel! sends (8.1.7, the capture
// testdata/sidekiq-8.1.7-iterable/monitor-cancel.txt): a pipeline of
// HSETNX it-<jid> cancelled <epoch s>, HGET, EXPIRE … NX.
func rubyCancel(t *testing.T, conn redis.Conn, jid string) {
	t.Helper()
	key := "it-" + jid
	conn.Send("HSETNX", key, "cancelled", time.Now().Unix())
	conn.Send("HGET", key, "cancelled")
	conn.Send("EXPIRE", key, 2592000, "NX")
	_, err := conn.Do("")
	require.NoError(t, err)
}

// A job running here whose it-<jid> has "cancelled" (Sidekiq's cancel!,
// from a Ruby process: no gojob key, no message on the channel) is found
// by the poll and ends as a gojob cancel does: the dead set as
// Gojob::Cancelled, not retried; the request's keys are gone after it.
func TestSidekiqCancelOfARunningJob(t *testing.T) {
	t.Parallel()
	tb := setup(t, 50*time.Millisecond)
	ctx := context.Background()
	require.NoError(t, tb.ctl.Start(ctx))
	t.Cleanup(func() { tb.ctl.Stop(ctx) })
	jid := tb.push(t, "default")
	require.Equal(t, jid, <-tb.started)
	rubyCancel(t, tb.conn, jid)
	m := tb.deadEntry(t)
	require.Equal(t, jid, m["jid"])
	require.Equal(t, "Gojob::Cancelled", m["error_class"])
	n, err := redis.Int(tb.conn.Do("ZCARD", contract.KeyRetry))
	require.NoError(t, err)
	require.Zero(t, n)
	wait.For(t, "the request's keys to go", func() bool {
		n, _ := redis.Int(tb.conn.Do("EXISTS", contract.IterationKey(jid), contract.CancelKey(jid)))
		return n == 0
	})
}

// The poll costs one command for all the running jobs, whatever their
// number, and finds the jobs asked by either key among them.
func TestCancelPollIsOneCommandForEveryRunningJob(t *testing.T) {
	t.Parallel()
	tb := setup(t, time.Hour)
	ctx := context.Background()
	a, b := tb.push(t, "default"), tb.push(t, "default")
	started := map[string]bool{<-tb.started: true, <-tb.started: true}
	require.True(t, started[a] && started[b])
	_, err := tb.ctl.runOnce(ctx) // loads the script
	require.NoError(t, err)
	mon := tb.rs.StartMonitor(t)
	got, err := tb.ctl.runOnce(ctx)
	require.NoError(t, err)
	require.Empty(t, got, "nobody asked")
	var touching []string
	for _, l := range mon.Lines(t) {
		if strings.Contains(l, `"gojob-cancel:`) || strings.Contains(l, `"it-`) {
			touching = append(touching, l)
		}
	}
	// The script, then the commands it runs (MONITOR shows both).
	require.Equal(t, []string{"evalsha", "exists", "hexists", "exists", "hexists"}, redistest.Names(touching))

	rubyCancel(t, tb.conn, b)
	got, err = tb.ctl.runOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{b}, got)
	_, err = tb.conn.Do("SET", contract.CancelKey(a), 1, "EX", 60)
	require.NoError(t, err)
	got, err = tb.ctl.runOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{a}, got, "b is cancelled already")
}

// A cancel of a job waiting in a queue or the schedule set removes it.
func TestCancelWaitingJobRemovesIt(t *testing.T) {
	t.Parallel()
	tb := setup(t, time.Hour)
	ctx := context.Background()
	jid := tb.push(t, "not-worked")
	res, err := tb.api.Cancel(ctx, jid)
	require.NoError(t, err)
	require.Equal(t, "queue", res.Where)
	require.Equal(t, "not-worked", res.Queue)
	n, err := redis.Int(tb.conn.Do("LLEN", "queue:not-worked"))
	require.NoError(t, err)
	require.Zero(t, n)

	job, err := wire.NewJob("Block")
	require.NoError(t, err)
	pr, err := tb.api.Client().Push(ctx, job, &sidekiq.PushOpts{In: time.Hour})
	require.NoError(t, err)
	res, err = tb.api.Cancel(ctx, pr.JID)
	require.NoError(t, err)
	require.Equal(t, contract.KeySchedule, res.Where)
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
