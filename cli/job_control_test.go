package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/batch"
	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/gojobtest"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/wire"
)

// runBinary runs the real gojob binary and returns its stdout, stderr and
// exit code.
func runBinary(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(gojobBinary(t), args...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return out.String(), errb.String(), ee.ExitCode()
	}
	require.NoError(t, err)
	return out.String(), errb.String(), 0
}

// pushOne pushes a job of class to queue default and returns its jid.
func pushOne(t *testing.T, pool *redis.Pool, class string) string {
	t.Helper()
	return pushTo(t, pool, "default", class)
}

// pushTo pushes a job of class to queue and returns its jid.
func pushTo(t *testing.T, pool *redis.Pool, queue, class string) string {
	t.Helper()
	client, err := sidekiq.NewClient(&sidekiq.ClientConfig{Pool: pool, Version: wire.Version7})
	require.NoError(t, err)
	res, err := client.Enqueue(context.Background(), queue, class)
	require.NoError(t, err)
	return res.JID
}

// A batch of 1,000 exec jobs whose worker is killed with SIGKILL three
// times pushes its success callback exactly once.
func TestBatchSuccessCallbackOnceAcrossKills(t *testing.T) {
	t.Parallel()
	const n = 1000
	rs := redistest.StartWith(t, redistest.Options{TCP: true})
	pool := rs.Pool(t)
	conn := pool.Get()
	defer conn.Close()
	out, errOut, code := runBinary(t, "batch", "create", "-r", rs.URL(), "--on-success", "BatchDone", "--description", "chaos")
	require.Zero(t, code, errOut)
	bid := strings.TrimSpace(out)
	require.Len(t, bid, 24)

	client, err := sidekiq.NewClient(&sidekiq.ClientConfig{Pool: pool, Version: wire.Version7})
	require.NoError(t, err)
	b, err := batch.New(&batch.Config{Client: client})
	require.NoError(t, err)
	for i := range n {
		job, err := wire.NewJob("BatchWork", i)
		require.NoError(t, err)
		job.SetQueue("work")
		_, ok, err := b.Push(context.Background(), bid, job)
		require.NoError(t, err)
		require.True(t, ok)
	}
	_, errOut, code = runBinary(t, "batch", "seal", "-r", rs.URL(), bid)
	require.Zero(t, code, errOut)

	runs := newRunLog(t)
	callbacks := filepath.Join(t.TempDir(), "callbacks")
	// A job in flight at every kill must not become a poison pill here:
	// the batch would then complete, not succeed.
	args := []string{"-c", "10", "-q", "work", "-q", "default", "--max-recoveries", "100",
		"--exec", runs.execArg("BatchWork"),
		"--exec", `BatchDone=echo "$GOJOB_JID" >> ` + callbacks}
	killedInFlight := 0
	for k := range 3 {
		w := startWorker(t, rs.URL(), args...)
		id := w.Identity(t)
		target := (k + 1) * n / 5
		wait.Within(t, 60*time.Second, "progress before the kill", func() bool { return runs.total(t) >= target })
		require.NoError(t, w.Cmd.Process.Signal(syscall.SIGKILL))
		w.Wait()
		killedInFlight += len(workingJIDs(t, conn, id))
	}
	final := startWorker(t, rs.URL(), args...)
	wait.Within(t, 2*time.Minute, "every job to run", func() bool { return len(runs.counts(t)) == n })
	wait.Within(t, 30*time.Second, "the success callback", func() bool { return len(gojobtest.Lines(t, callbacks)) >= 1 })
	// Let anything that would push it again happen, then stop gracefully.
	wait.Within(t, 30*time.Second, "the queues to empty", func() bool {
		w, _ := redis.Int(conn.Do("LLEN", "queue:work"))
		d, _ := redis.Int(conn.Do("LLEN", "queue:default"))
		return w+d == 0
	})
	require.NoError(t, final.Cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, final.Wait(), final.Logs.String())

	require.Len(t, gojobtest.Lines(t, callbacks), 1, "the success callback ran exactly once")
	out, errOut, code = runBinary(t, "batch", "status", "-r", rs.URL(), "--json", bid)
	require.Zero(t, code, errOut)
	var st batch.Status
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	require.Equal(t, int64(n), st.Total)
	require.Equal(t, int64(n), st.Succeeded)
	require.Zero(t, st.Pending)
	require.NotNil(t, st.SuccessAt)
	again := runs.total(t) - n
	t.Logf("batch: %d jobs, 3 kills, %d in flight at the kills, %d ran again, 1 callback", n, killedInFlight, again)
	require.Positive(t, killedInFlight, "the kills hit jobs in flight")
}

