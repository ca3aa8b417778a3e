package maintenance_test

import (
	"context"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/clocktest"
	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/testlog"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/internal/maintenance"
	"github.com/gojob/gojob/sidekiq/internal/redisx"
	"github.com/gojob/gojob/sidekiq/wire"
)

type pollBundle struct {
	rs     *redistest.Server
	conn   redis.Conn
	clk    *clocktest.Fake
	poller *maintenance.Poller
	logs   *testlog.Buffer
}

// newPollBundle is a poller that pushes through a real client and buries
// into a list the test reads.
func newPollBundle(t *testing.T, rs *redistest.Server, v wire.Version) *pollBundle {
	t.Helper()
	if rs == nil {
		rs = redistest.Start(t)
	}
	pool := rs.Pool(t)
	conn := pool.Get()
	t.Cleanup(func() { conn.Close() })
	b := &pollBundle{rs: rs, conn: conn, clk: clocktest.NewFake(time.Unix(1795296573, 0)), logs: testlog.New(t)}
	client, err := sidekiq.NewClient(&sidekiq.ClientConfig{Pool: pool, Version: v, Clock: b.clk})
	require.NoError(t, err)
	log := b.logs.Logger()
	outage := &redisx.OutageLog{Log: &log}
	b.poller, err = maintenance.NewPoller(&maintenance.PollerConfig{
		Pool:    pool,
		Format:  contract.FixedFormat(v),
		Clock:   b.clk,
		Logger:  log,
		Outage:  outage,
		Prepare: client.PushPayload,
	})
	require.NoError(t, err)
	return b
}

func zcard(t *testing.T, c redis.Conn, key string) int {
	n, err := redis.Int(c.Do("ZCARD", key))
	require.NoError(t, err)
	return n
}

// A pass moves every due member of retry and schedule to its queue through
// the client path (defaults, a new enqueued_at, SADD queues), leaves the
// members not yet due, and buries an unparsable member unchanged.
func TestPollerMovesDueJobsThroughTheClient(t *testing.T) {
	t.Parallel()
	for _, v := range []wire.Version{wire.Version6, wire.Version7} {
		t.Run(v.String(), func(t *testing.T) {
			b := newPollBundle(t, nil, v)
			now := b.clk.Now()
			_, err := b.conn.Do("ZADD", contract.KeySchedule, contract.Score(now.Add(-time.Second)), `{"class":"A","args":[],"jid":"due1","created_at":1.5}`,
				contract.Score(now.Add(time.Hour)), `{"retry":true,"queue":"q","class":"A","args":[],"jid":"later"}`)
			require.NoError(t, err)
			_, err = b.conn.Do("ZADD", contract.KeyRetry, contract.Score(now.Add(-time.Minute)), `{"retry":true,"queue":"low","class":"B","args":[],"jid":"r1","retry_count":0}`,
				contract.Score(now.Add(-time.Minute)), `not json`)
			require.NoError(t, err)
			res, err := b.poller.RunOnce(context.Background())
			require.NoError(t, err)
			require.Equal(t, 2, res.Enqueued)
			require.Equal(t, 1, res.Buried)
			d, _ := redis.Strings(b.conn.Do("LRANGE", "queue:default", 0, -1))
			require.Equal(t, []string{`{"retry":true,"queue":"default","class":"A","args":[],"jid":"due1","created_at":1.5,"enqueued_at":1795296573.0}`}, d)
			l, _ := redis.Strings(b.conn.Do("LRANGE", "queue:low", 0, -1))
			require.Len(t, l, 1)
			qs, _ := redis.Strings(b.conn.Do("SMEMBERS", contract.KeyQueues))
			require.ElementsMatch(t, []string{"default", "low"}, qs)
			require.Equal(t, 1, zcard(t, b.conn, contract.KeySchedule))
			dead, _ := redis.Strings(b.conn.Do("ZRANGE", contract.KeyDead, 0, -1))
			require.Equal(t, []string{"not json"}, dead)
		})
	}
}

// A due member leaves its set only as its job enters its queue, in one
// script: a member another poller (Ruby's included) moved while this one
// was making its payload is not pushed again, and a Redis that lost its
// script cache (a restart, SCRIPT FLUSH) loads the script again.
func TestPollerMovesEachMemberOnceAndSurvivesAnEmptyScriptCache(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	b := newPollBundle(t, rs, wire.Version7)
	now := b.clk.Now()
	member := `{"retry":true,"queue":"default","class":"A","args":[],"jid":"raced"}`
	_, err := b.conn.Do("ZADD", contract.KeySchedule, contract.Score(now.Add(-time.Second)), member)
	require.NoError(t, err)
	pool := rs.Pool(t)
	client, err := sidekiq.NewClient(&sidekiq.ClientConfig{Pool: pool, Version: wire.Version7, Clock: b.clk})
	require.NoError(t, err)
	log := b.logs.Logger()
	raced, err := maintenance.NewPoller(&maintenance.PollerConfig{
		Pool: pool, Format: contract.FixedFormat(wire.Version7), Clock: b.clk, Logger: log,
		Outage: &redisx.OutageLog{Log: &log},
		Prepare: func(ctx context.Context, job *wire.Job) (string, []byte, bool, error) {
			// Another poller moves the member meanwhile.
			_, err := b.poller.RunOnce(ctx)
			require.NoError(t, err)
			return client.PushPayload(ctx, job)
		},
	})
	require.NoError(t, err)
	res, err := raced.RunOnce(context.Background())
	require.NoError(t, err)
	require.Zero(t, res.Enqueued, "the member was gone when this poller moved it")
	q, err := redis.Strings(b.conn.Do("LRANGE", "queue:default", 0, -1))
	require.NoError(t, err)
	require.Len(t, q, 1, "pushed once")

	_, err = b.conn.Do("SCRIPT", "FLUSH")
	require.NoError(t, err)
	_, err = b.conn.Do("ZADD", contract.KeyRetry, contract.Score(now.Add(-time.Second)), `{"retry":true,"queue":"default","class":"A","args":[],"jid":"after-flush"}`)
	require.NoError(t, err)
	res, err = b.poller.RunOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, res.Enqueued)
}

