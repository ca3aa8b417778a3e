package cron

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/clock"
	"github.com/gojob/gojob/internal/clocktest"
	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

func newStore(t *testing.T, pool *redis.Pool, clk clock.Clock, l Layout) *Store {
	t.Helper()
	c, err := sidekiq.NewClient(&sidekiq.ClientConfig{Pool: pool, Clock: clk})
	require.NoError(t, err)
	return &Store{Client: c, Layout: l, Location: time.UTC}
}

// Two gojob schedulers and a third process writing the hash as the gem
// does serve one schedule over ten fake-clocked minutes of passes at
// uneven moments: every tick is pushed exactly once, none is missed.
func TestTwoSchedulersEnqueueEachTickOnce(t *testing.T) {
	t.Parallel()
	for _, l := range []Layout{{}, {V1: true}} {
		t.Run(l.String(), func(t *testing.T) {
			t.Parallel()
			rs := redistest.Start(t)
			pool := rs.Pool(t)
			conn := pool.Get()
			defer conn.Close()
			start := at("2024-01-01T12:00:30Z")
			clk := clocktest.NewFake(start)
			a := &Scheduler{Store: newStore(t, pool, clk, l), Logger: zerolog.Nop()}
			b := &Scheduler{Store: newStore(t, pool, clk, l), Logger: zerolog.Nop()}
			// The gem's save, field by field (1.8.0 / 2.x to_hash), for a job
			// Ruby created: every minute, to queue "cron".
			key := l.jobKey("minutely")
			fields := []any{key, "name", "minutely", "klass", "MinuteJob", "cron", "* * * * *", "description", "",
				"args", `[1,"a"]`, "message", `{"retry":true,"queue":"cron","class":"MinuteJob","args":[1,"a"]}`,
				"status", "enabled", "active_job", "false", "queue_name_prefix", "", "queue_name_delimiter", "",
				"last_enqueue_time", "", "symbolize_args", "false", "date_as_argument", "false"}
			if !l.V1 {
				fields = append(fields, "namespace", "default", "source", "dynamic", "retry", "true")
			}
			_, err := conn.Do("SADD", l.setKey(), key)
			require.NoError(t, err)
			_, err = conn.Do("HSET", fields...)
			require.NoError(t, err)
			_, err = conn.Do("ZADD", l.enqueuedKey("minutely"), contract.Score(start), "2024-01-01T12:00:00Z")
			require.NoError(t, err)
			// A job gojob saved: every 2 minutes, with date_as_argument.
			j, err := NewJob("every-two", "*/2 * * * *", "TwoJob", "cron", "x")
			require.NoError(t, err)
			j.DateAsArgument = true
			require.NoError(t, a.Store.Save(context.Background(), j))

			ctx := context.Background()
			for s := 0; s < 600; s += 7 {
				clk.Set(start.Add(time.Duration(s) * time.Second))
				_, err := a.Pass(ctx)
				require.NoError(t, err)
				clk.Set(start.Add(time.Duration(s)*time.Second + 3*time.Second))
				_, err = b.Pass(ctx)
				require.NoError(t, err)
			}
			raws, err := redis.ByteSlices(conn.Do("LRANGE", "queue:cron", 0, -1))
			require.NoError(t, err)
			counts := map[string]int{}
			for _, raw := range raws {
				job, err := wire.ParseJob(raw)
				require.NoError(t, err)
				counts[job.Class()]++
				switch job.Class() {
				case "MinuteJob":
					require.Equal(t, `[1,"a"]`, string(rubyjson.ArrayValue(job.Args()...).Encode()))
				case "TwoJob":
					require.Len(t, job.Args(), 2, "date_as_argument appends the push time")
				}
			}
			// Ticks 12:01 … 12:10 (12:00 was claimed at save); 12:10:00 counts
			// from 12:10:01.
			require.Equal(t, 10, counts["MinuteJob"], "one push per minute tick")
			require.Equal(t, 5, counts["TwoJob"], "one push per even minute")
			ismember, err := redis.Bool(conn.Do("SISMEMBER", "queues", "cron"))
			require.NoError(t, err)
			require.True(t, ismember)
			hist, err := redis.Int(conn.Do("LLEN", l.historyKey("minutely")))
			require.NoError(t, err)
			require.Equal(t, 10, hist)
			last, err := redis.String(conn.Do("HGET", key, "last_enqueue_time"))
			require.NoError(t, err)
			require.Equal(t, "2024-01-01 12:10:04 +0000", last, "the first pass after 12:10:01")
		})
	}
}

