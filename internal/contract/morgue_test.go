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
	dropped, err := SendToMorgue(ctx, conn, MorgueParams{Payload: []byte("not json {"), Now: now})
	require.NoError(t, err)
	require.Equal(t, int64(1), dropped, "the entry older than the timeout")
	got, err := redis.Strings(conn.Do("ZRANGE", KeyDead, 0, -1, "WITHSCORES"))
	require.NoError(t, err)
	require.Equal(t, []string{"young", Score(young), "not json {", "1795296573.5"}, got)

	// ZREMRANGEBYRANK 0 -max keeps max-1 members (Ruby's off-by-one).
	lim := MorgueLimits{MaxJobs: 3, Timeout: time.Hour}
	var drops []int64
	for i, p := range []string{"a", "b", "c"} {
		d, err := SendToMorgue(ctx, conn, MorgueParams{Payload: []byte(p), Now: now.Add(time.Duration(i+1) * time.Second), Limits: lim})
		require.NoError(t, err)
		drops = append(drops, d)
	}
	// young and "not json {" are there: a fills the room, b and c each drop one.
	require.Equal(t, []int64{1, 1, 1}, drops)
	require.Equal(t, int64(3), MorgueDrops(2, 0, 3, lim), "what MorgueDrops predicts for the same additions")
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
	dropped, err := SendToMorgue(context.Background(), conn, MorgueParams{Payload: []byte("x"), Now: now})
	require.NoError(t, err)
	require.Equal(t, int64(7), dropped, "10,006 entries trimmed to 9,999")
	n, err := redis.Int(conn.Do("ZCARD", KeyDead))
	require.NoError(t, err)
	require.Equal(t, DeadMaxJobs-1, n)
	top, err := redis.Strings(conn.Do("ZRANGE", KeyDead, -1, -1))
	require.NoError(t, err)
	require.Equal(t, []string{"x"}, top)
}

func TestMorgueDropsPredictsTheTrim(t *testing.T) {
	t.Parallel()
	lim := MorgueLimits{}
	require.Equal(t, int64(0), MorgueDrops(0, 0, 9999, lim), "9,999 fit")
	require.Equal(t, int64(501), MorgueDrops(0, 0, 10500, lim), "the trim keeps 9,999")
	require.Equal(t, int64(3+1), MorgueDrops(9999, 3, 4, lim), "the expired ones, then the overflow")
	require.Equal(t, int64(0), MorgueDrops(9999, 3, 0, lim), "nothing added, nothing trimmed")
}
