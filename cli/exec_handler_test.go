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
	cmd := exec.Command(bin, "work", "-r", srv.URL(), "-c", "1", "--sidekiq-version", "6",
		"--exec", "Sleepy=sleep 300 & echo $! > "+pidFile+"; wait")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	var pid int
	wait.For(t, "the command's grandchild to start", func() bool {
		b, err := os.ReadFile(pidFile)
		if err != nil || len(strings.TrimSpace(string(b))) == 0 {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	})
	require.False(t, processGone(pid))
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	cmd.Wait()
	wait.Within(t, 5*time.Second, "the grandchild to die with gojob", func() bool { return processGone(pid) })
}

// A command that calls exit ends its job at once (the guard's watcher does
// not keep the job waiting) with the exit status as the failure.
func TestExecCommandThatExitsFailsItsJob(t *testing.T) {
	t.Parallel()
	h := &ExecHandler{Command: "echo boom >&2; exit 3"}
	job, err := wire.NewJob("X")
	require.NoError(t, err)
	start := time.Now()
	err = h.Perform(context.Background(), job)
	var ee *ExecError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, 3, ee.ExitCode)
	require.Equal(t, "boom", ee.Message)
	require.Less(t, time.Since(start), 2*time.Second)
	require.NoError(t, (&ExecHandler{Command: "cat >/dev/null; true"}).Perform(context.Background(), job))
}