// gojob cancel of a running exec job: TERM reaches its process group, what
// ignores TERM is killed at the grace, and the job goes to the dead set as
// Gojob::Cancelled without a retry.
func TestCancelExecJobKillsTreeWithinGrace(t *testing.T) {
	t.Parallel()
	const grace = 2 * time.Second
	rs := redistest.StartWith(t, redistest.Options{TCP: true})
	pool := rs.Pool(t)
	conn := pool.Get()
	defer conn.Close()
	pids := filepath.Join(t.TempDir(), "pids")
	// The shell, a child that ignores TERM and one that does not.
	script := fmt.Sprintf(`echo $$ >> %[1]s; (trap '' TERM; exec sleep 300) & echo $! >> %[1]s; sleep 300 & echo $! >> %[1]s; wait`, pids)
	w := startWorker(t, rs.URL(), "-c", "2", "--cancel-grace", grace.String(), "--exec", "Slow="+script)
	w.Identity(t)
	jid := pushOne(t, pool, "Slow")
	wait.Within(t, 30*time.Second, "the job's processes", func() bool { return len(gojobtest.Lines(t, pids)) == 3 })
	var procs []int
	for _, l := range gojobtest.Lines(t, pids) {
		pid, err := strconv.Atoi(l)
		require.NoError(t, err)
		procs = append(procs, pid)
	}
	// The work hash (the Busy page) shows the job within a heartbeat.
	wait.Within(t, 30*time.Second, "the job on the Busy page", func() bool {
		out, _, code := runBinary(t, "job", "-r", rs.URL(), "--json", jid)
		return code == 0 && strings.Contains(out, `"where": "running"`)
	})
	start := time.Now()
	out, errOut, code := runBinary(t, "cancel", "-r", rs.URL(), jid)
	require.Zero(t, code, errOut)
	require.Contains(t, out, "cancel of running job")
	wait.Within(t, grace+3*time.Second, "the process tree to end", func() bool {
		for _, pid := range procs {
			if !processGone(pid) {
				return false
			}
		}
		return true
	})
	took := time.Since(start)
	requireCancelledNotRetried(t, conn, jid, 10*time.Second)
	n, err := redis.Int(conn.Do("EXISTS", contract.CancelKey(jid)))
	require.NoError(t, err)
	require.Zero(t, n, "the request is done with")
	require.Len(t, gojobtest.Lines(t, pids), 3, "not run again")
	t.Logf("cancel: tree gone %.1f s after the request (grace %s)", took.Seconds(), grace)

	// A queued job is removed; an unknown one is not found (exit 4).
	queued := pushTo(t, pool, "not-worked", "Slow")
	out, errOut, code = runBinary(t, "cancel", "-r", rs.URL(), queued)
	require.Zero(t, code, errOut)
	require.Contains(t, out, "removed "+queued+" from queue:not-worked")
	_, _, code = runBinary(t, "cancel", "-r", rs.URL(), "ffffffffffffffffffffffff")
	require.Equal(t, exitNotFound, code)
}

