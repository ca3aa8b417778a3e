package iterable

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/wire"
)

// walk records the items an iterable job ran, by jid.
type walk struct {
	mu    sync.Mutex
	items map[string][]int
}

func (w *walk) add(jid string, i int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.items == nil {
		w.items = map[string][]int{}
	}
	w.items[jid] = append(w.items[jid], i)
}

func (w *walk) of(jid string) []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]int(nil), w.items[jid]...)
}

type bundle struct {
	pool *redis.Pool
	conn redis.Conn
}

func newBundle(t *testing.T) *bundle {
	t.Helper()
	pool := redistest.Start(t).Pool(t)
	conn := pool.Get()
	t.Cleanup(func() { conn.Close() })
	return &bundle{pool: pool, conn: conn}
}

// server starts a server for the class Iter with h, stopped at the test's
// end unless the test stops it.
func (b *bundle) server(t *testing.T, h sidekiq.Handler) *sidekiq.Server {
	t.Helper()
	srv, err := sidekiq.NewServer(&sidekiq.ServerConfig{Pool: b.pool, Concurrency: 1, Logger: zerolog.Nop(),
		DisablePoller: true, Version: wire.Version8, Queues: []wire.QueueWeight{{Name: "default"}}})
	require.NoError(t, err)
	srv.Handle("Iter", h, nil)
	require.NoError(t, srv.Start(context.Background()))
	t.Cleanup(func() { srv.Stop(context.Background()) })
	return srv
}

func (b *bundle) push(t *testing.T, jid string, n int) {
	t.Helper()
	_, err := b.conn.Do("LPUSH", "queue:default",
		fmt.Sprintf(`{"retry":1,"queue":"default","args":[%d],"class":"Iter","jid":"%s","created_at":1795886865306,"enqueued_at":1795886865306}`, n, jid))
	require.NoError(t, err)
	_, err = b.conn.Do("SADD", "queues", "default")
	require.NoError(t, err)
}

func (b *bundle) state(t *testing.T, jid string) map[string]string {
	t.Helper()
	m, err := redis.StringMap(b.conn.Do("HGETALL", contract.IterationKey(jid)))
	require.NoError(t, err)
	return m
}

// upTo walks 0..args[0]-1.
func upTo(w *walk, hook func(ctx context.Context, i int)) func(ctx context.Context, job *wire.Job, cursor int) (int, bool, error) {
	return func(ctx context.Context, job *wire.Job, i int) (int, bool, error) {
		if hook != nil {
			hook(ctx, i)
		}
		w.add(job.JID(), i)
		n, _ := job.Args()[0].Int()
		return i + 1, int64(i+1) >= n, nil
	}
}

// A job walks its items once, in order, and leaves no state.
func TestJobWalksItsItemsAndLeavesNoState(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	w := &walk{}
	done := make(chan struct{})
	b.server(t, &Job[int]{Pool: b.pool, Each: upTo(w, func(_ context.Context, i int) {
		if i == 9 {
			close(done)
		}
	})})
	b.push(t, "a", 10)
	<-done
	wait.For(t, "the state removed", func() bool {
		n, _ := redis.Int(b.conn.Do("EXISTS", contract.IterationKey("a")))
		return n == 0 && len(w.of("a")) == 10
	})
	require.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, w.of("a"))
}

// A server that stops interrupts the job at the next item: its state is
// saved as Sidekiq saves it, the job goes back to its queue unchanged, and
// the next server resumes at the item that had not run.
func TestStopInterruptsAndTheNextServerResumes(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	w := &walk{}
	reached := make(chan struct{})
	first := b.server(t, &Job[int]{Pool: b.pool, Each: upTo(w, func(ctx context.Context, i int) {
		if i == 4 {
			close(reached)
			<-sidekiq.Stopping(ctx) // the server goes quiet while item 4 runs
		}
	})})
	b.push(t, "a", 10)
	<-reached
	require.NoError(t, first.Stop(context.Background()))
	require.Equal(t, []int{0, 1, 2, 3, 4}, w.of("a"))
	st := b.state(t, "a")
	// The fields, in the order Sidekiq 8.1.7 writes them at an interrupt.
	fields, err := redis.Strings(b.conn.Do("HKEYS", contract.IterationKey("a")))
	require.NoError(t, err)
	require.Equal(t, capturedFields(t, "../testdata/sidekiq-8.1.7-iterable/it-after-interrupt.txt"), fields)
	require.Equal(t, "1", st["ex"])
	require.Equal(t, "5", st["c"], "the cursor of the item that had not run")
	require.Regexp(t, `^[0-9]+\.[0-9]+(e-[0-9]+)?$`, st["rt"], "Ruby's Float#to_s")
	rt, err := strconv.ParseFloat(st["rt"], 64)
	require.NoError(t, err)
	require.Positive(t, rt)
	ttl, err := redis.Int(b.conn.Do("TTL", contract.IterationKey("a")))
	require.NoError(t, err)
	require.LessOrEqual(t, ttl, contract.IterationTTL)
	require.Greater(t, ttl, contract.IterationTTL-60)
	queued, err := redis.Strings(b.conn.Do("LRANGE", "queue:default", 0, -1))
	require.NoError(t, err)
	require.Len(t, queued, 1)
	require.Contains(t, queued[0], `"jid":"a"`)
	dead, _ := redis.Int(b.conn.Do("ZCARD", "retry"))
	require.Zero(t, dead, "an interruption is no failure to retry")

	b.server(t, &Job[int]{Pool: b.pool, Each: upTo(w, nil)})
	wait.For(t, "the job resumed and completed", func() bool { return len(w.of("a")) == 10 })
	require.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, w.of("a"), "no item skipped or repeated")
	wait.For(t, "the state removed", func() bool { return len(b.state(t, "a")) == 0 })
}

