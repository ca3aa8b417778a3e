package cli

import (
	"os/exec"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/wait"
)

// `gojob work` alone in a Redis that shows no Sidekiq version (auto, the
// default) writes what every Web UI reads: its running job under both
// work-hash keys, a version in its info, the 8.1.2+ concurrency field. It
// says so in its log and records the decision for the next start.
func TestWorkAloneWritesForEveryWebUI(t *testing.T) {
	t.Parallel()
	rs := redistest.StartWith(t, redistest.Options{TCP: true})
	pool := rs.Pool(t)
	conn := pool.Get()
	defer conn.Close()
	w := startWorker(t, rs.URL(), "--sidekiq-version", "auto", "-c", "2", "--exec", "Slow=sleep 30")
	id := w.Identity(t)
	_, err := conn.Do("LPUSH", "queue:default", `{"retry":true,"queue":"default","class":"Slow","args":[],"jid":"slow00000000000000000001","created_at":1795443862.1}`)
	require.NoError(t, err)
	// The job shows at the next beat (5 s in 6.x, 10 s from 7.0).
	wait.Within(t, 15*time.Second, "the running job in both work hashes", func() bool {
		n, _ := redis.Int(conn.Do("EXISTS", id+":work", id+":workers"))
		return n == 2
	})
	for _, key := range []string{id + ":work", id + ":workers"} {
		work, err := redis.StringMap(conn.Do("HGETALL", key))
		require.NoError(t, err)
		require.Len(t, work, 1, key)
		for _, v := range work {
			require.Contains(t, v, `slow00000000000000000001`)
		}
	}
	h, err := redis.StringMap(conn.Do("HGETALL", id))
	require.NoError(t, err)
	require.Contains(t, h["info"], `"version":"7.3.10"`)
	require.Equal(t, "2", h["concurrency"])
	require.Contains(t, w.Logs.String(), "every Web UI")
	rec, err := redis.String(conn.Do("GET", contract.KeyRecordedFormat))
	require.NoError(t, err)
	require.Contains(t, rec, `"for_all":true`)
}

// An explicit --sidekiq-version 8 over a live 7.x process fails at start
// with exit code 2 and says how to force it; --force-version starts anyway
// and logs the problem.
func TestWorkRefusesAVersionLiveProcessesCannotRead(t *testing.T) {
	t.Parallel()
	rs := redistest.StartWith(t, redistest.Options{TCP: true})
	conn := rs.Pool(t).Get()
	defer conn.Close()
	_, err := conn.Do("SADD", contract.KeyProcesses, "ruby:9:bbbbbbbbbbbb")
	require.NoError(t, err)
	_, err = conn.Do("HSET", "ruby:9:bbbbbbbbbbbb", "info", `{"hostname":"ruby","version":"7.3.10"}`)
	require.NoError(t, err)

	w := startWorker(t, rs.URL(), "--sidekiq-version", "8")
	err = w.Wait()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, w.Logs.String())
	require.Equal(t, 2, exit.ExitCode(), w.Logs.String())
	require.Contains(t, w.Logs.String(), "--force-version")
	require.Contains(t, w.Logs.String(), "ruby:9:bbbbbbbbbbbb=7.3.10")

	forced := startWorker(t, rs.URL(), "--sidekiq-version", "8", "--force-version")
	forced.Identity(t)
	require.Contains(t, forced.Logs.String(), "ERR live Sidekiq processes cannot read")
	require.Contains(t, forced.Logs.String(), "writing it anyway")
}
