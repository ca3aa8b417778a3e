package cli

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	ucli "github.com/urfave/cli/v2"

	"github.com/gojob/gojob/internal/gojobtest"
	"github.com/gojob/gojob/internal/orderedstore"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/ordered"
	"github.com/gojob/gojob/sidekiq/wire"
)

// orderedProbeBinary builds cli/internal/orderedworker: the gojob command line
// with the OrderedProbe handler.
func orderedProbeBinary(t *testing.T) string {
	return buildTestBinary(t, "orderedworker", "./internal/orderedworker")
}

// startOrderedWorker starts the orderedworker binary's `gojob ordered
// work -r url args...`, its OrderedProbe handler logging to logPath.
func startOrderedWorker(t *testing.T, url, logPath string, args ...string) *workerProc {
	t.Helper()
	return startOrderedWork(t, orderedProbeBinary(t), url, []string{"GOJOB_ORDER_LOG=" + logPath}, args...)
}

// startOrderedWork starts `bin ordered work -r url args...` (args end with
// the queue) with env added to the environment.
func startOrderedWork(t *testing.T, bin, url string, env []string, args ...string) *workerProc {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"ordered", "work", "-r", url}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	return gojobtest.StartCmd(t, cmd)
}

type probeEvent struct {
	kind rune // s, e, or k (the test's kill marker)
	key  string
	i    int
	pid  int
}

func readProbeLog(t *testing.T, path string) []probeEvent {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	defer f.Close()
	var out []probeEvent
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) == 1 && fs[0] == "k" {
			out = append(out, probeEvent{kind: 'k'})
			continue
		}
		require.Len(t, fs, 4, "line %q", sc.Text())
		i, _ := strconv.Atoi(fs[2])
		pid, _ := strconv.Atoi(fs[3])
		out = append(out, probeEvent{kind: rune(fs[0][0]), key: fs[1], i: i, pid: pid})
	}
	return out
}