// MaxRuntime interrupts an execution; the job resumes in the same server,
// as a second execution.
func TestMaxRuntimeInterruptsAndResumes(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	w := &walk{}
	clk := &fakeClock{now: time.Unix(1795886865, 0)}
	execs := make(chan string, 4)
	b.server(t, &Job[int]{Pool: b.pool, MaxRuntime: time.Minute, Clock: clk.Now, Each: upTo(w, func(ctx context.Context, i int) {
		if i == 3 {
			clk.add(2 * time.Minute) // item 3 runs past MaxRuntime
		}
		if i == 4 {
			execs <- "resumed"
		}
	})})
	b.push(t, "a", 6)
	require.Equal(t, "resumed", <-execs)
	wait.For(t, "the job completed", func() bool { return len(w.of("a")) == 6 && len(b.state(t, "a")) == 0 })
	require.Equal(t, []int{0, 1, 2, 3, 4, 5}, w.of("a"))
}

// A failing item saves the state at that item (rt 0 during the first
// execution, as Sidekiq), the job retries as usual, and the retry resumes
// at the failed item.
func TestFailedItemRetriesFromIt(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	w := &walk{}
	failed := false
	b.server(t, &Job[int]{Pool: b.pool, Each: func(ctx context.Context, job *wire.Job, i int) (int, bool, error) {
		if i == 3 && !failed {
			failed = true
			return 0, false, fmt.Errorf("item %d failed", i)
		}
		w.add(job.JID(), i)
		return i + 1, i+1 >= 6, nil
	}})
	b.push(t, "d", 6)
	wait.For(t, "the retry entry", func() bool {
		n, _ := redis.Int(b.conn.Do("ZCARD", "retry"))
		return n == 1
	})
	require.Equal(t, map[string]string{"ex": "1", "c": "3", "rt": "0"}, b.state(t, "d"))
	// The retry, as the poller would push it.
	entries, err := redis.Strings(b.conn.Do("ZRANGE", "retry", 0, 0))
	require.NoError(t, err)
	_, err = b.conn.Do("ZREM", "retry", entries[0])
	require.NoError(t, err)
	_, err = b.conn.Do("LPUSH", "queue:default", entries[0])
	require.NoError(t, err)
	wait.For(t, "the retry completed", func() bool { return len(w.of("d")) == 6 && len(b.state(t, "d")) == 0 })
	require.Equal(t, []int{0, 1, 2, 3, 4, 5}, w.of("d"))
}

// A job cancelled before it starts (Sidekiq's cancel! on a queued job)
// ends as done without running an item, and its state goes.
func TestCancelledBeforeItStartsRunsNothing(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	w := &walk{}
	_, err := b.conn.Do("HSETNX", contract.IterationKey("c"), "cancelled", 1795886882)
	require.NoError(t, err)
	b.push(t, "c", 5)
	b.server(t, &Job[int]{Pool: b.pool, Each: upTo(w, nil)})
	wait.For(t, "the state removed", func() bool { return len(b.state(t, "c")) == 0 })
	require.Empty(t, w.of("c"))
	n, _ := redis.Int(b.conn.Do("ZCARD", "retry"))
	require.Zero(t, n)
}

// Sidekiq's cancel! of a running job (the field cancelled of it-<jid>) is
// seen at the next state flush: the job ends as done, its state gone.
func TestCancelWhileRunningEndsTheJob(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	w := &walk{}
	clk := &fakeClock{now: time.Unix(1795886865, 0)}
	b.server(t, &Job[int]{Pool: b.pool, Clock: clk.Now, Each: upTo(w, func(ctx context.Context, i int) {
		if i == 2 {
			conn := b.pool.Get()
			defer conn.Close()
			_, err := conn.Do("HSETNX", contract.IterationKey("b"), "cancelled", 1795886882)
			require.NoError(t, err)
			clk.add(flushInterval) // the next item flushes first
		}
	})})
	b.push(t, "b", 10)
	wait.For(t, "the state removed", func() bool {
		n, _ := redis.Int(b.conn.Do("EXISTS", contract.IterationKey("b")))
		return n == 0 && len(w.of("b")) == 3
	})
	require.Equal(t, []int{0, 1, 2}, w.of("b"))
	n, _ := redis.Int(b.conn.Do("ZCARD", "retry"))
	require.Zero(t, n, "a cancelled iterable job is done, not failed")
}

// capturedFields reads the field names of the first it-<jid> hash in a
// capture of Sidekiq's state.
func capturedFields(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var out []string
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "# it-"):
			in = true
		case strings.HasPrefix(line, "#"):
			if in {
				return out
			}
		case in:
			name, _, _ := strings.Cut(line, "\t")
			out = append(out, name)
		}
	}
	return out
}

// fakeClock is a Job.Clock that a test moves on.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}
