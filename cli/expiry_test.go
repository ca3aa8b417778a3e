package cli

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/wire"
)

// `gojob work` drops a Sidekiq Pro client's job whose expires_at has
// passed, unrun, runs the others, and counts the dropped ones in
// gojob_jobs_expired_total.
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(bin, "work", "-r", srv.URL(), "-c", "1", "--sidekiq-version", "6",
		"--exec", "Digest=echo ran >> "+ran, "--metrics-addr", addr)
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
	res, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	require.Contains(t, string(body), "\ngojob_jobs_expired_total{class=\"Digest\"} 1\n")
}

// `gojob push --expires-in` and a line's "expires_in" write expires_at,
// counted from the time the job is due, as Sidekiq Pro's client does.
func TestPushExpiresIn(t *testing.T) {
	t.Parallel()
	srv := redistest.StartWith(t, redistest.Options{TCP: true})
	conn, err := srv.Dial()
	require.NoError(t, err)
	defer conn.Close()
	expiresAt := func(payload string) float64 {
		j, err := wire.ParseJob([]byte(payload))
		require.NoError(t, err)
		require.False(t, j.Has("expires_in"), payload)
		v, ok := j.Get("expires_at")
		require.True(t, ok, payload)
		f, _ := v.Float()
		return f
	}
	near := func(want time.Time, got float64) {
		t.Helper()
		require.InDelta(t, float64(want.Unix()), got, 60)
	}

	before := time.Now()
	_, errOut, code := gojobStdin(t, "", "push", "-r", srv.URL(), "-q", "exp", "Digest", "1", "--expires-in", "1h")
	require.Equal(t, 0, code, errOut)
	_, errOut, code = gojobStdin(t, "", "push", "-r", srv.URL(), "Digest", "2", "--in", "2h", "--expires-in", "1h")
	require.Equal(t, 0, code, errOut)
	_, errOut, code = gojobStdin(t, `{"class":"Digest","args":[3],"queue":"exp","expires_in":60}
{"class":"Digest","args":[4],"in":"2h","expires_in":"30m"}
`, "push", "-", "-r", srv.URL())
	require.Equal(t, 0, code, errOut)

	queued, err := redis.Strings(conn.Do("LRANGE", "queue:exp", 0, -1))
	require.NoError(t, err)
	require.Len(t, queued, 2)
	near(before.Add(time.Hour), expiresAt(queued[1]))
	near(before.Add(time.Minute), expiresAt(queued[0]))
	require.Contains(t, queued[1], `"expires_at":`)
	scheduled, err := redis.Strings(conn.Do("ZRANGE", "schedule", 0, -1))
	require.NoError(t, err)
	require.Len(t, scheduled, 2)
	got := []float64{expiresAt(scheduled[0]), expiresAt(scheduled[1])}
	slices.Sort(got)
	near(before.Add(150*time.Minute), got[0])
	near(before.Add(3*time.Hour), got[1])

	_, errOut, code = gojobStdin(t, "", "push", "-r", srv.URL(), "Digest", "--key", "k", "--expires-in", "1m")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "--key takes no --expires-in")
	_, errOut, code = gojobStdin(t, `{"class":"Digest","expires_in":"soon"}`+"\n", "push", "-", "-r", srv.URL())
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, `"expires_in" must be seconds or a duration`)
}
