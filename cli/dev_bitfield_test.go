package cli

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/testlog"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/api"
)

// gojob dev's BITFIELD answers as a real redis-server does, call for call:
// Sidekiq's histogram writes and reads, and the edges (signed fields,
// offsets across bytes, each OVERFLOW mode, a key with an expiry).
func TestDevBitfieldMatchesRedis(t *testing.T) {
	t.Parallel()
	real := redistest.Start(t)
	rc, err := real.Dial()
	require.NoError(t, err)
	defer rc.Close()
	mr := miniredis.RunT(t)
	require.NoError(t, registerBitfield(mr))
	mc, err := redis.Dial("tcp", mr.Addr())
	require.NoError(t, err)
	defer mc.Close()

	calls := [][]any{
		{"BITFIELD", "h", "OVERFLOW", "SAT", "INCRBY", "u16", "#0", 3, "INCRBY", "u16", "#25", 70000},
		{"BITFIELD", "h", "GET", "u16", "#0", "GET", "u16", "#1", "GET", "u16", "#25", "GET", "u16", "#40"},
		{"BITFIELD", "h", "OVERFLOW", "SAT", "INCRBY", "u16", "#0", -10},
		{"BITFIELD", "h", "INCRBY", "u16", "#0", -1},
		{"BITFIELD", "h", "OVERFLOW", "FAIL", "INCRBY", "u8", "3", 300, "GET", "u8", "3"},
		{"BITFIELD", "s", "SET", "i5", "3", -7, "GET", "i5", "3", "GET", "u8", "0", "INCRBY", "i5", "3", -20},
		{"BITFIELD", "s", "OVERFLOW", "SAT", "SET", "i8", "#2", 500, "GET", "i8", "#2", "SET", "u63", "64", 123456789012},
		{"BITFIELD", "s", "GET", "u63", "64", "GET", "i64", "0", "OVERFLOW", "WRAP", "INCRBY", "i64", "0", 9223372036854775807},
		{"GET", "s"},
		{"GET", "h"},
		{"BITFIELD", "nokey", "GET", "u16", "#3"},
		{"SET", "ttl", "x", "EX", 100},
		{"BITFIELD", "ttl", "INCRBY", "u4", "0", 1},
	}
	for _, call := range calls {
		want, wantErr := rc.Do(call[0].(string), call[1:]...)
		got, gotErr := mc.Do(call[0].(string), call[1:]...)
		require.Equal(t, wantErr, gotErr, "%v", call)
		require.Equal(t, want, got, "%v", call)
	}
	require.Greater(t, mr.TTL("ttl"), 90*time.Second, "the expiry stays")
	for _, bad := range [][]any{
		{"h", "GET", "u64", "0"},
		{"h", "GET", "x8", "0"},
		{"h", "OVERFLOW", "NOPE", "GET", "u8", "0"},
		{"h", "INCRBY", "u8", "0"},
		{"h", "FROB", "u8", "0"},
	} {
		_, err := mc.Do("BITFIELD", bad...)
		require.Error(t, err, "%v", bad)
	}
}

// gojob dev writes a format whose job metrics the dashboard shows, the
// execution-time histogram included (BITFIELD on the embedded server), and
// its first screen at info level carries no fetch internals.
func TestDevWritesJobMetrics(t *testing.T) {
	// Not parallel: see the note on runCLI.
	ctx, cancel := context.WithCancel(context.Background())
	out, errb := testlog.New(nil), testlog.New(nil)
	done := make(chan int)
	go func() {
		done <- Run(ctx, []string{"gojob", "dev", "--addr", "127.0.0.1:0", "--web-addr", "off"}, out, errb)
	}()
	defer func() {
		cancel()
		require.Equal(t, exitOK, <-done)
	}()
	var url string
	wait.Within(t, 20*time.Second, "dev to print its URL", func() bool {
		m := exportRE.FindStringSubmatch(out.String())
		if m != nil {
			url = m[1]
		}
		return url != ""
	})
	pool, err := sidekiq.NewPool(url)
	require.NoError(t, err)
	defer pool.Close()
	admin, err := api.New(&api.Config{Pool: pool})
	require.NoError(t, err)
	// The metrics are flushed with the heartbeat (every 10 s in a 7.x format).
	wait.Within(t, 40*time.Second, "DemoJob's metrics and histogram", func() bool {
		m, err := admin.JobMetrics(ctx, 60, "DemoJob")
		require.NoError(t, err, "the class page's read, BITFIELD included")
		var runs int64
		for _, n := range m.Histogram {
			runs += n
		}
		return runs == 3
	})
	require.Contains(t, errb.String(), "7.3.10 for all readers")
	require.NotContains(t, errb.String(), "CLIENT ID")
}
