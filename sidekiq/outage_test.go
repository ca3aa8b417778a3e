package sidekiq

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/testlog"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq/wire"
)

// Redis is killed under a running server: the job that fails during the
// outage still gets its retry entry once Redis is back, jobs pushed after
// the restart run, and the outage is logged once.
func TestServerSurvivesRedisRestart(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	pool := rs.Pool(t)
	logs := testlog.New(t)
	srv, err := NewServer(&ServerConfig{
		Pool: pool, Concurrency: 4, DisablePoller: true, HeartbeatInterval: 50 * time.Millisecond,
		Logger: logs.Logger(),
	})
	require.NoError(t, err)
	inFlight := make(chan struct{})
	release := make(chan struct{})
	ran := make(chan string, 10)
	srv.Handle("Blocker", HandlerFunc(func(ctx context.Context, job *wire.Job) error {
		close(inFlight)
		<-release
		return errors.New("failed during the outage")
	}), nil)
	srv.Handle("After", HandlerFunc(func(ctx context.Context, job *wire.Job) error {
		ran <- job.JID()
		return nil
	}), nil)
	require.NoError(t, srv.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Stop(ctx)
	})
	conn, err := rs.Dial()
	require.NoError(t, err)
	_, err = conn.Do("LPUSH", "queue:default", `{"retry":true,"queue":"default","class":"Blocker","args":[],"jid":"blocker"}`)
	require.NoError(t, err)
	conn.Close()
	<-inFlight

	rs.Kill()
	close(release) // the job fails while Redis is down
	wait.For(t, "the outage noticed", func() bool { return logs.Count("error", "redis unavailable") > 0 })
	rs.Restart(t)

	conn, err = rs.Dial()
	require.NoError(t, err)
	defer conn.Close()
	wait.Within(t, 15*time.Second, "retry entry written after the outage", func() bool {
		n, _ := redis.Int(conn.Do("ZCARD", contract.KeyRetry))
		return n == 1
	})
	_, err = conn.Do("LPUSH", "queue:default", `{"retry":true,"queue":"default","class":"After","args":[],"jid":"after"}`)
	require.NoError(t, err)
	select {
	case jid := <-ran:
		require.Equal(t, "after", jid)
	case <-time.After(15 * time.Second):
		t.Fatal("job pushed after the restart did not run")
	}
	wait.For(t, "recovery logged", func() bool { return logs.Count("info", "redis is back") > 0 })
	require.Equal(t, 1, logs.Count("", "redis unavailable"), logs.String())
}
