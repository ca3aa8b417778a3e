package cli

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq"
)

// `gojob work` drops a Sidekiq Pro client's job whose expires_at has
// passed, unrun, and runs the others.
func TestWorkDropsExpiredProJobs(t *testing.T) {
	t.Parallel()
	bin := gojobBinary(t)
	srv := redistest.StartWith(t, redistest.Options{TCP: true})
	pool := srv.Pool(t)
	conn := pool.Get()
	defer conn.Close()
	past := strconv.FormatInt(time.Now().Add(-time.Hour).Unix(), 10) + ".5"
	_, err := conn.Do("LPUSH", "queue:default", `{"retry":true,"queue":"default","class":"Digest","args":["expired"],"jid":"0123456789abcdef01234567","created_at":`+past+`,"expires_at":`+past+`,"enqueued_at":`+past+`}`)
	require.NoError(t, err)
	client, err := sidekiq.NewClient(&sidekiq.ClientConfig{Pool: pool})
	require.NoError(t, err)
	_, err = client.Enqueue(context.Background(), "", "Digest", "fresh")
	require.NoError(t, err)
	ran := filepath.Join(t.TempDir(), "ran")
	cmd := exec.Command(bin, "work", "-r", srv.URL(), "-c", "1", "--sidekiq-version", "6",
		"--exec", "Digest=echo ran >> "+ran)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	wait.For(t, "both jobs processed", func() bool {
		n, _ := redis.Int(conn.Do("GET", "stat:processed"))
		return n == 2
	})
	b, err := os.ReadFile(ran)
	require.NoError(t, err)
	require.Equal(t, 1, strings.Count(string(b), "ran"), "only the unexpired job runs")
	n, err := redis.Int(conn.Do("ZCARD", "retry"))
	require.NoError(t, err)
	require.Zero(t, n)
}
