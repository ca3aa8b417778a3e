package fetch

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq/wire"
)

// The BRPOPs of 20 slots travel on ceil(20/8) = 3 connections; every job
// is popped by one BRPOP and processed exactly once; nothing else pops.
func TestBRPOPProcessesEachJobOnceOverSharedConnections(t *testing.T) {
	t.Parallel()
	b := newFetchBundle(t, nil, func(c *Config) { c.Concurrency, c.Pipeline = 20, 8 })
	const n = 3000
	for i := 0; i < n; i++ {
		b.conn.Send("LPUSH", "queue:default", fmt.Sprintf(`{"class":"Job","args":[%d],"jid":"j%d","queue":"default"}`, i, i))
	}
	_, err := b.conn.Do("")
	require.NoError(t, err)
	f := NewBRPOP(b.cfg)
	require.Equal(t, 8, f.Depth())
	b.start(t, f)
	wait.For(t, "every job processed", func() bool { return b.processed() >= n })
	wait.For(t, "the 3 pipes blocked in BRPOP on the empty queue", func() bool {
		return redistest.BlockedIn(t, b.conn, "CLIENT", "brpop") == 3
	})
	require.Len(t, redistest.Clients(t, b.conn, "CLIENT", "brpop"), 3, "one connection per 8 slots")
	b.mu.Lock()
	require.Len(t, b.runs, n)
	for raw, c := range b.runs {
		require.Equal(t, 1, c, raw)
	}
	b.mu.Unlock()
	require.GreaterOrEqual(t, redistest.CommandCalls(t, b.conn, "brpop"), n)
	for _, other := range []string{"blmpop", "lmpop", "brpoplpush", "blmove", "lpop", "blpop"} {
		require.Zero(t, redistest.CommandCalls(t, b.conn, other), other)
	}
}

// Pipeline 1 is Ruby's layout: one connection per slot.
func TestBRPOPPipelineOneIsAConnectionPerSlot(t *testing.T) {
	t.Parallel()
	b := newFetchBundle(t, nil, func(c *Config) { c.Concurrency, c.Pipeline = 5, 1 })
	f := NewBRPOP(b.cfg)
	require.Equal(t, 1, f.Depth())
	b.start(t, f)
	wait.For(t, "5 slots blocked in BRPOP", func() bool {
		return redistest.BlockedIn(t, b.conn, "CLIENT", "brpop") == 5
	})
}

// At quiet, the BRPOPs waiting in a pipeline on an empty queue are ended
// with CLIENT UNBLOCK instead of timing out one after the other (8 × 2 s).
func TestBRPOPQuietUnblocksPipelinedBRPOPs(t *testing.T) {
	t.Parallel()
	b := newFetchBundle(t, nil, func(c *Config) { c.Concurrency, c.Pipeline = 8, 8 })
	f := NewBRPOP(b.cfg)
	b.start(t, f)
	wait.For(t, "the pipe blocked in BRPOP", func() bool {
		return redistest.BlockedIn(t, b.conn, "CLIENT", "brpop") == 1
	})
	stopped := make(chan struct{})
	go func() { b.quietNow(); f.Wait(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(2*Timeout*time.Second - 500*time.Millisecond):
		// Without UNBLOCK the 8 pipelined BRPOPs would take 16 s.
		t.Fatal("quiet waited for the pipelined BRPOPs to time out")
	}
	require.Positive(t, redistest.CommandCalls(t, b.conn, "client|unblock"))
	require.Zero(t, redistest.BlockedIn(t, b.conn, "CLIENT", "brpop"))
}

// Where CLIENT is not allowed, each slot gets its own connection, as in
// Ruby, and quiet waits for the BRPOP timeouts. A job pushed while they are
// still waiting is popped after quiet and must be pushed back, not
// processed and not lost.
func TestBRPOPWithoutClientCommandPushesBackALateJob(t *testing.T) {
	t.Parallel()
	rs := redistest.StartWith(t, redistest.Options{Args: []string{"--rename-command", "CLIENT", "testclient"}})
	b := newFetchBundle(t, rs, func(c *Config) { c.Concurrency, c.Pipeline = 2, 2 })
	f := NewBRPOP(b.cfg)
	require.Equal(t, 1, f.Depth())
	b.start(t, f)
	wait.For(t, "a connection per slot blocked in BRPOP", func() bool {
		return redistest.BlockedIn(t, b.conn, "testclient", "brpop") == 2
	})
	b.quietNow()
	require.Equal(t, 2, redistest.BlockedIn(t, b.conn, "testclient", "brpop"), "still waiting for their timeouts after quiet")
	payload := `{"class":"Job","args":[],"jid":"late","queue":"default"}`
	_, err := b.conn.Do("LPUSH", "queue:default", payload)
	require.NoError(t, err)
	f.Wait()
	require.Zero(t, b.processed(), "a job fetched after quiet must not be processed")
	require.Positive(t, redistest.CommandCalls(t, b.conn, "rpush"), "the job was popped and pushed back")
	require.Equal(t, []string{payload}, b.queue(t, "default"))
	require.Zero(t, redistest.BlockedIn(t, b.conn, "testclient", "brpop"))
}

// An error reply in the middle of a pipeline (a queue key that is not a
// list) does not desynchronise the connection: the job on the good queue
// is processed once the bad key is gone.
func TestBRPOPErrorReplyDoesNotDesynchroniseThePipeline(t *testing.T) {
	t.Parallel()
	b := newFetchBundle(t, nil, func(c *Config) {
		c.Concurrency, c.Pipeline = 4, 4
		c.Order = NewOrder([]wire.QueueWeight{{Name: "bad"}, {Name: "good"}}, wire.Version6)
	})
	_, err := b.conn.Do("SET", "queue:bad", "not a list")
	require.NoError(t, err)
	b.start(t, NewBRPOP(b.cfg))
	wait.For(t, "BRPOP failing on the bad key", func() bool { return redistest.CommandCalls(t, b.conn, "brpop") >= 4 })
	_, err = b.conn.Do("LPUSH", "queue:good", "good1")
	require.NoError(t, err)
	_, err = b.conn.Do("DEL", "queue:bad")
	require.NoError(t, err)
	wait.Within(t, 15*time.Second, "the good job processed after the bad key was removed", func() bool { return b.processed() == 1 })
}

// An ACL that denies CLIENT UNBLOCK (NOPERM) gives Ruby's layout too.
func TestBRPOPWhenACLDeniesUnblockUsesAConnectionPerSlot(t *testing.T) {
	t.Parallel()
	b := newFetchBundle(t, nil, func(c *Config) { c.Concurrency, c.Pipeline = 4, 4 })
	_, err := b.conn.Do("ACL", "SETUSER", "default", "-client|unblock")
	require.NoError(t, err)
	f := NewBRPOP(b.cfg)
	require.Equal(t, 1, f.Depth())
	b.start(t, f)
	wait.For(t, "a connection per slot blocked in BRPOP", func() bool {
		return redistest.BlockedIn(t, b.conn, "CLIENT", "brpop") == 4
	})
}
