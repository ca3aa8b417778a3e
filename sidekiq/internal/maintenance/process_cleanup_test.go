package maintenance

import (
	"context"
	"testing"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/sidekiq/wire"
)

// 6.4's poller prunes dead processes through ProcessSet.new(true) on its
// first process count and every tenth after, without the process_cleanup
// lock (6.5.2+), and has no cleanup at the end of the initial wait
// (6.5.7+). A 6.4 process never writes the process_cleanup key.
func TestProcessCleanupPerVersion(t *testing.T) {
	t.Parallel()
	for _, v := range []wire.Version{wire.Version6, wire.Version7} {
		t.Run(v.String(), func(t *testing.T) {
			rs := redistest.Start(t)
			pool := rs.Pool(t)
			conn := pool.Get()
			defer conn.Close()
			c, err := NewProcessCleaner(&ProcessCleanerConfig{Pool: pool, Format: contract.FixedFormat(v), Logger: zerolog.New(zerolog.NewTestWriter(t))})
			require.NoError(t, err)
			ctx := context.Background()
			_, err = conn.Do("SADD", contract.KeyProcesses, "dead1", "live1")
			require.NoError(t, err)
			_, err = conn.Do("HSET", "live1", "info", "{}")
			require.NoError(t, err)
			res, err := c.runOnce(ctx)
			require.NoError(t, err)
			require.Equal(t, v.AtLeast(6, 5, 7), res.Ran)
			n, err := c.count(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, n)
			members, _ := redis.Strings(conn.Do("SMEMBERS", contract.KeyProcesses))
			lock, _ := redis.Int(conn.Do("EXISTS", contract.KeyProcessCleanup))
			require.Equal(t, []string{"live1"}, members, "dead1 pruned")
			if v.AtLeast(6, 5, 2) {
				require.Equal(t, 1, lock)
				return
			}
			require.Zero(t, lock, "6.4 has no process_cleanup lock")
			_, err = conn.Do("SADD", contract.KeyProcesses, "dead2")
			require.NoError(t, err)
			for i := 1; i < 10; i++ {
				_, err := c.count(ctx)
				require.NoError(t, err)
			}
			n, _ = redis.Int(conn.Do("SISMEMBER", contract.KeyProcesses, "dead2"))
			require.Equal(t, 1, n, "calls 1-9 only count")
			_, err = c.count(ctx)
			require.NoError(t, err)
			n, _ = redis.Int(conn.Do("SISMEMBER", contract.KeyProcesses, "dead2"))
			require.Zero(t, n, "the tenth call prunes")
		})
	}
}
