package cli

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/wire"
)

// processGone reports whether pid has exited (a zombie counts: it runs no
// more).
func processGone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && len(s) > i+2 && s[i+2] == 'Z'
}

// An --exec command, and what it started, dies with its gojob, kill -9
// included, so that a job another process recovers never runs twice at
// the same time.
func TestExecChildrenDieWithGojob(t *testing.T) {
	t.Parallel()
	bin := gojobBinary(t)
	srv := redistest.StartWith(t, redistest.Options{TCP: true})
	pool := srv.Pool(t)
	client, err := sidekiq.NewClient(&sidekiq.ClientConfig{Pool: pool})
	require.NoError(t, err)
	_, err = client.Enqueue(context.Background(), "", "Sleepy")
	require.NoError(t, err)
	pidFile := filepath.Join(t.TempDir(), "pid")
	// One grandchild in the command's process group, one that left it
	// with setsid.
	cmd := exec.Command(bin, "work", "-r", srv.URL(), "-c", "1", "--sidekiq-version", "6",
		"--exec", "Sleepy=sleep 300 & echo $! > "+pidFile+"; setsid sleep 301 & echo $! >> "+pidFile+"; wait")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	pids := waitPIDs(t, pidFile, 2)
	for _, pid := range pids {
		require.False(t, processGone(pid))
	}
	t.Cleanup(func() {
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	cmd.Wait()
	for _, pid := range pids {
		wait.Within(t, 5*time.Second, "the grandchildren to die with gojob", func() bool { return processGone(pid) })
	}
}

// waitPIDs waits for n pids, one per line, in file.
func waitPIDs(t *testing.T, file string, n int) []int {
	t.Helper()
	var pids []int
	wait.For(t, "the command's grandchildren to start", func() bool {
		b, err := os.ReadFile(file)
		if err != nil {
			return false
		}
		pids = pids[:0]
		for _, f := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(f)
			if err != nil {
				return false
			}
			pids = append(pids, pid)
		}
		return len(pids) == n
	})
	return pids
}

// A cancelled job (its timeout, a hard shutdown) ends its command and
// everything the command started, a descendant that left the process
// group with setsid included.
func TestExecCancellationKillsEveryDescendant(t *testing.T) {
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "pid")
	h := &execHandler{Command: "sleep 300 & echo $! > " + pidFile + "; setsid sleep 301 & echo $! >> " + pidFile + "; wait"}
	job, err := wire.NewJob("X")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Perform(ctx, job) }()
	pids := waitPIDs(t, pidFile, 2)
	t.Cleanup(func() {
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	cancel()
	select {
	case err := <-done:
		require.ErrorContains(t, err, "cancelled")
	case <-time.After(10 * time.Second):
		t.Fatal("the cancelled job did not end")
	}
	for _, pid := range pids {
		wait.Within(t, 5*time.Second, "the descendants to die with the cancellation", func() bool { return processGone(pid) })
	}
}

// A command that calls exit ends its job at once (the guard's watcher does
// not keep the job waiting) with the exit status as the failure.
func TestExecCommandThatExitsFailsItsJob(t *testing.T) {
	t.Parallel()
	h := &execHandler{Command: "echo boom >&2; exit 3"}
	job, err := wire.NewJob("X")
	require.NoError(t, err)
	start := time.Now()
	err = h.Perform(context.Background(), job)
	var ee *execError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, 3, ee.ExitCode)
	require.Equal(t, "boom", ee.Message)
	require.Less(t, time.Since(start), 2*time.Second)
	require.NoError(t, (&execHandler{Command: "cat >/dev/null; true"}).Perform(context.Background(), job))
}
