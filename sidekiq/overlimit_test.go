package sidekiq

import (
	"context"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// A job over its limit goes to the schedule set with its overrated count,
// at the limiter's time, and is not a failure; after maxOverrated
// reschedules it fails as usual.
func TestOverLimitReschedulesThenFails(t *testing.T) {
	t.Parallel()
	b := newTestServer(t, ServerConfig{Concurrency: 1})
	b.srv.Handle("Limited", HandlerFunc(func(ctx context.Context, job *wire.Job) error {
		return &OverLimitError{Limiter: "api", RetryAfter: time.Minute}
	}), nil)
	b.start(t)
	b.push(t, "default", `{"class":"Limited","args":[],"jid":"aaaaaaaaaaaaaaaaaaaaaaaa","queue":"default","retry":true}`)
	wait.For(t, "the reschedule", func() bool {
		n, _ := redis.Int(b.conn.Do("ZCARD", contract.KeySchedule))
		return n == 1
	})
	vals, err := redis.Values(b.conn.Do("ZRANGE", contract.KeySchedule, 0, -1, "WITHSCORES"))
	require.NoError(t, err)
	job, err := wire.ParseJob(vals[0].([]byte))
	require.NoError(t, err)
	n, _ := mustGet(t, job, "overrated").Int()
	require.Equal(t, int64(1), n)
	score, err := redis.Float64(vals[1], nil)
	require.NoError(t, err)
	delay := contract.FromEpochSeconds(score).Sub(b.clk.Now())
	require.GreaterOrEqual(t, delay, time.Minute)
	require.Less(t, delay, time.Minute+8*time.Second)
	retries, err := redis.Int(b.conn.Do("ZCARD", contract.KeyRetry))
	require.NoError(t, err)
	require.Zero(t, retries, "not a failure")
	b.waitProcessed(t, 1)
	_, failed := b.srv.proc.counters.Pending()
	require.Zero(t, failed)

	// Exhausted: the 21st over-limit is an ordinary failure.
	_, err = b.conn.Do("DEL", contract.KeySchedule)
	require.NoError(t, err)
	job.Set("overrated", rubyjson.IntValue(maxOverrated))
	b.push(t, "default", string(job.Bytes()))
	wait.For(t, "the failure", func() bool {
		n, _ := redis.Int(b.conn.Do("ZCARD", contract.KeyRetry))
		return n == 1
	})
}

func mustGet(t *testing.T, j *wire.Job, key string) rubyjson.Value {
	t.Helper()
	v, ok := j.Get(key)
	require.True(t, ok, key)
	return v
}

// A NotCounted over-limit is rescheduled without touching the job's
// overrated count, even past maxOverrated: it never turns into a failure.
func TestOverLimitNotCountedNeverFails(t *testing.T) {
	t.Parallel()
	b := newTestServer(t, ServerConfig{Concurrency: 1})
	b.srv.Handle("Busy", HandlerFunc(func(ctx context.Context, job *wire.Job) error {
		return &OverLimitError{Limiter: "class:Busy", RetryAfter: time.Second, NotCounted: true}
	}), nil)
	b.start(t)
	b.push(t, "default", `{"class":"Busy","args":[],"jid":"bbbbbbbbbbbbbbbbbbbbbbbb","queue":"default","retry":true,"overrated":20}`)
	wait.For(t, "the reschedule", func() bool {
		n, _ := redis.Int(b.conn.Do("ZCARD", contract.KeySchedule))
		return n == 1
	})
	vals, err := redis.ByteSlices(b.conn.Do("ZRANGE", contract.KeySchedule, 0, -1))
	require.NoError(t, err)
	job, err := wire.ParseJob(vals[0])
	require.NoError(t, err)
	n, _ := mustGet(t, job, "overrated").Int()
	require.Equal(t, int64(maxOverrated), n, "not counted")
	retries, err := redis.Int(b.conn.Do("ZCARD", contract.KeyRetry))
	require.NoError(t, err)
	require.Zero(t, retries, "not a failure")
}