// Cancel crosses languages through Sidekiq's iterable-job cancel field:
// a job running in the real gojob work whose it-<jid> gets "cancelled"
// (the pipeline Sidekiq 8.1.7's Client#cancel! sends, from Ruby: no gojob
// key, no message) ends as a gojob cancel does, in the dead set as
// Gojob::Cancelled; and gojob cancel of a job gojob does not run (one in a
// Ruby process, say) sets it-<jid> "cancelled" as cancel! does, so a Ruby
// 7.3+ iterable job stops.
func TestCancelThroughSidekiqIterationKey(t *testing.T) {
	t.Parallel()
	rs := redistest.StartWith(t, redistest.Options{TCP: true})
	pool := rs.Pool(t)
	conn := pool.Get()
	defer conn.Close()
	started := filepath.Join(t.TempDir(), "started")
	w := startWorker(t, rs.URL(), "-c", "2", "--cancel-grace", "2s",
		"--exec", `Slow=echo "$GOJOB_JID" >> `+started+`; exec sleep 300`)
	w.Identity(t)
	jid := pushOne(t, pool, "Slow")
	wait.Within(t, 30*time.Second, "the job to start", func() bool { return len(gojobtest.Lines(t, started)) == 1 })

	key := contract.IterationKey(jid)
	conn.Send("HSETNX", key, "cancelled", time.Now().Unix())
	conn.Send("HGET", key, "cancelled")
	conn.Send("EXPIRE", key, 2592000, "NX")
	_, err := conn.Do("")
	require.NoError(t, err)
	requireCancelledNotRetried(t, conn, jid, 30*time.Second)
	n, err := redis.Int(conn.Do("EXISTS", key))
	require.NoError(t, err)
	require.Zero(t, n, "the cancelled job's state is gone, as Sidekiq unlinks it")

	elsewhere := contract.NewJID()
	before := time.Now().Unix()
	_, errOut, code := runBinary(t, "cancel", "-r", rs.URL(), elsewhere)
	require.Equal(t, exitNotFound, code, errOut)
	h, err := redis.StringMap(conn.Do("HGETALL", contract.IterationKey(elsewhere)))
	require.NoError(t, err)
	require.Len(t, h, 1)
	at, err := strconv.ParseInt(h["cancelled"], 10, 64)
	require.NoError(t, err, "Integer epoch seconds, as cancel! writes")
	require.GreaterOrEqual(t, at, before)
	require.LessOrEqual(t, at, time.Now().Unix())
	ttl, err := redis.Int(conn.Do("TTL", contract.IterationKey(elsewhere)))
	require.NoError(t, err)
	require.InDelta(t, 2592000, ttl, 60, "30 days")
}

// requireCancelledNotRetried waits up to timeout for the dead set's one
// entry, the job jid ended as Gojob::Cancelled, and checks that the retry
// set is empty.
func requireCancelledNotRetried(t *testing.T, conn redis.Conn, jid string, timeout time.Duration) {
	t.Helper()
	var dead [][]byte
	wait.Within(t, timeout, "the dead set", func() bool {
		dead, _ = redis.ByteSlices(conn.Do("ZRANGE", contract.KeyDead, 0, -1))
		return len(dead) == 1
	})
	var entry struct {
		JID        string `json:"jid"`
		ErrorClass string `json:"error_class"`
	}
	require.NoError(t, json.Unmarshal(dead[0], &entry))
	require.Equal(t, jid, entry.JID)
	require.Equal(t, "Gojob::Cancelled", entry.ErrorClass)
	retries, err := redis.Int(conn.Do("ZCARD", contract.KeyRetry))
	require.NoError(t, err)
	require.Zero(t, retries, "not retried")
}

// An exec job that writes {"outcome":"snooze","in":60} on fd 4 waits in
// the schedule set about 60 s out, unchanged, and is not a failure.
func TestExecSnoozeSchedulesWithoutFailure(t *testing.T) {
	t.Parallel()
	rs := redistest.StartWith(t, redistest.Options{TCP: true})
	pool := rs.Pool(t)
	conn := pool.Get()
	defer conn.Close()
	w := startWorker(t, rs.URL(), "-c", "2", "--exec", `Sleepy=echo '{"outcome":"snooze","in":60}' >&4; exit 1`)
	w.Identity(t)
	jid := pushOne(t, pool, "Sleepy")
	var vals [][]byte
	wait.Within(t, 30*time.Second, "the schedule set", func() bool {
		vals, _ = redis.ByteSlices(conn.Do("ZRANGE", contract.KeySchedule, 0, -1, "WITHSCORES"))
		return len(vals) == 2
	})
	job, err := wire.ParseJob(vals[0])
	require.NoError(t, err)
	require.Equal(t, jid, job.JID())
	require.False(t, job.Has("error_message"), "no failure recorded")
	require.False(t, job.Has("retry_count"))
	score, err := strconv.ParseFloat(string(vals[1]), 64)
	require.NoError(t, err)
	in := time.Until(contract.FromEpochSeconds(score))
	require.InDelta(t, 60, in.Seconds(), 15)
	retries, err := redis.Int(conn.Do("ZCARD", contract.KeyRetry))
	require.NoError(t, err)
	require.Zero(t, retries)
	// The counters reach Redis with the heartbeat.
	wait.Within(t, 30*time.Second, "the processed count", func() bool {
		p, _ := redis.Int(conn.Do("GET", contract.KeyStatProcessed))
		return p == 1
	})
	failed, err := redis.Int(conn.Do("GET", contract.KeyStatFailed))
	if !errors.Is(err, redis.ErrNil) {
		require.NoError(t, err)
	}
	require.Zero(t, failed, "not counted as failed")
}

