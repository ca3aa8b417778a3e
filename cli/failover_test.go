package cli

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq/wire"
)

// slowRuns counts the runs of jobs posted by a worker's --http handler,
// each taking d, so that a drain is still under way when Redis fails.
type slowRuns struct {
	mu   sync.Mutex
	runs map[string]int
	n    int
	srv  *httptest.Server
}

func newSlowRuns(t *testing.T, d time.Duration) *slowRuns {
	h := &slowRuns{runs: map[string]int{}}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		j, err := wire.ParseJob(b)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		time.Sleep(d)
		h.mu.Lock()
		h.runs[j.JID()]++
		h.n++
		h.mu.Unlock()
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *slowRuns) arg(class string) string { return class + "=" + h.srv.URL }

func (h *slowRuns) total() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

func (h *slowRuns) count(jid string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.runs[jid]
}

// missing returns how many of jids have not run.
func (h *slowRuns) missing(jids []string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, jid := range jids {
		if h.runs[jid] == 0 {
			n++
		}
	}
	return n
}

func (h *slowRuns) twice(jids []string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, jid := range jids {
		if h.runs[jid] > 1 {
			n++
		}
	}
	return n
}

// A live worker survives a Sentinel promotion without stranding a job: the
// master is killed (or demoted by SENTINEL FAILOVER, which keeps the
// worker's connections open to what is now a replica) mid-drain of 1,500
// jobs at -c 10, and after the promotion the worker checks its own
// in-progress lists on the new master (a move or an acknowledgement the
// replica had not received leaves a job there that no slot runs) and gives
// back what no slot holds. Every job runs within 30 s of the promotion, no
// job is left in an in-progress list, at most 40 run twice (those in flight
// at the failover), and a clean stop leaves nothing behind.
func TestFailoverMidDrainStrandsNoJob(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"master killed", "SENTINEL FAILOVER"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			s := redistest.StartSentinels(t, redistest.SentinelOptions{})
			pool := s.Master.Pool(t)
			jids := pushJobs(t, pool, "Drain", "fo", 1500, "drain")
			conn := pool.Get()
			n, err := redis.Int(conn.Do("WAIT", 1, 5000))
			conn.Close()
			require.NoError(t, err)
			require.Equal(t, 1, n, "the pushes reached the replica")

			runs := newSlowRuns(t, 10*time.Millisecond)
			addr := freeAddr(t)
			w := startWorker(t, s.URL(), "--fetch", "reliable", "-c", "10", "-q", "drain", "--metrics-addr", addr, "--http", runs.arg("Drain"))
			wait.Within(t, 60*time.Second, "part of the drain", func() bool { return runs.total() >= 300 })
			if how == "master killed" {
				s.Master.Kill()
			} else {
				// The old master takes writes until the sentinels announce
				// the new one (about a second after the promotion): a job
				// moved there meanwhile is still queued on the new master and
				// runs again. A master that refuses writes once no replica
				// follows it (docs/sentinel.md) leaves no such window.
				mc := pool.Get()
				_, err := mc.Do("CONFIG", "SET", "min-replicas-to-write", "1")
				mc.Close()
				require.NoError(t, err)
				c, err := redis.Dial("tcp", s.Addrs[0])
				require.NoError(t, err)
				_, err = c.Do("SENTINEL", "FAILOVER", s.Name)
				c.Close()
				require.NoError(t, err)
			}
			wait.Within(t, 60*time.Second, "the sentinels to promote the replica", func() bool {
				return s.MasterAddr(t) == s.Replicas[0].Addr()
			})
			promoted := time.Now()
			wait.Within(t, 3*time.Minute, "every job of the drain to run", func() bool { return runs.missing(jids) == 0 })
			took := time.Since(promoted)
			nc := s.Replicas[0].Pool(t).Get()
			defer nc.Close()
			wait.Within(t, time.Minute, "the in-progress lists to empty", func() bool {
				return len(redistest.InProgress(t, nc, "")) == 0
			})
			wait.Within(t, 30*time.Second, "the log to name the failover", func() bool {
				return strings.Contains(w.Logs.String(), "master changed")
			})
			twice := runs.twice(jids)
			t.Logf("%s mid-drain of %d at -c 10: every job ran %s after the promotion, %d twice",
				how, len(jids), took.Round(time.Millisecond), twice)
			require.Less(t, took, 30*time.Second, "every job ran within 30 s of the promotion")
			require.LessOrEqual(t, twice, 40, "jobs run twice")
			require.NoError(t, w.Cmd.Process.Signal(syscall.SIGTERM))
			require.NoError(t, w.Wait(), w.Logs.String())
			require.Empty(t, redistest.InProgress(t, nc, ""))
			q, err := redis.Int(nc.Do("LLEN", "queue:drain"))
			require.NoError(t, err)
			require.Zero(t, q)
		})
	}
}

// A busy worker whose Redis restarts empty (no persistence), three times
// in a row, resumes within 2 s each time: a job pushed once Redis is back
// runs within 2 s, /readyz is 503 while Redis is down and 200 after, and
// the log says that Redis lost its data (and not that this process was
// stopped for a minute).
func TestEmptyRestartsUnderABusyWorker(t *testing.T) {
	t.Parallel()
	rs := redistest.StartWith(t, redistest.Options{TCP: true})
	pool := rs.Pool(t)
	runs := newSlowRuns(t, 20*time.Millisecond)
	addr := freeAddr(t)
	w := startWorker(t, rs.URL(), "--fetch", "reliable", "-c", "10", "-q", "busy", "-q", "late",
		"--metrics-addr", addr, "--http", runs.arg("Drain"), "--http", runs.arg("Late"))
	wait.Within(t, 30*time.Second, "ready", func() bool { code, _ := readyz(addr); return code == 200 })
	var took []time.Duration
	for round := range 3 {
		pushJobs(t, pool, "Drain", fmt.Sprintf("busy%d-", round), 1000, "busy")
		before := runs.total()
		wait.Within(t, 30*time.Second, "the drain to be under way", func() bool { return runs.total() >= before+50 })
		rs.Kill()
		wait.Within(t, 30*time.Second, "/readyz 503 while Redis is down", func() bool {
			code, body := readyz(addr)
			return code == 503 && strings.Contains(body, "redis")
		})
		rs.Restart(t)
		back := time.Now()
		pool = rs.Pool(t)
		// A busy queue again, and one job to time.
		pushJobs(t, pool, "Drain", fmt.Sprintf("again%d-", round), 200, "busy")
		late := pushJobs(t, pool, "Late", fmt.Sprintf("late%d-", round), 1, "late")
		wait.Within(t, time.Minute, "the job pushed after the restart", func() bool { return runs.count(late[0]) == 1 })
		took = append(took, time.Since(back))
		wait.Within(t, 30*time.Second, "/readyz 200 again", func() bool { code, _ := readyz(addr); return code == 200 })
	}
	t.Logf("three empty restarts under a busy worker: a job pushed after each ran %v after Redis was back", took)
	for i, d := range took {
		require.Less(t, d, 2*time.Second, "restart %d: the job pushed after it ran %s after Redis was back", i+1, d)
	}
	wait.Within(t, 30*time.Second, "the log to name each restart", func() bool {
		return w.Logs.Count("", "redis lost its data")+w.Logs.Count("", "redis master changed") >= 3
	})
	require.GreaterOrEqual(t, w.Logs.Count("", "redis lost its data"), 1, "the log says Redis lost its data")
	require.NotContains(t, w.Logs.String(), "was it stopped for a minute")
	require.NoError(t, w.Cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, w.Wait(), w.Logs.String())
}
