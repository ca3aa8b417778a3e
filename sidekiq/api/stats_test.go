package api_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq/api"
	"github.com/stretchr/testify/require"
)

func TestAPIStats(t *testing.T) {
	t.Parallel()
	b := apiSetup(t)
	ctx := context.Background()

	st, err := b.api.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, &api.Stats{}, st)

	b.do(t, "MSET", "stat:processed", "120", "stat:failed", "7")
	b.do(t, "ZADD", "schedule", 1, "s1", 2, "s2")
	b.do(t, "ZADD", "retry", 1, "r1")
	b.do(t, "ZADD", "dead", 1, "d1", 2, "d2", 3, "d3")
	b.do(t, "SADD", "processes", "host:1:aaa", "host:2:bbb", "host:3:gone")
	b.do(t, "HSET", "host:1:aaa", "busy", "2", "info", "{}")
	b.do(t, "HSET", "host:2:bbb", "busy", "3", "info", "{}")
	b.do(t, "SADD", "queues", "default", "low", "empty", "big")
	// Oldest job (index -1) was enqueued 10.5 s before apiNow.
	oldest := fmt.Sprintf(`{"class":"A","args":[],"jid":"x","created_at":1.0,"enqueued_at":%s}`, contract.Score(apiNow.Add(-10500*time.Millisecond)))
	b.do(t, "RPUSH", "queue:default", `{"class":"A","args":[],"jid":"y","enqueued_at":1795296573.0}`, oldest)
	b.do(t, "RPUSH", "queue:low", "a", "b", "c")
	b.do(t, "RPUSH", "queue:big", "a", "b", "c")

	st, err = b.api.Stats(ctx)
	require.NoError(t, err)
	require.InDelta(t, 10.5, st.DefaultQueueLatency.Seconds(), 1e-6)
	st.DefaultQueueLatency = 0
	require.Equal(t, &api.Stats{
		Processed: 120, Failed: 7,
		Scheduled: 2, Retries: 1, Dead: 3,
		Processes: 3, Busy: 5, Enqueued: 8,
		Queues: []api.QueueSize{
			{Name: "big", Size: 3}, {Name: "low", Size: 3}, {Name: "default", Size: 2}, {Name: "empty", Size: 0},
		},
	}, st)
}

func TestAPIStatsDefaultLatency(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		tail string
		want time.Duration
	}{
		{"float seconds", `{"enqueued_at":1795296570.16517}`, 3000000700 * time.Nanosecond},
		{"integer ms (8.x)", fmt.Sprintf(`{"enqueued_at":%d}`, apiNow.UnixMilli()-2500), 2500*time.Millisecond + 170700*time.Nanosecond},
		{"exponent float", `{"enqueued_at":1.79529657e+9}`, 3165170700 * time.Nanosecond},
		{"created_at fallback", `{"created_at":1795296563.16517}`, 10000000700 * time.Nanosecond},
		{"neither", `{"class":"A"}`, 0},
		{"unparsable", `not json`, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := apiSetup(t)
			b.do(t, "LPUSH", "queue:default", tc.tail)
			st, err := b.api.Stats(context.Background())
			require.NoError(t, err)
			require.InDelta(t, tc.want.Seconds(), st.DefaultQueueLatency.Seconds(), 1e-6)
		})
	}
}

func TestAPIStatsManyProcessesAndQueues(t *testing.T) {
	t.Parallel()
	b := apiSetup(t)
	for i := range 2500 {
		b.do(t, "SADD", "processes", fmt.Sprintf("p%04d", i))
		b.do(t, "HSET", fmt.Sprintf("p%04d", i), "busy", 1)
		b.do(t, "SADD", "queues", fmt.Sprintf("q%04d", i))
		b.do(t, "LPUSH", fmt.Sprintf("queue:q%04d", i), "x")
	}
	st, err := b.api.Stats(context.Background())
	require.NoError(t, err)
	require.EqualValues(t, 2500, st.Busy)
	require.EqualValues(t, 2500, st.Enqueued)
	require.Len(t, st.Queues, 2500)
	require.Equal(t, "q0000", st.Queues[0].Name)
}

func TestAPIHistory(t *testing.T) {
	t.Parallel()
	b := apiSetup(t)
	ctx := context.Background()
	// apiNow is 2026-11-21 UTC.
	b.do(t, "SET", "stat:processed:2026-11-21", 10)
	b.do(t, "SET", "stat:failed:2026-11-21", 1)
	b.do(t, "SET", "stat:processed:2026-11-19", 30)
	b.do(t, "SET", "stat:processed:2026-11-18", 99) // outside 3 days

	h, err := b.api.History(ctx, 3)
	require.NoError(t, err)
	require.Equal(t, []api.DayStats{
		{Date: "2026-11-21", Processed: 10, Failed: 1},
		{Date: "2026-11-20"},
		{Date: "2026-11-19", Processed: 30},
	}, h)

	h, err = b.api.History(ctx, 0)
	require.NoError(t, err)
	require.Len(t, h, 30)
	require.Equal(t, "2026-10-23", h[29].Date)

	_, err = b.api.History(ctx, 1826)
	require.ErrorContains(t, err, "days must be between 1 and 1825")
	_, err = b.api.History(ctx, -1)
	require.Error(t, err)

	// Today is the clock's UTC date.
	b.clk.Set(time.Date(2026, 11, 18, 23, 0, 0, 0, time.FixedZone("x", -3600)))
	h, err = b.api.History(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, []api.DayStats{{Date: "2026-11-19", Processed: 30}}, h)
}

func TestAPIResetStats(t *testing.T) {
	t.Parallel()
	b := apiSetup(t)
	ctx := context.Background()
	set := func() {
		b.do(t, "MSET", "stat:processed", 5, "stat:failed", 6, "stat:processed:2026-11-21", 5)
	}
	set()
	res, err := b.api.ResetStats(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"failed", "processed"}, res)
	require.Equal(t, []string{"0", "0", "5"}, b.strings(t, "MGET", "stat:processed", "stat:failed", "stat:processed:2026-11-21"))

	set()
	res, err = b.api.ResetStats(ctx, "processed", "bogus")
	require.NoError(t, err)
	require.Equal(t, []string{"processed"}, res)
	require.Equal(t, []string{"0", "6"}, b.strings(t, "MGET", "stat:processed", "stat:failed"))

	_, err = b.api.ResetStats(ctx, "bogus")
	require.ErrorContains(t, err, "no known stat")
}
