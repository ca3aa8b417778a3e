package wire_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/sidekiq/wire"
)

func TestParseVersion(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]wire.Version{
		"6": wire.Version6, "7": wire.Version7, "8": wire.Version8,
		"7.1.3": {7, 1, 3}, "8.0": {8, 0, 0},
	} {
		got, err := wire.ParseVersion(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "5", "9.0.0", "x", "7.a.1", "1.2.3.4"} {
		_, err := wire.ParseVersion(bad)
		require.Error(t, err, bad)
	}
	require.True(t, wire.Version{7, 2, 1}.StrictBase64Backtrace())
	require.False(t, wire.Version{7, 2, 0}.StrictBase64Backtrace())
	require.Equal(t, "workers", wire.Version6.WorkKeySuffix())
	require.Equal(t, "work", wire.Version{6, 4, 2}.WorkKeySuffix())
}

func TestDetectVersion(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	pool := srv.Pool(t)
	ctx := context.Background()
	conn := pool.Get()
	defer conn.Close()

	v, found, err := wire.DetectVersion(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, wire.Version6, v, "no process: 6")
	require.Empty(t, found)

	add := func(id, info string) {
		_, err := conn.Do("SADD", "processes", id)
		require.NoError(t, err)
		_, err = conn.Do("HSET", id, "info", info)
		require.NoError(t, err)
	}
	add("a:1:x", `{"hostname":"a","version":"8.1.7"}`)
	add("b:2:y", `{"hostname":"b","version":"7.3.10"}`)
	_, err = conn.Do("SADD", "processes", "gone:3:z") // no hash: not live
	require.NoError(t, err)
	v, found, err = wire.DetectVersion(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, wire.Version{7, 3, 10}, v)
	require.Len(t, found, 2)

	add("c:4:w", `{"hostname":"c","tag":""}`) // 6.x reports no version
	v, _, err = wire.DetectVersion(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, wire.Version6, v)
}
