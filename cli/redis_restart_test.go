package cli

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/ordered"
	"github.com/gojob/gojob/sidekiq/wire"
)

// freeAddr returns a free 127.0.0.1 address.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

// readyz returns the status and body of a worker's /readyz.
func readyz(addr string) (int, string) {
	res, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, strings.TrimSpace(string(b))
}

// httpRuns counts the runs of jobs posted by a worker's --http handler
// (no process per job, unlike --exec).
type httpRuns struct {
	mu      sync.Mutex
	runs    map[string]int // by jid
	classes map[string]int
	srv     *httptest.Server
}

func newHTTPRuns(t *testing.T) *httpRuns {
	h := &httpRuns{runs: map[string]int{}, classes: map[string]int{}}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		j, err := wire.ParseJob(b)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		h.mu.Lock()
		h.runs[j.JID()]++
		h.classes[j.Class()]++
		h.mu.Unlock()
	}))
	t.Cleanup(h.srv.Close)
	return h
}

// arg is the --http handler of class.
func (h *httpRuns) arg(class string) string { return class + "=" + h.srv.URL }

func (h *httpRuns) ofClass(class string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.classes[class]
}

// total is the number of runs of every job.
func (h *httpRuns) total() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, c := range h.runs {
		n += c
	}
	return n
}

func (h *httpRuns) count(jid string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.runs[jid]
}

// A Redis that restarts (its data kept by its append-only file, its
// script cache empty) or flushes its script cache is survived in every
// fetch mode, with one queue and several: /readyz is 503 with a reason
// while Redis is down and 200 again after, jobs run again once Redis is
// back (a job pushed to the last queue, or, when the restart cut through a
// drain, the drain's next job: a job pushed then waits behind the rest;
// how soon is logged, a figure for a quiet machine, not an assertion),
// and with reliable fetch no job of a drain the restart cut through is
// lost, and none is left in an in-progress list at the stop.
func TestRedisRestartAndScriptFlushAreSurvived(t *testing.T) {
	t.Parallel()
	three := []string{"q1", "q2", "q3"}
	for _, c := range []struct {
		name   string
		fetch  string
		queues []string
		// drain: the restart cuts through a drain (a basic or batch fetch
		// loses a job whose reply the kill cut off: Ruby's loss, so those
		// modes restart while idle).
		drain bool
		extra []string
	}{
		{"reliable, one queue", "reliable", []string{"default"}, true, nil},
		{"reliable, three weighted queues", "reliable", three, true, nil},
		{"reliable, with cron and limits", "reliable", three, true, []string{"--cron-serve", "--cron-poll-interval", "200ms", "--limit", "Late=1", "--limit", "Tick=1"}},
		{"basic, three queues", "basic", three, false, nil},
		{"batch, three queues", "batch", three, false, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			rs := redistest.StartWith(t, redistest.Options{TCP: true, Args: []string{"--appendonly", "yes", "--appendfsync", "always"}})
			pool := rs.Pool(t)
			conn := pool.Get()
			defer conn.Close()
			runs := newHTTPRuns(t)
			addr := freeAddr(t)
			args := []string{"--fetch", c.fetch, "-c", "8", "--metrics-addr", addr,
				"--http", runs.arg("Drain"), "--http", runs.arg("Late"), "--poll-interval", "1s"}
			for i, q := range c.queues {
				args = append(args, "-q", fmt.Sprintf("%s,%d", q, i+1))
			}
			args = append(args, c.extra...)
			cron := slices.Contains(c.extra, "--cron-serve")
			if cron {
				args = append(args, "--http", runs.arg("Tick"))
				_, errOut, rc := runCLI(t, "cron", "add", "-r", rs.URL(), "--cron-layout", "v2", "--cron", "* * * * * *", "--class", "Tick", "-q", "q1", "tick")
				require.Equal(t, 0, rc, errOut)
			}
			var jids []string
			if c.drain {
				jids = pushJobs(t, pool, "Drain", "drain", 1500, c.queues...)
			}
			w := startWorker(t, rs.URL(), args...)
			wait.For(t, "ready", func() bool { code, _ := readyz(addr); return code == 200 })
			if c.drain {
				wait.Within(t, 30*time.Second, "part of the drain", func() bool {
					runs.mu.Lock()
					defer runs.mu.Unlock()
					return len(runs.runs) >= 200
				})
			}

			rs.Kill()
			wait.Within(t, 10*time.Second, "/readyz 503 while Redis is down", func() bool {
				code, body := readyz(addr)
				return code == 503 && strings.Contains(body, "redis")
			})
			_, body := readyz(addr)
			time.Sleep(2 * time.Second)
			before := runs.total()
			rs.Restart(t)
			back := time.Now()
			pool = rs.Pool(t) // the old one's connections are dead
			conn = pool.Get()
			defer conn.Close()
			late := pushJobs(t, pool, "Late", "late", 1, c.queues[len(c.queues)-1])
			if c.drain {
				// The late job waits behind what is left of the drain: the
				// bound is on the work resuming.
				wait.Within(t, 10*time.Second, "a job to run after the restart", func() bool { return runs.total() > before })
			} else {
				wait.Within(t, 10*time.Second, "the job pushed after the restart", func() bool { return runs.count(late[0]) == 1 })
			}
			took := time.Since(back)
			wait.Within(t, 30*time.Second, "the job pushed after the restart", func() bool { return runs.count(late[0]) == 1 })
			wait.Within(t, 10*time.Second, "/readyz 200 again", func() bool { code, _ := readyz(addr); return code == 200 })
			if cron {
				ticks := runs.ofClass("Tick")
				wait.Within(t, 10*time.Second, "the cron job to fire again", func() bool { return runs.ofClass("Tick") > ticks })
			}

			// An empty script cache without a restart.
			_, err := conn.Do("SCRIPT", "FLUSH")
			require.NoError(t, err)
			again := pushJobs(t, pool, "Late", "again", 1, c.queues[0])
			wait.Within(t, 5*time.Second, "a job after SCRIPT FLUSH", func() bool { return runs.count(again[0]) == 1 })

			if c.drain {
				missing := func() []string {
					var out []string
					for _, jid := range jids {
						if runs.count(jid) == 0 {
							out = append(out, jid)
						}
					}
					return out
				}
				if !wait.UntilWithin(2*time.Minute, func() bool { return len(missing()) == 0 }) {
					m := missing()
					t.Fatalf("%d jobs of the drain never ran: %s", len(m), whereAre(t, conn, m))
				}
			}
			require.NoError(t, w.Cmd.Process.Signal(syscall.SIGTERM))
			require.NoError(t, w.Wait(), w.Logs.String())
			require.NotContains(t, w.Logs.String(), "at_stop=true", "every finished job was acknowledged: nothing is left to requeue at stop")
			outages := w.Logs.Count("", "redis unavailable")
			require.GreaterOrEqual(t, outages, 1)
			require.LessOrEqual(t, outages, 2, "the outage is logged once (a second line may come from the restart's stale connections):\n%s", w.Logs.String())
			t.Logf("%s: /readyz during the outage: %q; jobs ran again %s after the restart; %d jobs drained, 0 lost",
				c.name, body, took.Round(time.Millisecond), len(jids))
		})
	}
}