// A result and progress written on fd 4 are shown by gojob job --json, as
// is a dead job's decoded backtrace; an unknown jid is not found (exit 4).
func TestJobCommandShowsResultAndBacktrace(t *testing.T) {
	t.Parallel()
	rs := redistest.StartWith(t, redistest.Options{TCP: true})
	pool := rs.Pool(t)
	conn := pool.Get()
	defer conn.Close()
	w := startWorker(t, rs.URL(), "-c", "2", "--exec",
		`Report=echo beat >&4; echo '{"progress":0.5,"message":"half way"}' >&4; echo '{"result":{"rows":42,"file":"a.csv"}}' >&4`)
	w.Identity(t)
	jid := pushOne(t, pool, "Report")
	var v jobView
	wait.Within(t, 30*time.Second, "the job's outcome", func() bool {
		out, _, code := runBinary(t, "job", "-r", rs.URL(), "--json", jid)
		if code != 0 {
			return false
		}
		require.NoError(t, json.Unmarshal([]byte(out), &v))
		return v.Status != nil && v.Status.Outcome == "success"
	})
	require.JSONEq(t, `{"rows":42,"file":"a.csv"}`, string(v.Status.Result))
	require.NotNil(t, v.Status.Progress)
	require.InDelta(t, 0.5, *v.Status.Progress, 1e-9)
	require.Equal(t, "half way", v.Status.Message)
	out, _, code := runBinary(t, "job", "-r", rs.URL(), jid)
	require.Zero(t, code)
	require.Contains(t, out, `result:   {"rows":42,"file":"a.csv"}`)

	// A Ruby retry entry (Sidekiq 7.3.10) moved to the dead set: its
	// backtrace is shown decoded.
	raw, err := os.ReadFile("../testdata/ruby-fixtures/7.3.10/capture/retry-entry.json")
	require.NoError(t, err)
	_, err = conn.Do("ZADD", contract.KeyDead, 1795443862.5, strings.TrimSpace(string(raw)))
	require.NoError(t, err)
	want := gojobtest.Lines(t, "../testdata/ruby-fixtures/7.3.10/capture/backtrace-decoded.txt")[1:] // after the comment line
	out, errOut, code := runBinary(t, "job", "-r", rs.URL(), "--json", "530d5ea00d9a9b5d4be29a8b")
	require.Zero(t, code, errOut)
	var d jobView
	require.NoError(t, json.Unmarshal([]byte(out), &d))
	require.Equal(t, "dead", d.Where)
	require.Equal(t, "ArgumentError", d.ErrClass)
	require.Equal(t, want, d.Backtrace)

	_, _, code = runBinary(t, "job", "-r", rs.URL(), "ffffffffffffffffffffffff")
	require.Equal(t, exitNotFound, code)
}

// Bad input to the batch, cancel and job commands exits 2 before Redis is
// reached (the Redis here does not exist, which would be exit 3).
func TestJobControlUsageErrors(t *testing.T) {
	// Not parallel: see the note on runCLI.
	const nowhere = "redis://127.0.0.1:1/0"
	for _, args := range [][]string{
		{"cancel", "-r", nowhere},
		{"cancel", "-r", nowhere, "a", "b"},
		{"job", "-r", nowhere},
		{"batch", "status", "-r", nowhere},
		{"batch", "seal", "-r", nowhere},
		{"batch", "list", "-r", nowhere, "extra"},
		{"push", "-r", nowhere, "--batch", "b1", "--in", "1m", "Work"},
		{"push", "-r", nowhere, "--batch", "b1", "--key", "k", "Work"},
		{"batch", "nosuch"},
	} {
		out, errOut, code := runCLI(t, args...)
		require.Equal(t, exitUsage, code, "%v: %s", args, errOut)
		require.Empty(t, out, args)
	}
	_, errOut, code := runCLI(t, "batch", "status", "-r", nowhere, "b1")
	require.Equal(t, exitUnreachable, code, errOut)
}

