package sidekiq

import (
	"context"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq/wire"
)

// A snoozed job goes to the schedule set as it was fetched, d from now,
// with its retry_count untouched, and is counted as processed, not failed.
func TestSnoozeReschedulesWithoutFailure(t *testing.T) {
	t.Parallel()
	b := newTestServer(t, ServerConfig{Concurrency: 1})
	b.srv.Handle("Sleepy", HandlerFunc(func(ctx context.Context, job *wire.Job) error {
		return Snooze(time.Minute)
	}), nil)
	b.start(t)
	raw := `{"class":"Sleepy","args":[],"jid":"aaaaaaaaaaaaaaaaaaaaaaaa","queue":"default","retry":true,"retry_count":2}`
	b.push(t, "default", raw)
	wait.For(t, "the snooze", func() bool {
		n, _ := redis.Int(b.conn.Do("ZCARD", contract.KeySchedule))
		return n == 1
	})
	vals, err := redis.Values(b.conn.Do("ZRANGE", contract.KeySchedule, 0, -1, "WITHSCORES"))
	require.NoError(t, err)
	require.JSONEq(t, raw, string(vals[0].([]byte)), "unchanged: retry_count untouched, no error fields")
	score, err := redis.Float64(vals[1], nil)
	require.NoError(t, err)
	delay := contract.FromEpochSeconds(score).Sub(b.clk.Now())
	require.InDelta(t, time.Minute.Seconds(), delay.Seconds(), 2)
	retries, err := redis.Int(b.conn.Do("ZCARD", contract.KeyRetry))
	require.NoError(t, err)
	require.Zero(t, retries, "not a failure")
	b.waitProcessed(t, 1)
	_, failed := b.srv.proc.counters.Pending()
	require.Zero(t, failed)
	var d interface{ Discarded() bool }
	require.ErrorAs(t, Discard(nil), &d)
	require.True(t, d.Discarded())
	require.ErrorAs(t, Snooze(time.Second), &d)
	require.False(t, d.Discarded())
}
