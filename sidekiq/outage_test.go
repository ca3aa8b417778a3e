package sidekiq

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/redistest"
)

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestServerSurvivesRedisRestart kills Redis under a running server: the
// job that fails during the outage still gets its retry entry once Redis is
// back, jobs pushed after the restart run, and the outage is logged once.
func TestServerSurvivesRedisRestart(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	pool := rs.Pool(t)
	logs := &syncBuffer{}
	srv, err := NewServer(&ServerConfig{
		Pool: pool, Concurrency: 4, DisablePoller: true, HeartbeatInterval: 50 * time.Millisecond,
		Logger: zerolog.New(logs),
	})
	require.NoError(t, err)
	inFlight := make(chan struct{})
	release := make(chan struct{})
	ran := make(chan string, 10)
	srv.HandleFunc("Blocker", func(ctx context.Context, job *Job) error {
		close(inFlight)
		<-release
		return errors.New("failed during the outage")
	})
	srv.HandleFunc("After", func(ctx context.Context, job *Job) error {
		ran <- job.JID()
		return nil
	})
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
	time.Sleep(300 * time.Millisecond)
	rs.Restart(t)

	conn, err = rs.Dial()
	require.NoError(t, err)
	defer conn.Close()
	waitFor(t, "retry entry written after the outage", func() bool {
		n, _ := redis.Int(conn.Do("ZCARD", KeyRetry))
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
	waitFor(t, "recovery logged", func() bool { return strings.Contains(logs.String(), "redis is back") })
	require.Equal(t, 1, strings.Count(logs.String(), "redis unavailable"), logs.String())
}