// A tick missed because every process was down is not replayed later
// (only the latest tick, within 60 s, is considered), and a disabled job
// is skipped.
func TestMissedTicksAreNotReplayedAndDisabledJobsWait(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	pool := rs.Pool(t)
	start := at("2024-01-01T12:00:30Z")
	clk := clocktest.NewFake(start)
	s := &Scheduler{Store: newStore(t, pool, clk, Layout{}), Logger: zerolog.Nop()}
	ctx := context.Background()
	j, err := NewJob("hourly", "0 * * * *", "HourJob", "")
	require.NoError(t, err)
	require.NoError(t, s.Store.Save(ctx, j))
	clk.Set(at("2024-01-01T15:00:45Z")) // down from 12:00:30 to 15:00:45
	n, err := s.Pass(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n, "only the 15:00 tick")
	clk.Set(at("2024-01-01T16:02:00Z"))
	n, err = s.Pass(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "16:00 is more than 60 s past")
	require.NoError(t, s.Store.SetEnabled(ctx, "hourly", false))
	clk.Set(at("2024-01-01T17:00:10Z"))
	n, err = s.Pass(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "disabled")
	require.NoError(t, s.Store.SetEnabled(ctx, "hourly", true))
	n, err = s.Pass(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

// Run now pushes at once without claiming a tick; delete removes the job's
// keys; a schedule file sync keeps dynamic jobs and a disable made in Redis,
// and deletes the schedule jobs the file dropped.
func TestRunNowDeleteAndScheduleSync(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	pool := rs.Pool(t)
	conn := pool.Get()
	defer conn.Close()
	clk := clocktest.NewFake(at("2024-01-01T12:00:30Z"))
	st := newStore(t, pool, clk, Layout{})
	ctx := context.Background()
	dyn, err := NewJob("dyn", "@daily", "DynJob", "")
	require.NoError(t, err)
	require.NoError(t, st.Save(ctx, dyn))
	file, err := parseFile([]byte("a:\n  cron: '@hourly'\n  class: A\nb:\n  cron: '@hourly'\n  class: B\n"))
	require.NoError(t, err)
	require.NoError(t, st.Sync(ctx, file))
	require.NoError(t, st.SetEnabled(ctx, "a", false))
	file, err = parseFile([]byte("a:\n  cron: '@hourly'\n  class: A\n"))
	require.NoError(t, err)
	require.NoError(t, st.Sync(ctx, file))
	jobs, err := st.List(ctx)
	require.NoError(t, err)
	var names []string
	for _, j := range jobs {
		names = append(names, fmt.Sprintf("%s:%s", j.Name, j.status()))
	}
	require.Equal(t, []string{"dyn:enabled", "a:disabled"}, names)

	jid, err := st.RunNow(ctx, "a")
	require.NoError(t, err)
	require.Len(t, jid, 24)
	n, err := redis.Int(conn.Do("LLEN", "queue:default"))
	require.NoError(t, err)
	require.Equal(t, 1, n)
	hist, err := redis.Strings(conn.Do("LRANGE", st.Layout.historyKey("a"), 0, -1))
	require.NoError(t, err)
	require.Equal(t, []string{`{"jid":"` + jid + `","enqueued":"2024-01-01 12:00:30 UTC"}`}, hist)

	require.NoError(t, st.Delete(ctx, "a"))
	for _, k := range []string{st.Layout.jobKey("a"), st.Layout.enqueuedKey("a"), st.Layout.historyKey("a")} {
		n, err := redis.Int(conn.Do("EXISTS", k))
		require.NoError(t, err)
		require.Zero(t, n, k)
	}
	require.ErrorIs(t, st.Delete(ctx, "a"), ErrNotFound)
	_, err = st.RunNow(ctx, "missing")
	require.ErrorIs(t, err, ErrNotFound)
}
