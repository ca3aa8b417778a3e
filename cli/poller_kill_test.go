package cli

import (
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq/wire"
)

// SIGKILL `gojob work` again and again while its poller moves due jobs
// from the schedule and retry sets to their queue: every job ends in its
// queue exactly once. A member leaves its set only as its job enters the
// queue, so no kill lands while a job is only in the poller's memory.
// GOJOB_POLLER_JOBS and GOJOB_POLLER_KILLS size it.
func TestKillDuringPollerMovesLosesNoJob(t *testing.T) {
	t.Parallel()
	n := envInt("GOJOB_POLLER_JOBS", 60000)
	kills := envInt("GOJOB_POLLER_KILLS", 10)
	rs := redistest.StartWith(t, redistest.Options{TCP: true})
	pool := rs.Pool(t)
	conn := pool.Get()
	defer conn.Close()
	due := float64(time.Now().Add(-time.Hour).Unix())
	for i := 0; i < n; i++ {
		set := contract.KeySchedule
		if i%2 == 1 {
			set = contract.KeyRetry
		}
		conn.Send("ZADD", set, due+float64(i)/1000,
			fmt.Sprintf(`{"retry":true,"queue":"moved","class":"Moved","args":[%d],"jid":"moved%06d","created_at":%.3f}`, i, i, due))
		if i%1000 == 999 {
			_, err := conn.Do("")
			require.NoError(t, err)
		}
	}
	_, err := conn.Do("")
	require.NoError(t, err)
	queued := func() int {
		q, err := redis.Int(conn.Do("LLEN", "queue:moved"))
		require.NoError(t, err)
		return q
	}
	// The worker fetches from another queue: the poller's moves are all it
	// does with these jobs.
	args := []string{"-q", "elsewhere", "--poll-interval", "50ms"}
	landed := 0
	for k := 0; k < kills && queued() < n; k++ {
		w := startWorker(t, rs.URL(), args...)
		before := queued()
		step := 200 + rand.IntN(max(n/(2*kills), 1))
		wait.Within(t, 60*time.Second, "the poller moving jobs", func() bool { return queued() >= min(before+step, n) })
		require.NoError(t, w.Cmd.Process.Signal(syscall.SIGKILL))
		w.Wait()
		if queued() < n {
			landed++
		}
	}
	final := startWorker(t, rs.URL(), args...)
	wait.Within(t, 5*time.Minute, "the retry and schedule sets to empty", func() bool {
		left := 0
		for _, set := range []string{contract.KeySchedule, contract.KeyRetry} {
			c, err := redis.Int(conn.Do("ZCARD", set))
			require.NoError(t, err)
			left += c
		}
		return left == 0
	})
	require.NoError(t, final.Cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, final.Wait(), final.Logs.String())

	raws, err := redis.ByteSlices(conn.Do("LRANGE", "queue:moved", 0, -1))
	require.NoError(t, err)
	seen := map[string]int{}
	for _, raw := range raws {
		j, err := wire.ParseJob(raw)
		require.NoError(t, err)
		seen[j.JID()]++
	}
	require.Len(t, seen, n, "every job in its queue")
	for jid, c := range seen {
		require.Equal(t, 1, c, "%s pushed %d times", jid, c)
	}
	for _, set := range []string{contract.KeySchedule, contract.KeyRetry, contract.KeyDead} {
		left, err := redis.Int(conn.Do("ZCARD", set))
		require.NoError(t, err)
		require.Zero(t, left, set)
	}
	require.Positive(t, landed, "kills landed while the poller was moving")
	t.Logf("poller: %d due jobs, %d kills during the moves: 0 lost, 0 twice", n, landed)
}
