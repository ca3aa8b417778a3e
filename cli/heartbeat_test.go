package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/durable"
	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/gojobtest"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// The heartbeat tests run real `gojob work` processes: the stock binary
// for --exec and --http handlers, and heartbeat-worker (testdata: the stock
// CLI with Go handlers) for Go handlers.

const (
	// hbTimeout is the jobs' heartbeat_timeout: fifteen times the 100 ms
	// between their heartbeats, so that a loaded machine that delays a
	// heartbeat does not make the job look silent.
	hbTimeout = 1500 * time.Millisecond
	// hbBeats is how many heartbeats the handlers send, 100 ms apart:
	// for twice hbTimeout.
	hbBeats = 31
	// hbSlack is what the tests allow beyond a deadline for the
	// cancellation, the retry write and a noisy machine. The deadline
	// itself is exact (a timer per job, docs/heartbeats.md).
	hbSlack = 3 * time.Second
	// hbEarly is how much earlier than the deadline a test may see the
	// retry: the handlers note the time just after their last heartbeat
	// or their start, a little after gojob does (later on a loaded
	// machine).
	hbEarly = 500 * time.Millisecond
)

// hbTimeoutText is hbTimeout as the jobs carry it, in seconds.
var hbTimeoutText = strconv.FormatFloat(hbTimeout.Seconds(), 'f', -1, 64)

// heartbeatWorker builds testdata/heartbeat-worker once per run.
func heartbeatWorker(t *testing.T) string {
	return buildTestBinary(t, "heartbeat-worker", "./testdata/heartbeat-worker")
}

// startBinary runs `bin work -r url args…` like startWorker.
func startBinary(t *testing.T, bin, url string, args ...string) *workerProc {
	t.Helper()
	return gojobtest.Start(t, bin, append([]string{"work", "-r", url, "--sidekiq-version", "7"}, args...)...)
}

// gojobOutput runs the gojob binary and returns its standard output.
func gojobOutput(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(gojobBinary(t), args...).Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		t.Fatalf("gojob %v: %v: %s", args, err, ee.Stderr)
	}
	require.NoError(t, err)
	return string(out)
}

// hbEnv is a redis-server and a connection to it.
type hbEnv struct {
	rs   *redistest.Server
	pool *redis.Pool
	conn redis.Conn
	dir  string
}

func newHBEnv(t *testing.T) *hbEnv {
	t.Helper()
	rs := redistest.StartWith(t, redistest.Options{TCP: true})
	pool := rs.Pool(t)
	conn := pool.Get()
	t.Cleanup(func() { conn.Close() })
	return &hbEnv{rs: rs, pool: pool, conn: conn, dir: t.TempDir()}
}

// push pushes a job of class with args and limits (seconds; 0 = none).
func (e *hbEnv) push(t *testing.T, jid, class string, timeout, heartbeat float64, args ...any) {
	t.Helper()
	job, err := wire.NewJob(class, args...)
	require.NoError(t, err)
	job.Set("jid", rubyjson.StringValue(jid))
	if timeout > 0 {
		require.NoError(t, job.SetTimeout(time.Duration(timeout*float64(time.Second))))
	}
	if heartbeat > 0 {
		require.NoError(t, job.SetHeartbeatTimeout(time.Duration(heartbeat*float64(time.Second))))
	}
	client, err := sidekiq.NewClient(&sidekiq.ClientConfig{Pool: e.pool, Version: wire.Version7})
	require.NoError(t, err)
	_, err = client.Push(context.Background(), job, nil)
	require.NoError(t, err)
}

// retried waits for jid's retry entry and returns it.
func (e *hbEnv) retried(t *testing.T, jid string) *wire.Job {
	t.Helper()
	var found *wire.Job
	wait.Within(t, 20*time.Second, "the retry entry of "+jid, func() bool {
		vals, err := redis.ByteSlices(e.conn.Do("ZRANGE", contract.KeyRetry, 0, -1))
		require.NoError(t, err)
		for _, v := range vals {
			j, err := wire.ParseJob(v)
			require.NoError(t, err)
			if j.JID() == jid {
				found = j
				return true
			}
		}
		return false
	})
	return found
}