// Two `gojob ordered work` processes work 10,000 jobs over 100 keys,
// pushed while they run, with random 0-1 ms handlers; one is SIGKILLed
// midway. Its shards are taken over once its leases lapse (--lease 1s),
// its unfinished batches go back to their keys: every key's jobs ran in
// push order (no job started before every earlier job of its key had
// ended), no two runs of one key overlapped, only jobs of the killed
// process's batches ran again (after the kill), and nothing was lost.
func TestOrderedKillKeepsEveryKeyInOrder(t *testing.T) {
	t.Parallel()
	const keys, perKey = 100, 100
	rs := redistest.StartWith(t, redistest.Options{TCP: true})
	pool := rs.Pool(t)
	logPath := filepath.Join(t.TempDir(), "events")
	args := []string{"--shards", "8", "-c", "4", "--lease", "1s", "--log-level", "warn", "crash"}
	a := startOrderedWorker(t, rs.URL(), logPath, args...)
	b := startOrderedWorker(t, rs.URL(), logPath, args...)

	client, err := ordered.NewClient(&ordered.ClientConfig{Pool: pool, Shards: 8})
	require.NoError(t, err)
	pushed := make(chan error, 1)
	go func() {
		for i := 0; i < perKey; i += 2 {
			var items []ordered.PushItem
			for j := i; j < i+2; j++ {
				for k := range keys {
					key := "key-" + strconv.Itoa(k)
					job, _ := wire.NewJob("OrderedProbe", key, j)
					job.SetQueue("crash")
					items = append(items, ordered.PushItem{Job: job, Opts: ordered.PushOpts{Key: key}})
				}
			}
			if _, err := client.PushBulk(context.Background(), items); err != nil {
				pushed <- err
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		pushed <- nil
	}()

	ended := func() int {
		n := 0
		for _, e := range readProbeLog(t, logPath) {
			if e.kind == 'e' {
				n++
			}
		}
		return n
	}
	wait.Within(t, 20*time.Second, "a third of the jobs to run", func() bool { return ended() >= keys*perKey/3 })
	require.NoError(t, a.Cmd.Process.Signal(syscall.SIGKILL))
	a.Wait()
	f, err := os.OpenFile(logPath, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString("k\n")
	require.NoError(t, err)
	f.Close()
	require.NoError(t, <-pushed)

	done := func() bool {
		st, err := orderedstore.Status(context.Background(), pool, "crash", time.Now())
		require.NoError(t, err)
		return st.Pending == 0 && st.Processing == 0
	}
	wait.Within(t, 20*time.Second, "the survivor to drain the queue", done)
	require.NoError(t, b.Cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, b.Wait(), b.Logs.String())

	events := readProbeLog(t, logPath)
	killed := a.Cmd.Process.Pid
	type keyState struct {
		running   *probeEvent
		maxEnded  int // highest i such that 0..i all ended
		endedOnce map[int]bool
	}
	states := map[string]*keyState{}
	afterKill, reruns, dangling := false, 0, 0
	for idx := range events {
		e := events[idx]
		if e.kind == 'k' {
			afterKill = true
			continue
		}
		ks := states[e.key]
		if ks == nil {
			ks = &keyState{maxEnded: -1, endedOnce: map[int]bool{}}
			states[e.key] = ks
		}
		switch e.kind {
		case 's':
			if ks.running != nil {
				// Only a run of the killed process may have no end, and
				// only until the next run of its key.
				require.Equal(t, killed, ks.running.pid, "%s: job %d (pid %d) started while job %d (pid %d) ran", e.key, e.i, e.pid, ks.running.i, ks.running.pid)
				require.True(t, afterKill, "%s: job %d started over a run of the killed process before the kill", e.key, e.i)
				dangling++
			}
			require.LessOrEqual(t, e.i, ks.maxEnded+1, "%s: job %d started before job %d ended", e.key, e.i, ks.maxEnded+1)
			if ks.endedOnce[e.i] {
				require.True(t, afterKill, "%s: job %d ran again before the kill", e.key, e.i)
				require.NotEqual(t, killed, e.pid)
				reruns++
			}
			ks.running = &e
		case 'e':
			require.NotNil(t, ks.running, "%s: job %d ended without a start", e.key, e.i)
			require.Equal(t, e.i, ks.running.i, "%s: job %d ended while job %d ran", e.key, e.i, ks.running.i)
			require.Equal(t, e.pid, ks.running.pid)
			ks.running = nil
			ks.endedOnce[e.i] = true
			for ks.endedOnce[ks.maxEnded+1] {
				ks.maxEnded++
			}
		}
	}
	require.Len(t, states, keys)
	for key, ks := range states {
		require.Equal(t, perKey-1, ks.maxEnded, "%s: jobs lost", key)
		require.Nil(t, ks.running, "%s: a run never ended", key)
	}
	st, err := orderedstore.Status(context.Background(), pool, "crash", time.Now())
	require.NoError(t, err)
	require.EqualValues(t, 0, st.Morgue)
	t.Logf("ordered kill: %d jobs over %d keys, %d events, %d runs cut by the kill, %d jobs ran again after it, processed %d",
		keys*perKey, keys, len(events), dangling, reruns, st.Processed)
}

// gojob push --key and gojob ordered status|morgue|requeue drive an
// ordered queue end to end through the stock binary's --exec handler.
func TestOrderedCommandsAndExecHandler(t *testing.T) {
	t.Parallel()
	rs := redistest.StartWith(t, redistest.Options{TCP: true})
	out := filepath.Join(t.TempDir(), "out")
	for i := range 3 {
		_, stderr, code := runCLI(t, "push", "-r", rs.URL(), "-q", "orders", "--key", "order-1", "--shards", "4", "Sync", strconv.Itoa(i))
		require.Equal(t, 0, code, stderr)
	}
	stdout, stderr, code := runCLI(t, "push", "-r", rs.URL(), "-q", "orders", "--key", "order-1", "Sync", "1")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "merged")
	_, stderr, code = runCLI(t, "push", "-r", rs.URL(), "-q", "orders", "--key", "order-2", "Fail", "x")
	require.Equal(t, 0, code, stderr)

	stdout, _, code = runCLI(t, "ordered", "status", "-r", rs.URL())
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "orders: 4 shards, 4 pending")

	w := startOrderedWork(t, gojobBinary(t), rs.URL(), nil, "-c", "2",
		"--exec", `Sync=read -r p; echo "$p" >> `+out, "--exec", `Fail=echo nope >&2; exit 1`, "orders")
	wait.For(t, "the three Sync jobs", func() bool {
		b, _ := os.ReadFile(out)
		return strings.Count(string(b), "\n") == 3
	})
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	var args []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		j, err := wire.ParseJob([]byte(l))
		require.NoError(t, err)
		require.Equal(t, "orders", j.Queue())
		v, _ := j.Get("ordered_key")
		s, _ := v.Str()
		require.Equal(t, "order-1", s)
		args = append(args, string(j.Args()[0].Encode()))
	}
	require.Equal(t, []string{"0", "1", "2"}, args, "push order")
	require.NoError(t, w.Cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, w.Wait())

	// Fail failed once: retry_count 0, retried in 15+ s (Lowkiq's
	// retry_in(0)); the morgue and its rules are pinned in ordered/.
	stdout, _, code = runCLI(t, "ordered", "status", "-r", rs.URL(), "--json", "orders")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, `"failed": 1`)
	require.Contains(t, stdout, `"processed": 3`)

	stdout, stderr, code = runCLI(t, "ordered", "requeue", "-r", rs.URL(), "orders")
	require.Equal(t, 2, code, stdout+stderr)
	stdout, _, code = runCLI(t, "ordered", "morgue", "-r", rs.URL(), "orders")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "key  jobs  buried  error")
	stdout, stderr, code = runCLI(t, "ordered", "requeue", "-r", rs.URL(), "--all", "orders")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "requeued 0 jobs")
	_, stderr, code = runCLI(t, "ordered", "work", "-r", rs.URL(), "--shards", "8", "--exec", "Sync=true", "orders")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "has 4 shards, not 8")
	// gojob work's flags for Sidekiq queues are not flags of ordered work.
	_, stderr, code = runCLI(t, "ordered", "work", "-r", rs.URL(), "--limit", "Sync=1", "--exec", "Sync=true", "orders")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "flag provided but not defined: -limit")
}