// The ordered worker survives a Redis restart and a flushed script cache
// too: its scripts are loaded again, and the jobs of a key still run in
// order.
func TestOrderedWorkerSurvivesARedisRestart(t *testing.T) {
	t.Parallel()
	rs := redistest.StartWith(t, redistest.Options{TCP: true, Args: []string{"--appendonly", "yes", "--appendfsync", "always"}})
	out := filepath.Join(t.TempDir(), "out")
	ran := func() string { b, _ := os.ReadFile(out); return string(b) }
	client, err := ordered.NewClient(&ordered.ClientConfig{Pool: rs.Pool(t)})
	require.NoError(t, err)
	push := func(arg string) {
		job, err := wire.NewJob("Ord", arg)
		require.NoError(t, err)
		job.SetQueue("ord")
		_, err = client.Push(context.Background(), job, &ordered.PushOpts{Key: "k1"})
		require.NoError(t, err)
	}
	w := startOrderedWork(t, gojobBinary(t), rs.URL(), nil, "--exec", `Ord=read -r p; echo "$p" >> `+out, "ord")
	push("o1")
	wait.Within(t, 10*time.Second, "the first job", func() bool { return strings.Contains(ran(), `"o1"`) })
	rs.Kill()
	time.Sleep(time.Second)
	rs.Restart(t)
	client, err = ordered.NewClient(&ordered.ClientConfig{Pool: rs.Pool(t)})
	require.NoError(t, err)
	push("o2")
	conn, err := rs.Dial()
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.Do("SCRIPT", "FLUSH")
	require.NoError(t, err)
	push("o3")
	wait.Within(t, 15*time.Second, "the jobs pushed after the restart", func() bool {
		r := ran()
		return strings.Contains(r, `"o2"`) && strings.Contains(r, `"o3"`)
	})
	require.Less(t, strings.Index(ran(), `"o2"`), strings.Index(ran(), `"o3"`), "in push order")
	require.NoError(t, w.Cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, w.Wait(), w.Logs.String())
}

// whereAre says in which lists of Redis the jobs jids are (a test's
// failure message).
func whereAre(t *testing.T, conn redis.Conn, jids []string) string {
	t.Helper()
	keys, err := redis.Strings(conn.Do("KEYS", "*"))
	require.NoError(t, err)
	var out []string
	for _, jid := range jids {
		where := "nowhere"
		for _, k := range keys {
			typ, _ := redis.String(conn.Do("TYPE", k))
			var vals []string
			switch typ {
			case "list":
				vals, _ = redis.Strings(conn.Do("LRANGE", k, 0, -1))
			case "zset":
				vals, _ = redis.Strings(conn.Do("ZRANGE", k, 0, -1))
			}
			for _, v := range vals {
				if strings.Contains(v, `"`+jid+`"`) {
					where = k
				}
			}
		}
		out = append(out, jid+" in "+where)
	}
	return strings.Join(out, "; ")
}
