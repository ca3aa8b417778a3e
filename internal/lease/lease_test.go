package lease

import (
	"context"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/redistest"
)

// One holder at a time; only the holder renews or releases; an expired
// lease is anyone's.
func TestOneHolderAtATime(t *testing.T) {
	t.Parallel()
	conn := redistest.Start(t).Pool(t).Get()
	defer conn.Close()
	ctx := context.Background()
	const key = "lease"

	ok, err := Take(ctx, conn, key, "a", time.Minute)
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = Take(ctx, conn, key, "b", time.Minute)
	require.NoError(t, err)
	require.False(t, ok, "held by a")
	ok, err = Take(ctx, conn, key, "a", time.Minute)
	require.NoError(t, err)
	require.False(t, ok, "Take does not renew")

	ok, err = Acquire(ctx, conn, key, "b", time.Minute)
	require.NoError(t, err)
	require.False(t, ok)
	ok, err = Acquire(ctx, conn, key, "a", 2*time.Minute)
	require.NoError(t, err)
	require.True(t, ok, "Acquire renews its holder's")
	ttl, err := redis.Int(conn.Do("PTTL", key))
	require.NoError(t, err)
	require.Greater(t, ttl, int(time.Minute.Milliseconds()))

	ok, err = Renew(ctx, conn, key, "b", time.Hour)
	require.NoError(t, err)
	require.False(t, ok)
	ok, err = Release(ctx, conn, key, "b")
	require.NoError(t, err)
	require.False(t, ok)
	holder, err := redis.String(conn.Do("GET", key))
	require.NoError(t, err)
	require.Equal(t, "a", holder, "b neither renewed nor released a's lease")

	ok, err = Renew(ctx, conn, key, "a", time.Millisecond)
	require.NoError(t, err)
	require.True(t, ok)
	// Expired (PTTL -2): b acquires it.
	for {
		if n, _ := redis.Int(conn.Do("PTTL", key)); n == -2 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	ok, err = Acquire(ctx, conn, key, "b", time.Minute)
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = Release(ctx, conn, key, "b")
	require.NoError(t, err)
	require.True(t, ok)
	n, err := redis.Int(conn.Do("EXISTS", key))
	require.NoError(t, err)
	require.Zero(t, n)
}