// 6.4's Poller#poll_interval_average is `options[:poll_interval_average]
// ||= scaled_poll_interval`: the scaled interval is computed at the first
// poll and kept, while the process count is re-read for the <10 branch.
// 6.5+ recomputes it every time.
func TestPollIntervalScaledByProcessesAndCachedIn64(t *testing.T) {
	t.Parallel()
	for _, v := range []wire.Version{wire.Version6, wire.Version7} {
		t.Run(v.String(), func(t *testing.T) {
			b := newPollBundle(t, nil, v)
			ctx := context.Background()
			_, err := b.conn.Do("SADD", contract.KeyProcesses, "p1")
			require.NoError(t, err)
			_, err = b.conn.Do("HSET", "p1", "info", "{}")
			require.NoError(t, err)
			first := b.poller.NextSleep(ctx)
			require.True(t, first >= 2500*time.Millisecond && first < 7500*time.Millisecond, "%v", first)
			_, err = b.conn.Do("SADD", contract.KeyProcesses, "p2", "p3")
			require.NoError(t, err)
			_, err = b.conn.Do("HSET", "p2", "info", "{}")
			require.NoError(t, err)
			_, err = b.conn.Do("HSET", "p3", "info", "{}")
			require.NoError(t, err)
			for i := 0; i < 20; i++ {
				d := b.poller.NextSleep(ctx)
				if v.AtLeast(6, 5, 0) {
					// 3 processes: interval 15 s, sleep 7.5-22.5 s.
					require.True(t, d >= 7500*time.Millisecond && d < 22500*time.Millisecond, "%v", d)
				} else {
					// interval kept at 5 s, sleep 2.5-7.5 s.
					require.True(t, d >= 2500*time.Millisecond && d < 7500*time.Millisecond, "%v", d)
				}
			}
		})
	}
}

// Stop ends a poller in its initial wait at once.
func TestPollerStopsDuringItsInitialWait(t *testing.T) {
	t.Parallel()
	b := newPollBundle(t, nil, wire.Version7)
	require.NoError(t, b.poller.Start(context.Background()))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	require.NoError(t, b.poller.Stop(ctx))
}

// A due member that parses but cannot be pushed (it fails the client's
// validation) goes to the dead set unchanged, is never reported as a Redis
// outage, and does not hold up the due jobs behind it.
func TestPollerBuriesJobsThatCannotBePushed(t *testing.T) {
	t.Parallel()
	b := newPollBundle(t, nil, wire.Version7)
	now := b.clk.Now()
	bad := []string{
		`{"class":"Good","args":{"a":1},"jid":"aaaaaaaaaaaaaaaaaaaaaaaa","queue":"default"}`,
		`{"args":[],"jid":"noclass","queue":"default"}`,
		`{"class":"X","args":[],"jid":"badtags","queue":"default","tags":"x"}`,
		`{"class":"X","args":[],"jid":"badretryfor","queue":"default","retry_for":"soon"}`,
	}
	for i, m := range bad {
		_, err := b.conn.Do("ZADD", contract.KeySchedule, contract.Score(now.Add(time.Duration(-10+i)*time.Second)), m)
		require.NoError(t, err)
	}
	_, err := b.conn.Do("ZADD", contract.KeySchedule, contract.Score(now.Add(-time.Second)), `{"class":"Good","args":[1],"jid":"valid","queue":"default"}`)
	require.NoError(t, err)
	res, err := b.poller.RunOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, res.Enqueued)
	require.Equal(t, len(bad), res.Buried)
	dead, err := redis.Strings(b.conn.Do("ZRANGE", contract.KeyDead, 0, -1))
	require.NoError(t, err)
	require.ElementsMatch(t, bad, dead, "unchanged")
	q, err := redis.Strings(b.conn.Do("LRANGE", "queue:default", 0, -1))
	require.NoError(t, err)
	require.Len(t, q, 1)
	require.Contains(t, q[0], `"jid":"valid"`)
	require.Zero(t, zcard(t, b.conn, contract.KeySchedule))
	require.Zero(t, b.logs.Count("", "redis unavailable"), "a validation error is not an outage")
	require.Equal(t, len(bad), b.logs.Count("error", "cannot be pushed"))
}
