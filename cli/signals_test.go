package cli

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/testlog"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq"
)

// TestBinaryOSSignals runs the real gojob binary: SIGTSTP quiets it (the
// Web UI sees quiet=true), SIGTERM stops it within -t, and the job it was
// running goes back to its queue with its original bytes.
func TestBinaryOSSignals(t *testing.T) {
	t.Parallel()
	bin := gojobBinary(t)

	srv := redistest.StartWith(t, redistest.Options{TCP: true})
	pool := srv.Pool(t)
	conn := pool.Get()
	defer conn.Close()
	client, err := sidekiq.NewClient(&sidekiq.ClientConfig{Pool: pool})
	require.NoError(t, err)
	res, err := client.Enqueue(context.Background(), "", "Sleepy")
	require.NoError(t, err)

	marker := filepath.Join(t.TempDir(), "started")
	cmd := exec.Command(bin, "work", "-r", srv.URL(), "-c", "2", "-t", "1", "--sidekiq-version", "6",
		"--exec", "Sleepy=touch "+marker+"; sleep 30")
	logs := testlog.New(nil)
	cmd.Stdout, cmd.Stderr = logs, logs
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() })

	wait.Within(t, 20*time.Second, "the job to start", func() bool { _, err := os.Stat(marker); return err == nil })
	var identity string
	wait.Within(t, 20*time.Second, "the process to register", func() bool {
		ids, _ := redis.Strings(conn.Do("SMEMBERS", "processes"))
		if len(ids) == 1 {
			identity = ids[0]
		}
		return identity != ""
	})
	require.NoError(t, cmd.Process.Signal(syscall.SIGTSTP))
	wait.Within(t, 20*time.Second, "quiet=true after SIGTSTP (next heartbeat, ≤5 s)", func() bool {
		q, _ := redis.String(conn.Do("HGET", identity, "quiet"))
		return q == "true"
	})
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-exited:
		require.NoError(t, err, logs.String())
	case <-time.After(20 * time.Second):
		t.Fatalf("gojob did not exit after SIGTERM:\n%s", logs.String())
	}
	vals, err := redis.Strings(conn.Do("LRANGE", "queue:default", 0, -1))
	require.NoError(t, err)
	require.Equal(t, []string{string(res.Payload)}, vals, "the running job is back in its queue, unchanged")
	n, _ := redis.Int(conn.Do("SCARD", "processes"))
	require.Zero(t, n)
	require.True(t, strings.Contains(logs.String(), "requeued unfinished jobs"), logs.String())
}