// failedAt returns a retry entry's failed_at.
func failedAt(t *testing.T, j *wire.Job) time.Time {
	t.Helper()
	v, ok := j.Get("failed_at")
	require.True(t, ok)
	f, ok := v.Float()
	require.True(t, ok)
	return contract.FromEpochSeconds(f)
}

// logLine waits for the line of log that starts with prefix and returns its
// fields after the prefix.
func logLine(t *testing.T, log, prefix string) []string {
	t.Helper()
	var fields []string
	wait.Within(t, 20*time.Second, "log line "+prefix, func() bool {
		b, _ := os.ReadFile(log)
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, prefix) {
				fields = strings.Fields(strings.TrimPrefix(l, prefix))
				return true
			}
		}
		return false
	})
	return fields
}

func epoch(t *testing.T, s string) time.Time {
	t.Helper()
	f, err := strconv.ParseFloat(s, 64)
	require.NoError(t, err)
	return contract.FromEpochSeconds(f)
}

// requireRetriedAfterSilence checks a heartbeat-timeout retry entry: its
// class and message, and that it was written heartbeat_timeout (and not
// much more) after the last heartbeat.
func requireRetriedAfterSilence(t *testing.T, job *wire.Job, lastBeat time.Time) {
	t.Helper()
	require.Equal(t, "Gojob::HeartbeatTimeout", job.ErrorClass())
	require.Contains(t, job.ErrorMessage(), "over its heartbeat_timeout of "+hbTimeoutText+"s")
	took := failedAt(t, job).Sub(lastBeat)
	require.GreaterOrEqual(t, took, hbTimeout-hbEarly, "retried before its heartbeat_timeout")
	require.Less(t, took, hbTimeout+hbSlack, "retried long after its heartbeat_timeout")
}

// A Go handler that heartbeats for twice its heartbeat_timeout and then
// stops is retried as Gojob::HeartbeatTimeout heartbeat_timeout after its
// last heartbeat, while its process lives on; nothing stays in progress.
func TestGoHandlerThatStopsHeartbeatingIsRetried(t *testing.T) {
	t.Parallel()
	e := newHBEnv(t)
	log := filepath.Join(e.dir, "log")
	w := startBinary(t, heartbeatWorker(t), e.rs.URL())
	id := w.Identity(t)
	e.push(t, "gobeat1", "GoBeat", 0, hbTimeout.Seconds(), hbBeats, log)
	last := epoch(t, logLine(t, log, "gobeat1 ")[0])
	requireRetriedAfterSilence(t, e.retried(t, "gobeat1"), last)
	require.Empty(t, workingJIDs(t, e.conn, id))
	select {
	case <-w.Done():
		t.Fatal("the worker exited")
	default:
	}
}

// An --exec command heartbeats by writing lines to GOJOB_HEARTBEAT_FD; once
// it stops, it is retried heartbeat_timeout after its last line, and its
// process group is killed.
func TestExecHandlerThatStopsHeartbeatingIsRetried(t *testing.T) {
	t.Parallel()
	e := newHBEnv(t)
	log := filepath.Join(e.dir, "log")
	script := `for i in $(seq ` + strconv.Itoa(hbBeats) + `); do echo beat >&"$GOJOB_HEARTBEAT_FD"; last=$(date +%s.%N); sleep 0.1; done; ` +
		`echo "$GOJOB_JID $last $$ $GOJOB_HEARTBEAT_FD $GOJOB_HEARTBEAT_TIMEOUT" >> ` + log + `; sleep 30`
	w := startWorker(t, e.rs.URL(), "--exec", "ExecBeat="+script)
	id := w.Identity(t)
	e.push(t, "execbeat1", "ExecBeat", 0, hbTimeout.Seconds())
	f := logLine(t, log, "execbeat1 ")
	require.Equal(t, []string{"4", hbTimeoutText}, f[2:4], "GOJOB_HEARTBEAT_FD, GOJOB_HEARTBEAT_TIMEOUT")
	requireRetriedAfterSilence(t, e.retried(t, "execbeat1"), epoch(t, f[0]))
	pid, err := strconv.Atoi(f[1])
	require.NoError(t, err)
	wait.For(t, "the command's process group to be killed", func() bool {
		return errors.Is(syscall.Kill(-pid, 0), syscall.ESRCH)
	})
	require.Empty(t, workingJIDs(t, e.conn, id))
}

