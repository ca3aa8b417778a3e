package sidekiq

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/redistest"
)

// clientList returns CLIENT LIST's lines whose last command is cmd.
func clientList(t *testing.T, c redis.Conn, clientCmd, cmd string) []string {
	t.Helper()
	out, err := redis.String(c.Do(clientCmd, "LIST"))
	require.NoError(t, err)
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, " cmd="+cmd+" ") {
			lines = append(lines, l)
		}
	}
	return lines
}

// blockedIn returns how many clients are blocked in cmd.
func blockedIn(t *testing.T, c redis.Conn, clientCmd, cmd string) int {
	n := 0
	for _, l := range clientList(t, c, clientCmd, cmd) {
		for _, f := range strings.Fields(l) {
			if flags, ok := strings.CutPrefix(f, "flags="); ok && strings.Contains(flags, "b") {
				n++
			}
		}
	}
	return n
}

// The BRPOPs of 20 slots travel on ceil(20/8) = 3 connections; every job
// is popped by one BRPOP and runs exactly once; nothing else pops.
func TestPipelinedFetchRunsEachJobOnce(t *testing.T) {
	t.Parallel()
	b := newTestServer(t, ServerConfig{Concurrency: 20, FetchPipeline: 8})
	const n = 3000
	var mu sync.Mutex
	runs := map[string]int{}
	var done atomic.Int64
	b.srv.HandleFunc("Job", func(ctx context.Context, job *Job) error {
		mu.Lock()
		runs[job.JID()]++
		mu.Unlock()
		done.Add(1)
		return nil
	})
	for i := 0; i < n; i++ {
		b.conn.Send("LPUSH", "queue:default", fmt.Sprintf(`{"class":"Job","args":[%d],"jid":"j%d","queue":"default"}`, i, i))
	}
	_, err := b.conn.Do("")
	require.NoError(t, err)
	b.start(t)
	waitFor(t, "every job run", func() bool { return done.Load() >= n })
	waitFor(t, "the 3 pipes blocked in BRPOP on the empty queue", func() bool {
		return blockedIn(t, b.conn, "CLIENT", "brpop") == 3
	})
	require.Len(t, clientList(t, b.conn, "CLIENT", "brpop"), 3, "one connection per 8 slots")
	require.Equal(t, 8, b.srv.FetchPipeline())
	mu.Lock()
	require.Len(t, runs, n)
	for jid, c := range runs {
		require.Equal(t, 1, c, jid)
	}
	mu.Unlock()
	require.GreaterOrEqual(t, commandCalls(t, b.conn, "brpop"), n)
	for _, other := range []string{"blmpop", "lmpop", "brpoplpush", "blmove", "lpop", "blpop"} {
		require.Zero(t, commandCalls(t, b.conn, other), other)
	}
	require.Zero(t, b.srv.failed.Load())
}

// FetchPipeline 1 is Ruby's layout: one connection per slot.
func TestPipelineOneIsAConnectionPerSlot(t *testing.T) {
	t.Parallel()
	b := newTestServer(t, ServerConfig{Concurrency: 5, FetchPipeline: 1})
	b.start(t)
	waitFor(t, "5 slots blocked in BRPOP", func() bool {
		return blockedIn(t, b.conn, "CLIENT", "brpop") == 5
	})
}

// At quiet, the BRPOPs waiting in a pipeline on an empty queue are ended
// with CLIENT UNBLOCK instead of timing out one after the other (8 × 2 s).
func TestPipelinedFetchQuietUnblocks(t *testing.T) {
	t.Parallel()
	b := newTestServer(t, ServerConfig{Concurrency: 8, FetchPipeline: 8})
	b.start(t)
	waitFor(t, "the pipe blocked in BRPOP", func() bool {
		return blockedIn(t, b.conn, "CLIENT", "brpop") == 1
	})
	stopped := make(chan error, 1)
	go func() { stopped <- b.srv.Stop(context.Background()) }()
	select {
	case err := <-stopped:
		require.NoError(t, err)
	case <-time.After(2*fetchTimeout*time.Second - 500*time.Millisecond):
		// Without UNBLOCK the 8 pipelined BRPOPs would take 16 s.
		t.Fatal("stop waited for the pipelined BRPOPs to time out")
	}
	require.Positive(t, commandCalls(t, b.conn, "client|unblock"))
	require.Zero(t, blockedIn(t, b.conn, "CLIENT", "brpop"))
}

