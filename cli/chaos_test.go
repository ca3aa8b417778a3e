package cli

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/wait"
)

// envInt reads a test size from the environment (make chaos sets them).
func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// SIGKILL a running `gojob work` (reliable fetch, the default) at random
// moments of a drain: every job runs at least once, and only jobs that were
// in the killed process's in-progress list (in flight at the kill) run
// again. Each new process recovers its dead predecessor's list at start
// (same host, pid gone). A job that was in flight at --max-recoveries (3)
// kills is a poison pill: it goes to the dead set, and no other job does.
// It runs with one queue and with ten weighted ones. GOJOB_CHAOS_JOBS and
// GOJOB_CHAOS_KILLS size it (make chaos: 100,000 and 20; with 20 kills a
// recovered job, which runs first in the next process, is now and then in
// flight at three kills in a row).
func TestKillDuringDrainLosesNoJob(t *testing.T) {
	t.Parallel()
	var weighted []string
	for i := range 10 {
		weighted = append(weighted, fmt.Sprintf("chaos-%d", i+1))
	}
	for _, queues := range [][]string{{"default"}, weighted} {
		t.Run(fmt.Sprintf("%d queues", len(queues)), func(t *testing.T) {
			t.Parallel()
			killDuringDrain(t, queues)
		})
	}
}

func killDuringDrain(t *testing.T, queues []string) {
	n := envInt("GOJOB_CHAOS_JOBS", 3000)
	kills := envInt("GOJOB_CHAOS_KILLS", 3)
	conc := envInt("GOJOB_CHAOS_CONCURRENCY", 10)
	rs := redistest.StartWith(t, redistest.Options{TCP: true})
	pool := rs.Pool(t)
	conn := pool.Get()
	defer conn.Close()
	jids := pushJobs(t, pool, "Chaos", "chaos", n, queues...)
	runs := newRunLog(t)
	args := []string{"-c", strconv.Itoa(conc), "--exec", runs.execArg("Chaos")}
	for i, q := range queues {
		if len(queues) == 1 {
			args = append(args, "-q", q)
		} else {
			args = append(args, "-q", fmt.Sprintf("%s,%d", q, i+1))
		}
	}
	start := time.Now()
	inflight := map[string]int{}
	killedInFlight := 0
	for k := 0; k < kills; k++ {
		w := startWorker(t, rs.URL(), args...)
		id := w.Identity(t)
		before := runs.total(t)
		step := rand.IntN(max(n/(2*kills), 50)) + 20
		wait.Within(t, 60*time.Second, "progress before the kill", func() bool { return runs.total(t) >= before+step })
		require.NoError(t, w.Cmd.Process.Signal(syscall.SIGKILL))
		w.Wait()
		// Nothing else recovers until the next process starts: the killed
		// process's list holds exactly the jobs in flight at the kill.
		for _, jid := range workingJIDs(t, conn, id) {
			inflight[jid]++
			killedInFlight++
		}
	}
	final := startWorker(t, rs.URL(), args...)
	wait.Within(t, 10*time.Minute, "every job to run or be buried", func() bool {
		if len(runs.counts(t)) == n {
			return true
		}
		// A poison pill may have been killed each time before it started.
		ran := runs.counts(t)
		buried := 0
		for jid := range deadJIDs(t, conn) {
			if ran[jid] == 0 {
				buried++
			}
		}
		return len(ran)+buried == n
	})
	wait.For(t, "the queues and the in-progress lists to empty", func() bool {
		left := 0
		for _, name := range queues {
			q, _ := redis.Int(conn.Do("LLEN", "queue:"+name))
			left += q
		}
		lists, _ := redis.Strings(conn.Do("KEYS", "working:*"))
		if left != 0 || len(lists) != 0 {
			t.Logf("queues %d, lists %v", left, lists)
			return false
		}
		return true
	})
	require.NoError(t, final.Cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, final.Wait(), final.Logs.String())

	counts := runs.counts(t)
	dead := deadJIDs(t, conn)
	again := 0
	pills := map[string]bool{}
	for _, jid := range jids {
		c := counts[jid]
		if inflight[jid] < maxRecoveries {
			recoveries, _ := redis.Int(conn.Do("GET", contract.RecoveryCountKey(jid)))
			require.GreaterOrEqual(t, c, 1, "%s never ran (in flight at %d kills, recovered %d times, in the dead set: %v)",
				jid, inflight[jid], recoveries, dead[jid])
		}
		require.LessOrEqual(t, c, 1+inflight[jid], "%s ran %d times but was in flight at %d kills", jid, c, inflight[jid])
		again += max(c-1, 0)
		if inflight[jid] >= maxRecoveries {
			pills[jid] = true
			require.LessOrEqual(t, c, inflight[jid], "poison pill %s ran after its burial", jid)
		}
	}
	pushed := map[string]bool{}
	for _, jid := range jids {
		pushed[jid] = true
	}
	for jid := range counts {
		require.True(t, pushed[jid], "%s ran but was never pushed", jid)
	}
	require.Positive(t, killedInFlight, "the kills hit jobs in flight")
	buried := deadJIDs(t, conn)
	require.Equal(t, pills, buried, "the dead set holds exactly the jobs in flight at %d kills", maxRecoveries)
	t.Logf("chaos: %d jobs in %d queues, %d kills at -c %d in %.1f s: 0 lost, %d in flight at the kills, %d ran again, %d poison pills",
		n, len(queues), kills, conc, time.Since(start).Seconds(), killedInFlight, again, len(buried))
}

// maxRecoveries is gojob work's default --max-recoveries.
const maxRecoveries = 3

// deadJIDs returns the jids in the dead set; each must be a poison pill.
func deadJIDs(t *testing.T, conn redis.Conn) map[string]bool {
	t.Helper()
	dead, err := redis.ByteSlices(conn.Do("ZRANGE", "dead", 0, -1))
	require.NoError(t, err)
	jids := map[string]bool{}
	for _, raw := range dead {
		var j struct {
			JID        string `json:"jid"`
			ErrorClass string `json:"error_class"`
		}
		require.NoError(t, json.Unmarshal(raw, &j))
		require.Equal(t, "Gojob::PoisonPill", j.ErrorClass, "%s", raw)
		jids[j.JID] = true
	}
	return jids
}