// An --http handler heartbeats by POSTing to the URL in
// X-Gojob-Heartbeat-Url (204 each time); once it stops, the job is retried
// heartbeat_timeout after its last heartbeat, its request is cancelled, and
// a heartbeat sent after that is refused.
func TestHTTPHandlerThatStopsHeartbeatingIsRetried(t *testing.T) {
	t.Parallel()
	e := newHBEnv(t)
	type result struct {
		last     time.Time
		statuses []int
		timeout  string
		late     int
		err      error
	}
	results := make(chan result, 1)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // the server notices a gone client only once the body is read
		res := result{timeout: r.Header.Get("X-Gojob-Heartbeat-Timeout")}
		url := r.Header.Get("X-Gojob-Heartbeat-Url")
		for i := range hbBeats {
			resp, err := http.Post(url, "text/plain", nil)
			if err != nil {
				res.err = err
				break
			}
			resp.Body.Close()
			res.statuses = append(res.statuses, resp.StatusCode)
			res.last = time.Now()
			if i < hbBeats-1 {
				time.Sleep(100 * time.Millisecond)
			}
		}
		select {
		case <-r.Context().Done(): // gojob gave up the request
		case <-time.After(20 * time.Second):
			res.err = errors.New("the request was not cancelled")
		}
		if resp, err := http.Post(url, "text/plain", nil); err == nil {
			resp.Body.Close()
			res.late = resp.StatusCode
		}
		results <- res
	}))
	defer ts.Close()
	w := startWorker(t, e.rs.URL(), "--http", "HTTPBeat="+ts.URL)
	id := w.Identity(t)
	e.push(t, "httpbeat1", "HTTPBeat", 0, hbTimeout.Seconds())
	job := e.retried(t, "httpbeat1")
	var res result
	select {
	case res = <-results:
	case <-time.After(20 * time.Second):
		t.Fatal("the HTTP handler's request was not cancelled")
	}
	require.NoError(t, res.err)
	require.Equal(t, slices.Repeat([]int{204}, hbBeats), res.statuses)
	require.Equal(t, hbTimeoutText, res.timeout)
	require.Contains(t, []int{http.StatusNotFound, http.StatusGone}, res.late)
	requireRetriedAfterSilence(t, job, res.last)
	require.Empty(t, workingJIDs(t, e.conn, id))
}

