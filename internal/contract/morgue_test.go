package contract

import (
	"context"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/redistest"
)

func TestSendToMorgueTrimsByAgeAndRank(t *testing.T) {
	t.Parallel()
	pool := redistest.Start(t).Pool(t)
	conn := pool.Get()
	defer conn.Close()
	now := time.Unix(1795296573, 500000000)
	old := now.Add(-DeadTimeoutInSeconds*time.Second - time.Second)
	young := now.Add(-DeadTimeoutInSeconds*time.Second + time.Second)
	_, err := conn.Do("ZADD", KeyDead, Score(old), "old", Score(young), "young")
	require.NoError(t, err)

	ctx := context.Background()
	require.NoError(t, SendToMorgue(ctx, conn, MorgueParams{Payload: []byte("not json {"), Now: now}))
	got, err := redis.Strings(conn.Do("ZRANGE", KeyDead, 0, -1, "WITHSCORES"))
	require.NoError(t, err)
	require.Equal(t, []string{"young", Score(young), "not json {", "1795296573.5"}, got)

	// ZREMRANGEBYRANK 0 -max keeps max-1 members (Ruby's off-by-one).
	lim := MorgueLimits{MaxJobs: 3, Timeout: time.Hour}
	for i, p := range []string{"a", "b", "c"} {
		require.NoError(t, SendToMorgue(ctx, conn, MorgueParams{Payload: []byte(p), Now: now.Add(time.Duration(i+1) * time.Second), Limits: lim}))
	}
	got, err = redis.Strings(conn.Do("ZRANGE", KeyDead, 0, -1))
	require.NoError(t, err)
	require.Equal(t, []string{"b", "c"}, got)
}

func TestSendToMorgueDefaultRankLimit(t *testing.T) {
	t.Parallel()
	pool := redistest.Start(t).Pool(t)
	conn := pool.Get()
	defer conn.Close()
	now := time.Unix(1795400000, 0)
	args := []any{KeyDead}
	for i := range DeadMaxJobs + 5 {
		args = append(args, 1795290000+i, i)
	}
	_, err := conn.Do("ZADD", args...)
	require.NoError(t, err)
	require.NoError(t, SendToMorgue(context.Background(), conn, MorgueParams{Payload: []byte("x"), Now: now}))
	n, err := redis.Int(conn.Do("ZCARD", KeyDead))
	require.NoError(t, err)
	require.Equal(t, DeadMaxJobs-1, n)
	top, err := redis.Strings(conn.Do("ZRANGE", KeyDead, -1, -1))
	require.NoError(t, err)
	require.Equal(t, []string{"x"}, top)
}
