package cli

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/wait"
)

// gojob work on a redis+sentinel URL follows a failover: the master dies
// mid-drain of three weighted queues, the sentinels promote the replica,
// and the worker goes on there. A job pushed after the promotion runs
// within 5 s of it, and no job of the drain is lost (its pushes were
// replicated before the failover: docs/sentinel.md says what an
// unreplicated write can lose). Jobs may run twice: a move or an
// acknowledgement that had not reached the replica.
func TestWorkFollowsASentinelFailover(t *testing.T) {
	t.Parallel()
	s := redistest.StartSentinels(t, redistest.SentinelOptions{})
	pool := s.Master.Pool(t)
	queues := []string{"q1", "q2", "q3"}
	jids := pushJobs(t, pool, "Drain", "drain", 3000, queues...)
	conn := pool.Get()
	n, err := redis.Int(conn.Do("WAIT", 1, 5000))
	conn.Close()
	require.NoError(t, err)
	require.Equal(t, 1, n, "the pushes reached the replica")

	runs := newHTTPRuns(t)
	addr := freeAddr(t)
	args := []string{"--fetch", "reliable", "-c", "8", "--metrics-addr", addr, "--http", runs.arg("Drain"), "--http", runs.arg("Late")}
	for i, q := range queues {
		args = append(args, "-q", fmt.Sprintf("%s,%d", q, i+1))
	}
	w := startWorker(t, s.URL(), args...)
	wait.Within(t, 30*time.Second, "part of the drain", func() bool {
		runs.mu.Lock()
		defer runs.mu.Unlock()
		return len(runs.runs) >= 500
	})
	s.Master.Kill()
	wait.Within(t, 30*time.Second, "the sentinels to promote the replica", func() bool {
		return s.MasterAddr(t) == s.Replicas[0].Addr()
	})
	promoted := time.Now()
	late := pushJobs(t, s.Replicas[0].Pool(t), "Late", "late", 1, "q3")
	wait.Within(t, 10*time.Second, "the job pushed after the promotion", func() bool { return runs.count(late[0]) == 1 })
	took := time.Since(promoted)
	require.Less(t, took, 5*time.Second, "the job pushed after the promotion ran %s after it", took)
	wait.Within(t, 2*time.Minute, "every job of the drain to run", func() bool {
		for _, jid := range jids {
			if runs.count(jid) == 0 {
				return false
			}
		}
		return true
	})
	wait.Within(t, 10*time.Second, "/readyz 200 on the new master", func() bool { code, _ := readyz(addr); return code == 200 })
	twice := 0
	for _, jid := range jids {
		if runs.count(jid) > 1 {
			twice++
		}
	}
	require.NoError(t, w.Cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, w.Wait(), w.Logs.String())
	t.Logf("failover mid-drain: a job pushed after the promotion ran in %s; %d jobs, 0 lost, %d ran twice",
		took.Round(time.Millisecond), len(jids), twice)
}

// A redis+sentinel URL whose sentinels do not answer, or that names a
// master they do not monitor, exits 3 saying which.
func TestSentinelURLErrorsExit3(t *testing.T) {
	// Not parallel: see the note on runCLI.
	_, errOut, code := runCLI(t, "stats", "-r", "redis+sentinel://127.0.0.1:1,127.0.0.1:2/mymaster")
	require.Equal(t, exitUnreachable, code, errOut)
	require.Contains(t, errOut, "no sentinel at 127.0.0.1:1,127.0.0.1:2 answered")

	s := redistest.StartSentinels(t, redistest.SentinelOptions{Sentinels: 1})
	url := strings.Replace(s.URL(), "/"+s.Name, "/nosuchmaster", 1)
	_, errOut, code = runCLI(t, "work", "-r", url, "--exec", "X=true")
	require.Equal(t, exitUnreachable, code, errOut)
	require.Contains(t, errOut, `monitor no master named "nosuchmaster"`)

	_, errOut, code = runCLI(t, "stats", "-r", "redis+sentinel://:s3cret@127.0.0.1:1/mymaster")
	require.Equal(t, exitUnreachable, code, errOut)
	require.NotContains(t, errOut, "s3cret")

	_, errOut, code = runCLI(t, "stats", "-r", "redis+sentinel://127.0.0.1:26379/")
	require.Equal(t, exitUsage, code, errOut)
	require.Contains(t, errOut, "/MASTER")
}