// gojob ordered work has the flags an ordered worker uses and gojob work
// none of them; ordered work takes one QUEUE, after its flags. Every case
// is a usage error caught before Redis is reached.
func TestOrderedWorkFlagsAndArguments(t *testing.T) {
	// Not parallel: see the note on runCLI.
	app := newApp(io.Discard, io.Discard, nil)
	flagNames := func(cmd *ucli.Command) []string {
		var names []string
		for _, f := range cmd.Flags {
			names = append(names, f.Names()[0])
		}
		return names
	}
	var work, orderedWork *ucli.Command
	for _, c := range app.Commands {
		switch c.Name {
		case "work":
			work = c
		case "ordered":
			for _, sub := range c.Subcommands {
				if sub.Name == "work" {
					orderedWork = sub
				}
			}
		}
	}
	require.NotNil(t, work)
	require.NotNil(t, orderedWork)
	require.Equal(t, []string{"redis", "concurrency", "timeout", "shards", "lease", "max-retry-count", "batch-keys",
		"exec", "http", "log-json", "log-level"}, flagNames(orderedWork))
	for _, name := range []string{"ordered", "shards", "lease", "max-retry-count", "batch-keys"} {
		require.NotContains(t, flagNames(work), name, "gojob work --%s", name)
	}

	const nowhere = "redis://127.0.0.1:1/0"
	for _, c := range []struct {
		args []string
		err  string
	}{
		{[]string{"work", "-r", nowhere, "--ordered", "orders"}, "flag provided but not defined: -ordered"},
		{[]string{"ordered", "work", "-r", nowhere, "--exec", "A=true"}, "QUEUE is required"},
		{[]string{"ordered", "work", "-r", nowhere, "orders", "more", "--exec", "A=true"}, `want one QUEUE; got "orders more"`},
		{[]string{"ordered", "work", "-r", nowhere, "orders"}, "needs handlers"},
		{[]string{"ordered", "work", "-r", nowhere, "--fetch", "basic", "--exec", "A=true", "orders"}, "flag provided but not defined: -fetch"},
		{[]string{"ordered", "work", "-r", nowhere, "-c", "0", "--exec", "A=true", "orders"}, "must be at least 1"},
		{[]string{"ordered", "work", "-r", nowhere, "--exec", "A", "orders"}, `--exec "A": want CLASS=COMMAND`},
	} {
		out, errOut, code := runCLI(t, c.args...)
		require.Equal(t, exitUsage, code, "%v: %s", c.args, errOut)
		require.Empty(t, out, c.args)
		require.Contains(t, errOut, c.err, c.args)
	}
	// Flags after the queue are flags: this line parses and reaches Redis.
	_, errOut, code := runCLI(t, "ordered", "work", "-r", nowhere, "orders", "--exec", "A=true")
	require.Equal(t, exitUnreachable, code, errOut)
	out, _, code := runCLI(t, "ordered", "work", "--help")
	require.Equal(t, 0, code)
	require.Contains(t, out, "gojob ordered work [command options] QUEUE")
	out, _, code = runCLI(t, "ordered", "--help")
	require.Equal(t, 0, code)
	require.Contains(t, out, "work ")
}
