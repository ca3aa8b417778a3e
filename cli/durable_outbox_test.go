package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/durable"
	"github.com/gojob/gojob/internal/gojobtest"
	"github.com/gojob/gojob/internal/pgtest"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/rubytest"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq/wire"
)

// gojobCmd runs the gojob binary with a clean durable environment and
// returns its stdout, stderr and exit code.
func gojobCmd(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	return gojobStdin(t, "", args...)
}

type durableCounts struct {
	Total, Waiting, Missing, Overdue, ToPush int64
}

func durableStatusOf(t *testing.T, db string) durableCounts {
	t.Helper()
	out, errOut, code := gojobCmd(t, "durable", "status", "--db", db, "--json")
	require.Zero(t, code, errOut)
	var st struct {
		Databases []struct {
			Total   int64 `json:"total"`
			Waiting int64 `json:"waiting"`
			Missing int64 `json:"missing"`
			Overdue int64 `json:"overdue"`
			ToPush  int64 `json:"to_push"`
		} `json:"databases"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &st), out)
	d := st.Databases[0]
	return durableCounts{d.Total, d.Waiting, d.Missing, d.Overdue, d.ToPush}
}

// A job pushed with `gojob push --durable` has its row, runs under it, and
// is reconciled like any other when Redis loses it; a worker with
// --durable-adopt writes the row of a job pushed without one.
func TestPushDurableWritesRow(t *testing.T) {
	t.Parallel()
	rs := redistest.StartWith(t, redistest.Options{TCP: true})
	db := "sqlite:" + filepath.Join(t.TempDir(), "d.db")
	conn := rs.Pool(t).Get()
	defer conn.Close()

	_, errOut, code := gojobCmd(t, "push", "-r", rs.URL(), "-q", "dq", "--durable", "--key", "k", "Dur", "0")
	require.Equal(t, exitUsage, code, errOut)

	// A database that cannot take the row: nothing is pushed.
	_, errOut, code = gojobCmd(t, "push", "-r", rs.URL(), "-q", "dq", "--durable", "--durable-db", "sqlite:/nonexistent-gojob-dir/d.db", "Dur", "0")
	require.Equal(t, exitFailed, code, errOut)
	require.Contains(t, errOut, "nothing pushed")
	n, err := redis.Int(conn.Do("LLEN", "queue:dq"))
	require.NoError(t, err)
	require.Zero(t, n)

	out, errOut, code := gojobCmd(t, "push", "-r", rs.URL(), "-q", "dq", "--durable", "--durable-db", db, "--durable-extension", "1s", "Dur", "1")
	require.Zero(t, code, errOut)
	require.Contains(t, out, "pushed ")
	// One row, for a queued job: waiting, or overdue once its 1 s
	// extension has passed, which a loaded machine may take to ask.
	st := durableStatusOf(t, db)
	require.Equal(t, int64(1), st.Waiting+st.Overdue, "%+v", st)
	st.Waiting, st.Overdue = 0, 0
	require.Equal(t, durableCounts{Total: 1}, st)

	// Redis loses the job: the reconciler strikes the row, then kills it
	// into the dead set, as it does for a row the client middleware wrote.
	_, err = conn.Do("DEL", "queue:dq")
	require.NoError(t, err)
	time.Sleep(1100 * time.Millisecond) // the row's 1 s extension
	_, errOut, code = gojobCmd(t, "durable", "poll", "-r", rs.URL(), "--db", db, "--extension", "1s")
	require.Zero(t, code, errOut)
	require.Equal(t, int64(1), durableStatusOf(t, db).Missing)
	time.Sleep(1100 * time.Millisecond)
	out, errOut, code = gojobCmd(t, "durable", "poll", "-r", rs.URL(), "--db", db, "--extension", "1s")
	require.Zero(t, code, errOut)
	require.Contains(t, out, "moved to the dead set:")
	dead, err := redis.Int(conn.Do("ZCARD", "dead"))
	require.NoError(t, err)
	require.Equal(t, 1, dead)

	// A pushed job runs under its row (no "no row found"), which its
	// success deletes; with --durable-adopt a job pushed without a row gets
	// one.
	_, errOut, code = gojobCmd(t, "push", "-r", rs.URL(), "-q", "dq", "--durable", "--durable-db", db, "Dur", "2")
	require.Zero(t, code, errOut)
	_, errOut, code = gojobCmd(t, "push", "-r", rs.URL(), "-q", "dq", "Dur", "3")
	require.Zero(t, code, errOut)
	seen := filepath.Join(t.TempDir(), "seen")
	w := startWorker(t, rs.URL(), "-q", "dq", "--durable", "--durable-db", db, "--durable-class", "Dur", "--durable-adopt",
		"--exec", "Dur=sh -c 'cat >> "+seen+"; echo >> "+seen+"'")
	wait.Within(t, 30*time.Second, "both jobs to run", func() bool {
		b, _ := os.ReadFile(seen)
		return strings.Count(string(b), "\n") >= 2
	})
	wait.Within(t, 30*time.Second, "the rows to be deleted", func() bool { return durableStatusOf(t, db).Total == 0 })
	require.NoError(t, w.Cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, w.Wait(), w.Logs.String())
	require.NotContains(t, w.Logs.String(), "no row found")
}

// 1,000 outbox rows, written by Go (pgx) and by Ruby (Sequel, the Rails
// example) in transactions of which half roll back, while the relay
// pushing them is killed with SIGKILL midway and two others take over: each
// committed job is pushed once and runs once, no rolled-back job exists,
// and every row ends deleted by its job's success.
func TestOutboxKillRelayPushesCommittedOnce(t *testing.T) {
	t.Parallel()
	rubytest.Require(t)
	urls, drop, err := pgtest.Create("gojob_cli_outbox", 1)
	require.NoError(t, err)
	t.Cleanup(drop)
	db := urls[0]
	rs := redistest.StartWith(t, redistest.Options{TCP: true})
	conn := rs.Pool(t).Get()
	defer conn.Close()
	_, errOut, code := gojobCmd(t, "durable", "migrate", "--db", db)
	require.Zero(t, code, errOut)
	queued := func() int {
		n, err := redis.Int(conn.Do("LLEN", "queue:outbox"))
		require.NoError(t, err)
		return n
	}
	startRelay := func() *workerProc {
		cmd := exec.Command(gojobBinary(t), "durable", "relay", "-r", rs.URL(), "--sidekiq-version", "7", "--db", db, "--lease", "2s")
		cmd.Env = append(os.Environ(), "DATABASE_URL=", "DURABLE_JOB_SERVER_URLS=")
		return gojobtest.StartCmd(t, cmd)
	}
	first := startRelay()

	// The producers write while the relays push.
	var mu sync.Mutex
	var committed []string
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // Go: 50 transactions of 10 rows
		defer wg.Done()
		d, err := durable.New(&durable.Config{URLs: []string{db}})
		if !assertNoError(t, err) {
			return
		}
		defer d.Close()
		ctx := context.Background()
		pc, err := pgx.Connect(ctx, db)
		if !assertNoError(t, err) {
			return
		}
		defer pc.Close(ctx)
		outbox := durable.PgxOutbox(d)
		for tx := range 50 {
			p, err := pc.Begin(ctx)
			if !assertNoError(t, err) {
				return
			}
			var jids []string
			for i := range 10 {
				j, _ := wire.NewJob("OutboxJob", "go", tx, i)
				j.SetQueue("outbox")
				if !assertNoError(t, outbox.Enqueue(ctx, p, j)) {
					return
				}
				jids = append(jids, j.JID())
			}
			if tx%2 == 1 {
				assertNoError(t, p.Rollback(ctx))
				continue
			}
			if assertNoError(t, p.Commit(ctx)) {
				mu.Lock()
				committed = append(committed, jids...)
				mu.Unlock()
			}
		}
	}()
	go func() { // Ruby: the same through examples/rails-outbox
		defer wg.Done()
		cmd := exec.Command("ruby", "../examples/rails-outbox/outbox_demo.rb")
		cmd.Env = append(os.Environ(), "DATABASE_URL="+db, "COUNT=500", "BATCH=10", "QUEUE=outbox")
		out, err := cmd.Output()
		if ee, ok := err.(*exec.ExitError); ok {
			t.Errorf("ruby: %v\n%s", err, ee.Stderr)
			return
		}
		if !assertNoError(t, err) {
			return
		}
		mu.Lock()
		committed = append(committed, strings.Fields(string(out))...)
		mu.Unlock()
	}()
	wait.Within(t, 60*time.Second, "the first relay to push 100 jobs", func() bool { return queued() >= 100 })
	require.NoError(t, first.Cmd.Process.Signal(syscall.SIGKILL))
	first.Wait()
	killedAt := queued()
	// Two relays at once take over: they share the rows.
	second, third := startRelay(), startRelay()
	wg.Wait()
	require.False(t, t.Failed())
	require.Len(t, committed, 500)
	wait.Within(t, 60*time.Second, "every committed row to be pushed", func() bool { return durableStatusOf(t, db).ToPush == 0 })
	for _, r := range []*workerProc{second, third} {
		require.NoError(t, r.Cmd.Process.Signal(syscall.SIGTERM))
		require.NoError(t, r.Wait(), r.Logs.String())
	}
	t.Logf("first relay killed with %d jobs pushed", killedAt)

	raws, err := redis.ByteSlices(conn.Do("LRANGE", "queue:outbox", 0, -1))
	require.NoError(t, err)
	var pushed []string
	for _, raw := range raws {
		j, err := wire.ParseJob(raw)
		require.NoError(t, err)
		pushed = append(pushed, j.JID())
	}
	slices.Sort(pushed)
	slices.Sort(committed)
	require.Equal(t, committed, pushed, "each committed job pushed once, no rolled-back one")

	// They run once each, and their rows go as they succeed.
	var runMu sync.Mutex
	runs := map[string]int{}
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		runMu.Lock()
		runs[r.Header.Get("X-Gojob-Jid")]++
		runMu.Unlock()
	}))
	defer web.Close()
	w := startWorker(t, rs.URL(), "-q", "outbox", "-c", "10", "--http", "OutboxJob="+web.URL,
		"--durable", "--durable-db", db, "--durable-class", "OutboxJob")
	wait.Within(t, 120*time.Second, "the jobs to run", func() bool {
		runMu.Lock()
		defer runMu.Unlock()
		return len(runs) >= len(committed)
	})
	wait.Within(t, 60*time.Second, "the rows to be deleted", func() bool { return durableStatusOf(t, db).Total == 0 })
	require.NoError(t, w.Cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, w.Wait(), w.Logs.String())
	runMu.Lock()
	defer runMu.Unlock()
	for _, jid := range committed {
		require.Equal(t, 1, runs[jid], "runs of %s", jid)
	}
	require.Len(t, runs, len(committed), "only committed jobs ran")
}

// assertNoError reports err on t from any goroutine and whether it was nil.
func assertNoError(t *testing.T, err error) bool {
	if err != nil {
		t.Error(fmt.Errorf("unexpected error: %w", err))
		return false
	}
	return true
}