// A running job is "running" for gojob job and cancellable by gojob cancel
// from its first moment, before any heartbeat wrote it to its process's
// work hash (the in-progress list shows it), and no longer running as soon
// as it ended, while the work hash still shows it until the next beat.
// `gojob processes` lists it once.
func TestJobCommandFollowsARunningJob(t *testing.T) {
	t.Parallel()
	rs := redistest.StartWith(t, redistest.Options{TCP: true})
	pool := rs.Pool(t)
	conn := pool.Get()
	defer conn.Close()
	dir := t.TempDir()
	// Each job says it started, then runs until it is released.
	script := fmt.Sprintf(`touch %[1]s/$GOJOB_JID.started; while [ ! -e %[1]s/$GOJOB_JID.release ]; do sleep 0.05; done`, dir)
	w := startWorker(t, rs.URL(), "-c", "2", "--exec", "Quiet="+script)
	id := w.Identity(t)
	started := func(jid string) {
		wait.For(t, "job "+jid+" to start", func() bool {
			_, err := os.Stat(filepath.Join(dir, jid+".started"))
			return err == nil
		})
	}
	jobJSON := func(jid string) (jobView, int) {
		out, errOut, code := runBinary(t, "job", "-r", rs.URL(), "--json", jid)
		var v jobView
		if code == 0 {
			require.NoError(t, json.Unmarshal([]byte(out), &v), out)
		} else {
			require.Equal(t, exitNotFound, code, errOut)
		}
		return v, code
	}

	jid := pushOne(t, pool, "Quiet")
	started(jid)
	// At once: no waiting for a heartbeat.
	out, errOut, code := runBinary(t, "job", "-r", rs.URL(), jid)
	require.Zero(t, code, errOut)
	require.Contains(t, out, "where:    running on "+id)
	require.Contains(t, out, "since:")
	require.Contains(t, out, "class:    Quiet")
	out, errOut, code = runBinary(t, "processes", "-r", rs.URL())
	require.Zero(t, code, errOut)
	require.Equal(t, 1, strings.Count(out, jid), out)

	// Its process's next heartbeat gives the start time and thread.
	var v jobView
	wait.Within(t, 30*time.Second, "the work hash to show the job", func() bool {
		v, code = jobJSON(jid)
		return code == 0 && v.At != nil
	})
	require.Equal(t, "running", v.Where)
	require.Equal(t, id, v.Process)
	require.NotEmpty(t, v.TID)
	require.WithinDuration(t, time.Now(), *v.At, time.Minute)

	// It ends: from the moment its in-progress list no longer holds it,
	// it is not running, though the work hash still holds it.
	require.NoError(t, os.WriteFile(filepath.Join(dir, jid+".release"), nil, 0o644))
	wait.For(t, "the job to leave its in-progress list", func() bool {
		lists, _ := redis.Strings(conn.Do("SMEMBERS", contract.KeyWorkingLists))
		for _, l := range lists {
			vals, _ := redis.Strings(conn.Do("LRANGE", l, 0, -1))
			for _, s := range vals {
				if strings.Contains(s, jid) {
					return false
				}
			}
		}
		return true
	})
	work, err := redis.String(conn.Do("HGET", id+":work", v.TID))
	staleWork := err == nil && strings.Contains(work, jid)
	v, code = jobJSON(jid)
	require.NotEqual(t, "running", v.Where, "code %d", code)
	if !staleWork {
		t.Log("a heartbeat came between the job's end and gojob job: the stale work entry was not exercised")
	}

	// A second one is cancelled while it runs: exit 0, then dead as
	// Gojob::Cancelled.
	jid2 := pushOne(t, pool, "Quiet")
	started(jid2)
	out, errOut, code = runBinary(t, "cancel", "-r", rs.URL(), jid2)
	require.Zero(t, code, errOut)
	require.Contains(t, out, "cancel of running job "+jid2+" requested")
	requireCancelledNotRetried(t, conn, jid2, 30*time.Second)
	v, code = jobJSON(jid2)
	require.Zero(t, code)
	require.Equal(t, "dead", v.Where)
}