// A Go handler that ignores its cancellation is given up after
// --cancel-grace: its job is retried once (saying it was left running), the
// incident is logged, and its only slot runs the next job while it hangs.
func TestHungGoHandlerFreesItsSlot(t *testing.T) {
	t.Parallel()
	e := newHBEnv(t)
	log := filepath.Join(e.dir, "log")
	w := startBinary(t, heartbeatWorker(t), e.rs.URL(), "-c", "1", "--cancel-grace", "200ms")
	id := w.Identity(t)
	e.push(t, "hang1", "GoHang", 0, 0.2, log)
	logLine(t, log, "hang1 started")
	job := e.retried(t, "hang1")
	require.Equal(t, "Gojob::HeartbeatTimeout", job.ErrorClass())
	require.Contains(t, job.ErrorMessage(), "its handler ignored the cancellation for 0.2s and was left running")
	e.push(t, "next1", "GoNext", 0, 0, log)
	logLine(t, log, "next1 ran")
	require.Contains(t, w.Logs.String(), "a cancelled handler did not return")
	wait.For(t, "nothing in progress", func() bool { return len(workingJIDs(t, e.conn, id)) == 0 })
	n, err := redis.Int(e.conn.Do("ZCARD", contract.KeyRetry))
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

// A job's timeout cancels it however often it heartbeats (Gojob::Timeout);
// --job-timeout is the timeout of jobs without one.
func TestTotalTimeoutAndTheJobTimeoutFlag(t *testing.T) {
	t.Parallel()
	e := newHBEnv(t)
	log := filepath.Join(e.dir, "log")
	script := `echo "$GOJOB_JID $(date +%s.%N)" >> ` + log + `; while :; do echo >&4; sleep 0.05; done`
	startWorker(t, e.rs.URL(), "-c", "2", "--job-timeout", "600ms", "--exec", "Busy="+script)
	e.push(t, "own1", "Busy", 0.3, 1)
	e.push(t, "flag1", "Busy", 0, 0)
	for _, c := range []struct {
		jid   string
		limit time.Duration
	}{{"own1", 300 * time.Millisecond}, {"flag1", 600 * time.Millisecond}} {
		start := epoch(t, logLine(t, log, c.jid+" ")[0])
		job := e.retried(t, c.jid)
		require.Equal(t, "Gojob::Timeout", job.ErrorClass(), c.jid)
		require.Equal(t, fmt.Sprintf("the job ran longer than its timeout of %gs and was cancelled", c.limit.Seconds()), job.ErrorMessage())
		took := failedAt(t, job).Sub(start)
		require.GreaterOrEqual(t, took, c.limit-hbEarly, c.jid)
		require.Less(t, took, c.limit+hbSlack, c.jid)
	}
}

// `gojob processes` lists each running job with its last heartbeat (from
// the work hash the Busy page reads); a job that sent none shows "-".
func TestProcessesShowEachRunningJobsLastHeartbeat(t *testing.T) {
	t.Parallel()
	e := newHBEnv(t)
	log := filepath.Join(e.dir, "log")
	// Version 6: a heartbeat every 5 s.
	w := startBinary(t, heartbeatWorker(t), e.rs.URL(), "--sidekiq-version", "6")
	id := w.Identity(t)
	e.push(t, "shown1", "GoBeat", 0, 5, 1000, log)
	e.push(t, "quiet1", "GoHang", 0, 0, log)
	logLine(t, log, "quiet1 started")
	type job struct {
		JID         string     `json:"jid"`
		Class       string     `json:"class"`
		HeartbeatAt *time.Time `json:"heartbeat_at"`
	}
	var rows []struct {
		Identity string `json:"identity"`
		Jobs     []job  `json:"jobs"`
	}
	// The jobs are listed from the first moment of their run (the
	// in-progress list); their heartbeats come from the work hash, which
	// the next process heartbeat writes.
	wait.Within(t, 15*time.Second, "the running jobs with a heartbeat in the work hash", func() bool {
		out := gojobOutput(t, "processes", "-r", e.rs.URL(), "--json")
		require.NoError(t, json.Unmarshal([]byte(out), &rows), out)
		if len(rows) != 1 || len(rows[0].Jobs) != 2 {
			return false
		}
		for _, j := range rows[0].Jobs {
			if j.JID == "shown1" && j.HeartbeatAt != nil {
				return true
			}
		}
		return false
	})
	require.Equal(t, id, rows[0].Identity)
	byJID := map[string]job{}
	for _, j := range rows[0].Jobs {
		byJID[j.JID] = j
	}
	require.Equal(t, "GoBeat", byJID["shown1"].Class)
	require.NotNil(t, byJID["shown1"].HeartbeatAt)
	require.WithinDuration(t, time.Now(), *byJID["shown1"].HeartbeatAt, 10*time.Second)
	require.Nil(t, byJID["quiet1"].HeartbeatAt)

	text := gojobOutput(t, "processes", "-r", e.rs.URL())
	require.Regexp(t, `(?m)^`+id+`\s+\S+\s+shown1\s+GoBeat\s+default\s+\S+\s+\S+ ago$`, text)
	require.Regexp(t, `(?m)^`+id+`\s+\S+\s+quiet1\s+GoHang\s+default\s+\S+\s+-$`, text)
}

// A job whose process dies is nobody's to time out: the reliable-fetch
// recovery of the next process on the host pushes it back unchanged and it
// runs again (no Gojob::HeartbeatTimeout retry entry), and the durable
// reconciler, whose extension has long passed, does not kill it: it is
// picked up once, by the recovery. While it runs again its heartbeats keep
// its durable row's deadline ahead (one heartbeat serves every deadline).
func TestDeadProcessJobIsRecoveredNotTimedOutNorKilled(t *testing.T) {
	t.Parallel()
	e := newHBEnv(t)
	log := filepath.Join(e.dir, "log")
	db := "sqlite:" + filepath.Join(e.dir, "durable.db")
	d, err := durable.New(&durable.Config{URLs: []string{db}, Classes: map[string]time.Duration{"GoForever": time.Second}})
	require.NoError(t, err)
	defer d.Close()
	_, err = d.Migrate(context.Background())
	require.NoError(t, err)
	client, err := sidekiq.NewClient(&sidekiq.ClientConfig{Pool: e.pool, Version: wire.Version7,
		Extensions: []sidekiq.Extension{d}})
	require.NoError(t, err)
	job, err := wire.NewJob("GoForever", log)
	require.NoError(t, err)
	job.Set("jid", rubyjson.StringValue("dead1"))
	require.NoError(t, job.SetHeartbeatTimeout(hbTimeout))

	args := []string{"--durable", "--durable-db", db, "--durable-class", "GoForever=1s", "--durable-poll-interval", "200ms"}
	a := startBinary(t, heartbeatWorker(t), e.rs.URL(), args...)
	a.Identity(t)
	_, err = client.Push(context.Background(), job, nil)
	require.NoError(t, err)
	logLine(t, log, "dead1 started")
	require.NoError(t, a.Cmd.Process.Kill())
	a.Wait()
	// Past the heartbeat_timeout and the durable extension (1 s, two
	// strikes) before anyone looks.
	time.Sleep(2500 * time.Millisecond)

	b := startBinary(t, heartbeatWorker(t), e.rs.URL(), args...)
	b.Identity(t)
	wait.Within(t, 20*time.Second, "the job to run again", func() bool {
		out, _ := os.ReadFile(log)
		return strings.Count(string(out), "dead1 started") == 2
	})
	time.Sleep(3 * time.Second) // several reconcile passes, each past the extension
	for _, set := range []string{contract.KeyRetry, contract.KeyDead} {
		n, err := redis.Int(e.conn.Do("ZCARD", set))
		require.NoError(t, err)
		require.Zero(t, n, set)
	}
	out, _ := os.ReadFile(log)
	require.Equal(t, 2, strings.Count(string(out), "dead1 started"), "the job ran once in each process")
	logs := b.Logs.String()
	require.Contains(t, logs, "recovered the jobs of a process that is gone")
	require.NotRegexp(t, `killed=[1-9]|marked_missing=[1-9]`, logs)
	rows, err := d.Rows(context.Background(), 0)
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.True(t, rows[0].AssumeDeadAt.After(time.Now()), "the heartbeats keep the row's deadline ahead: %v", rows[0].AssumeDeadAt)
	require.True(t, rows[0].AssumeDeadAt.After(rows[0].LockedAt.Add(time.Second)), "moved since the lock")
}