// Where CLIENT is not allowed, each slot gets its own connection, as in
// Ruby, and quiet waits for the BRPOP timeouts. A job pushed while they are
// still waiting is popped after quiet and must be pushed back, not run and
// not lost.
func TestFetchWithoutClientCommandRequeues(t *testing.T) {
	t.Parallel()
	rs := redistest.StartWith(t, redistest.Options{Args: []string{"--rename-command", "CLIENT", "testclient"}})
	pool := rs.Pool(t)
	srv, err := NewServer(&ServerConfig{
		Pool: pool, Concurrency: 2, FetchPipeline: 2, DisablePoller: true,
		HeartbeatInterval: time.Hour, Logger: zerolog.New(zerolog.NewTestWriter(t)),
	})
	require.NoError(t, err)
	var ran atomic.Int64
	srv.HandleFunc("Job", func(ctx context.Context, job *Job) error {
		ran.Add(1)
		return nil
	})
	require.NoError(t, srv.Start(context.Background()))
	conn := pool.Get()
	defer conn.Close()
	waitFor(t, "a connection per slot blocked in BRPOP", func() bool { return blockedIn(t, conn, "testclient", "brpop") == 2 })
	require.Equal(t, 1, srv.FetchPipeline())
	srv.Quiet()
	require.Equal(t, 2, blockedIn(t, conn, "testclient", "brpop"), "still waiting for their timeouts after quiet")
	payload := `{"class":"Job","args":[],"jid":"late","queue":"default"}`
	_, err = conn.Do("LPUSH", "queue:default", payload)
	require.NoError(t, err)
	require.NoError(t, srv.Stop(context.Background()))
	require.Zero(t, ran.Load(), "a job fetched after quiet must not run")
	require.Positive(t, commandCalls(t, conn, "rpush"), "the job was popped and pushed back")
	vals, err := redis.Strings(conn.Do("LRANGE", "queue:default", 0, -1))
	require.NoError(t, err)
	require.Equal(t, []string{payload}, vals)
	require.Zero(t, blockedIn(t, conn, "testclient", "brpop"))
}

// An error reply in the middle of a pipeline (a queue key that is not a
// list) does not desynchronise the connection: the job on the good queue
// runs once the bad key is gone.
func TestPipelinedFetchErrorReply(t *testing.T) {
	t.Parallel()
	b := newTestServer(t, ServerConfig{Concurrency: 4, FetchPipeline: 4,
		Queues: []QueueWeight{{Name: "bad"}, {Name: "good"}}})
	_, err := b.conn.Do("SET", "queue:bad", "not a list")
	require.NoError(t, err)
	ran := make(chan string, 1)
	b.srv.HandleFunc("Job", func(ctx context.Context, job *Job) error {
		ran <- job.JID()
		return nil
	})
	b.start(t)
	waitFor(t, "BRPOP failing on the bad key", func() bool { return commandCalls(t, b.conn, "brpop") >= 4 })
	b.push(t, "good", `{"class":"Job","args":[],"jid":"good1","queue":"good"}`)
	_, err = b.conn.Do("DEL", "queue:bad")
	require.NoError(t, err)
	select {
	case jid := <-ran:
		require.Equal(t, "good1", jid)
	case <-time.After(15 * time.Second):
		t.Fatal("the job did not run after the bad key was removed")
	}
}

// An ACL that denies CLIENT UNBLOCK (NOPERM) gives Ruby's layout too.
func TestFetchWhenACLDeniesUnblock(t *testing.T) {
	t.Parallel()
	b := newTestServer(t, ServerConfig{Concurrency: 4, FetchPipeline: 4})
	_, err := b.conn.Do("ACL", "SETUSER", "default", "-client|unblock")
	require.NoError(t, err)
	b.start(t)
	waitFor(t, "a connection per slot blocked in BRPOP", func() bool {
		return blockedIn(t, b.conn, "CLIENT", "brpop") == 4
	})
	require.Equal(t, 1, b.srv.FetchPipeline())
}

// A stop in the middle of a busy drain loses and duplicates nothing: every
// job either ran once or is back in the queue, whatever the pipelines had
// in flight when quiet came.
func TestPipelinedFetchStopUnderLoadLosesNothing(t *testing.T) {
	t.Parallel()
	for _, depth := range []int{1, 8} {
		t.Run(fmt.Sprint("pipeline", depth), func(t *testing.T) {
			t.Parallel()
			b := newTestServer(t, ServerConfig{Concurrency: 25, FetchPipeline: depth})
			const n = 20000
			var mu sync.Mutex
			ran := map[string]int{}
			b.srv.HandleFunc("Job", func(ctx context.Context, job *Job) error {
				mu.Lock()
				ran[job.JID()]++
				mu.Unlock()
				return nil
			})
			for i := 0; i < n; i++ {
				b.conn.Send("LPUSH", "queue:default", fmt.Sprintf(`{"class":"Job","args":[],"jid":"j%d","queue":"default"}`, i))
			}
			_, err := b.conn.Do("")
			require.NoError(t, err)
			require.NoError(t, b.srv.Start(context.Background()))
			waitFor(t, "a few thousand jobs run", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(ran) >= 3000
			})
			require.NoError(t, b.srv.Stop(context.Background()))
			left, err := redis.Strings(b.conn.Do("LRANGE", "queue:default", 0, -1))
			require.NoError(t, err)
			mu.Lock()
			defer mu.Unlock()
			require.Less(t, len(ran), n, "stopped before the queue was drained")
			for jid, c := range ran {
				require.Equal(t, 1, c, jid)
			}
			for _, raw := range left {
				job, err := ParseJob([]byte(raw))
				require.NoError(t, err)
				require.Zero(t, ran[job.JID()], "%s ran and is still queued", job.JID())
			}
			require.Equal(t, n, len(ran)+len(left))
			require.EqualValues(t, len(ran), b.srv.processed.Load()+flushedProcessed(t, b.conn))
		})
	}
}

func flushedProcessed(t *testing.T, c redis.Conn) int64 {
	n, err := redis.Int64(c.Do("GET", KeyStatProcessed))
	if err == redis.ErrNil {
		return 0
	}
	require.NoError(t, err)
	return n
}
