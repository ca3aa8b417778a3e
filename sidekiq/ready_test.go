package sidekiq

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq/wire"
)

// A server whose fetch fails while its other commands succeed (a Redis
// that refuses the fetch's commands, as a wedged fetch would) is not
// ready and reports Redis down, with the reason; its heartbeat keeps
// running all the while.
func TestServerWhoseFetchFailsIsNotReady(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"reliable", "basic"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			rs := redistest.StartWith(t, redistest.Options{Args: []string{
				"--rename-command", "LMOVE", "", "--rename-command", "RPOPLPUSH", "", "--rename-command", "BRPOP", ""}})
			s, err := NewServer(&ServerConfig{Pool: rs.Pool(t), Fetch: mode, Concurrency: 2, DisablePoller: true,
				HeartbeatInterval: 50 * time.Millisecond, Logger: zerolog.New(zerolog.NewTestWriter(t))})
			require.NoError(t, err)
			require.Error(t, s.Ready(context.Background()), "not running")
			require.NoError(t, s.Start(context.Background()))
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				s.Stop(ctx)
			})
			wait.For(t, "not ready", func() bool {
				err := s.Ready(context.Background())
				return err != nil && s.redisDown()
			})
			require.ErrorContains(t, s.Ready(context.Background()), "fetching from redis has failed for")
			conn := rs.Pool(t).Get()
			defer conn.Close()
			_, err = conn.Do("DEL", s.Identity())
			require.NoError(t, err)
			wait.For(t, "the heartbeat goes on", func() bool {
				n, _ := conn.Do("EXISTS", s.Identity())
				return n.(int64) == 1
			})
		})
	}
}

// Slots free, jobs waiting in the server's unpaused queues, and no job
// started for stuckAfter: the server is not ready, and says how many jobs
// wait where. A busy server, one whose waiting queue is paused, and one
// that started a job lately are ready.
func TestServerWithJobsWaitingAndNoneStartingIsNotReady(t *testing.T) {
	t.Parallel()
	b := newTestServer(t, ServerConfig{Concurrency: 2, Queues: []wire.QueueWeight{{Name: "a"}, {Name: "b"}}})
	s := b.srv
	s.life.state.Store(stateRunning) // running, without a fetch that would take the jobs
	s.fetch.running.Store(true)
	b.push(t, "b", `{"class":"X","args":[],"jid":"w1","queue":"b"}`)
	b.push(t, "b", `{"class":"X","args":[],"jid":"w2","queue":"b"}`)
	ctx := context.Background()
	require.NoError(t, s.readyAt(ctx, 0), "the first look: no job started yet, but none was due")
	s.fetch.progress.seen = time.Now().Add(-time.Minute) // nothing started for a minute
	require.ErrorContains(t, s.readyAt(ctx, 0), "2 jobs wait in queue b with slots free, but no job has started for 1m")
	for i := range s.proc.slots {
		s.proc.slots[i].work.Store(&workItem{})
	}
	require.NoError(t, s.readyAt(ctx, 0), "every slot busy")
	for i := range s.proc.slots {
		s.proc.slots[i].work.Store(nil)
	}
	s.fetch.order.SetPaused([]string{"b"})
	require.NoError(t, s.readyAt(ctx, 0), "the waiting queue is paused")
	s.fetch.order.SetPaused(nil)
	require.NoError(t, s.readyAt(ctx, 1), "a job started since the last look")
	s.life.state.Store(stateStopped)
}
