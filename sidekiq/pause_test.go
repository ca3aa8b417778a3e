package sidekiq

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq/wire"
)

// A paused queue is not fetched from, in every fetch mode, while the other
// queues drain (strict order would otherwise try it first); jobs a fetch
// already had on its way go back; unpausing lets it drain.
func TestPausedQueueIsNotFetchedWhileOthersDrain(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"basic", "batch", "reliable"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			b := newTestServer(t, ServerConfig{Concurrency: 4, Fetch: mode,
				Queues: []wire.QueueWeight{{Name: "first"}, {Name: "second"}}})
			var mu sync.Mutex
			ran := map[string]int{}
			b.srv.Handle("Job", HandlerFunc(func(ctx context.Context, job *wire.Job) error {
				mu.Lock()
				ran[job.Queue()]++
				mu.Unlock()
				return nil
			}), nil)
			_, err := b.conn.Do("SADD", contract.KeyPausedQueues, "first")
			require.NoError(t, err)
			for i := range 50 {
				b.push(t, "first", fmt.Sprintf(`{"class":"Job","args":[],"jid":"f%022d","queue":"first","retry":true}`, i))
				b.push(t, "second", fmt.Sprintf(`{"class":"Job","args":[],"jid":"s%022d","queue":"second","retry":true}`, i))
			}
			b.start(t)
			wait.For(t, "the second queue drained", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return ran["second"] == 50
			})
			time.Sleep(300 * time.Millisecond)
			mu.Lock()
			require.Zero(t, ran["first"], "nothing of the paused queue ran")
			mu.Unlock()
			n, err := redis.Int(b.conn.Do("LLEN", contract.QueueKey("first")))
			require.NoError(t, err)
			require.Equal(t, 50, n)

			_, err = b.conn.Do("SREM", contract.KeyPausedQueues, "first")
			require.NoError(t, err)
			wait.For(t, "the first queue drained after the unpause", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return ran["first"] == 50
			})
		})
	}
}

// With its only queue paused a server waits; a job pushed while a fetch
// is blocked is not started within the pause (the blocked fetch pushes it
// back), and runs once the queue is unpaused.
func TestPauseOfTheOnlyQueueHoldsJobsPushedDuringIt(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"basic", "reliable"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			b := newTestServer(t, ServerConfig{Concurrency: 2, Fetch: mode})
			var mu sync.Mutex
			var starts []time.Time
			b.srv.Handle("Job", HandlerFunc(func(ctx context.Context, job *wire.Job) error {
				mu.Lock()
				starts = append(starts, time.Now())
				mu.Unlock()
				return nil
			}), nil)
			b.start(t)
			// The slots are blocked in their fetch now; pause, give the
			// watcher its half second, then push.
			_, err := b.conn.Do("SADD", contract.KeyPausedQueues, "default")
			require.NoError(t, err)
			time.Sleep(time.Second)
			b.push(t, "default", `{"class":"Job","args":[],"jid":"aaaaaaaaaaaaaaaaaaaaaaaa","queue":"default","retry":true}`)
			time.Sleep(2500 * time.Millisecond) // beyond a blocked fetch's 2 s timeout
			mu.Lock()
			require.Empty(t, starts, "no job started while paused")
			mu.Unlock()
			n, err := redis.Int(b.conn.Do("LLEN", contract.QueueKey("default")))
			require.NoError(t, err)
			require.Equal(t, 1, n, "the job is in its queue")
			unpaused := time.Now()
			_, err = b.conn.Do("SREM", contract.KeyPausedQueues, "default")
			require.NoError(t, err)
			wait.For(t, "the job to run", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(starts) == 1
			})
			mu.Lock()
			require.Less(t, starts[0].Sub(unpaused), 2*time.Second)
			mu.Unlock()
		})
	}
}
