package cli

import (
	"syscall"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq/wire"
)

// The reproduction: a due scheduled member that parses but fails
// the client's validation (args is a hash) goes to the dead set unchanged;
// a valid job due 5 s later still runs; the log never calls it a Redis
// outage; SIGTERM stops the process at once with status 0.
func TestInvalidScheduledJobDoesNotBlockThePoller(t *testing.T) {
	t.Parallel()
	rs := redistest.StartWith(t, redistest.Options{TCP: true})
	conn := rs.Pool(t).Get()
	defer conn.Close()
	now := time.Now()
	invalid := `{"class":"Good","args":{"a":1},"jid":"aaaaaaaaaaaaaaaaaaaaaaaa","queue":"default"}`
	valid := `{"class":"Good","args":[1],"jid":"bbbbbbbbbbbbbbbbbbbbbbbb","queue":"default","retry":true}`
	_, err := conn.Do("ZADD", "schedule", wire.Score(now.Add(-10*time.Second)), invalid, wire.Score(now.Add(5*time.Second)), valid)
	require.NoError(t, err)
	runs := newRunLog(t)
	// The poller's first pass comes 10-15 s after start, as in Ruby.
	w := startWorker(t, rs.URL(), "-c", "2", "--exec", runs.execArg("Good"))
	wait.Within(t, 40*time.Second, "the valid job to run", func() bool { return runs.counts(t)["bbbbbbbbbbbbbbbbbbbbbbbb"] == 1 })
	dead, err := redis.Strings(conn.Do("ZRANGE", "dead", 0, -1))
	require.NoError(t, err)
	require.Equal(t, []string{invalid}, dead)
	stopped := time.Now()
	require.NoError(t, w.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, w.wait(), w.logs.String())
	require.Less(t, time.Since(stopped), 5*time.Second)
	require.Zero(t, w.logs.Count("", "redis unavailable"), w.logs.String())
	require.Equal(t, 1, w.logs.Count("", "cannot be pushed"), w.logs.String())
}
