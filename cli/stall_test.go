package cli

import (
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/wait"
)

// stallFor is how long the test stops redis-server: longer than a fetch
// connection's old 12 s reply deadline.
const stallFor = 25 * time.Second

// A Redis that stalls for 25 s (SIGSTOP) in the middle of a drain loses
// no job in any fetch mode: no connection is given up on a timeout while
// its command may still run, every job runs exactly once, and the stall is
// logged once (and its end once).
func TestRedisStallLosesNoJob(t *testing.T) {
	t.Parallel()
	modes := []struct {
		name string
		args []string
	}{
		{"basic", []string{"--fetch", "basic"}},
		{"basic, a connection per slot", []string{"--fetch", "basic", "--fetch-pipeline", "1"}},
		{"batch", []string{"--fetch", "batch"}},
		{"reliable", []string{"--fetch", "reliable"}},
		{"reliable, several queues", []string{"--fetch", "reliable", "-q", "default,2", "-q", "other"}},
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			const n = 4000
			rs := redistest.StartWith(t, redistest.Options{TCP: true})
			pool := rs.Pool(t)
			jids := pushJobs(t, pool, "Stall", "stall", n)
			runs := newRunLog(t)
			w := startWorker(t, rs.URL(), append([]string{"-c", "10", "--exec", runs.execArg("Stall")}, m.args...)...)
			wait.Within(t, 60*time.Second, "a few hundred jobs to run", func() bool { return runs.total(t) >= 300 })
			require.NoError(t, rs.Pause())
			stalled := time.Now()
			// The waits below are for events; their deadlines only bound a
			// hang, and a loaded machine is far from them.
			wait.Within(t, 2*time.Minute, "the stall to be logged", func() bool {
				return w.Logs.Count("", "redis is not answering") > 0
			})
			time.Sleep(stallFor - time.Since(stalled)) // the stall itself, at least stallFor
			require.NoError(t, rs.Resume())
			wait.Within(t, 10*time.Minute, "every job to run", func() bool { return len(runs.counts(t)) == n })
			conn := pool.Get()
			defer conn.Close()
			wait.For(t, "the queue to empty", func() bool {
				q, _ := redis.Int(conn.Do("LLEN", "queue:default"))
				return q == 0
			})
			require.NoError(t, w.Cmd.Process.Signal(syscall.SIGTERM))
			require.NoError(t, w.Wait(), w.Logs.String())
			counts := runs.counts(t)
			for _, jid := range jids {
				require.Equal(t, 1, counts[jid], "%s ran %d times", jid, counts[jid])
			}
			require.Equal(t, 1, w.Logs.Count("", "redis is not answering"), w.Logs.String())
			require.Zero(t, w.Logs.Count("", "i/o timeout"), "no connection given up on a timeout:\n%s", w.Logs.String())
			require.GreaterOrEqual(t, w.Logs.Count("", "redis is back"), 1)
			t.Logf("%s: %d jobs, 0 lost, stall logged once, %s", m.name, n, strconv.Quote("redis is back"))
		})
	}
}
