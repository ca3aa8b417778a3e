package durable

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/pgtest"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/wire"
)

// lockAheadOpts are the options of a bundle whose jobs wait for their
// locks, and so lock the jobs fetched ahead: Adopt (on PostgreSQL with one
// database a job otherwise starts without waiting for its lock, and
// fetches nothing ahead).
func lockAheadOpts(urls []string) bundleOpts {
	return bundleOpts{urls: urls, configure: func(c *Config) { c.Adopt = true }}
}

// startReliableServer starts a one-slot server with the reliable fetch
// (the one that fetches ahead) and the durable middleware. Its jobs
// fetched ahead wait a minute for the slot, and a slot whose last job took
// up to 12 s fetches ahead: with the default 25 ms (5 ms), a loaded
// machine, whose lock commits take longer, fetched none ahead or gave
// them back before their locks were written.
func startReliableServer(t *testing.T, b *testBundle, h sidekiq.HandlerFunc) *sidekiq.Server {
	t.Helper()
	srv, err := sidekiq.NewServer(&sidekiq.ServerConfig{Extensions: []sidekiq.Extension{b.d},
		Pool: b.pool, Client: b.client, Clock: b.clk, Logger: b.log, Concurrency: 1, Fetch: "reliable",
		FetchAheadHold: time.Minute,
		DisablePoller:  true, HeartbeatInterval: time.Hour, Queues: []wire.QueueWeight{{Name: "default"}},
	})
	require.NoError(t, err)
	srv.Handle("DurableJob", h, &sidekiq.HandlerOptions{Retry: 3})
	require.NoError(t, srv.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Stop(ctx)
	})
	return srv
}

// A durable job fetched ahead has its lock queued when it arrives, while
// the job before it still runs; it then runs with its row locked by this
// process (locked_at and assume_dead_at from that lock), and its row is
// deleted after its success, as with the lock taken at start.
func TestJobFetchedAheadRunsUnderTheLockQueuedOnItsArrival(t *testing.T) {
	t.Parallel()
	pgtest.EachBackend(t, func(t *testing.T, be pgtest.Backend) {
		urls := be.URLs(t)
		b := setup(t, lockAheadOpts(urls[:1]))
		const n = 20
		jids := make([]string, n)
		for i := range jids {
			res, err := b.client.Enqueue(context.Background(), "", "DurableJob", i)
			require.NoError(t, err)
			jids[i] = res.JID
		}
		type seen struct {
			row     *Row
			ahead   bool
			running bool
		}
		var mu sync.Mutex
		runs := map[string]seen{}
		srv := startReliableServer(t, b, func(ctx context.Context, job *wire.Job) error {
			run := runOf(ctx)
			_, active := activeJID(ctx)
			mu.Lock()
			runs[job.JID()] = seen{row: b.row(t, job.JID()), ahead: run != nil && run.ahead.Answered(), running: active}
			mu.Unlock()
			return nil
		})
		wait.For(t, "every job run", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(runs) == n
		})
		ahead := 0
		for _, jid := range jids {
			s := runs[jid]
			require.NotNil(t, s.row, jid)
			require.True(t, s.running, jid)
			require.Equal(t, srv.Identity(), s.row.LockedBy, jid)
			require.True(t, micro(b.clk.Now()).Equal(*s.row.LockedAt), jid)
			require.True(t, micro(b.clk.Now().Add(5*time.Minute)).Equal(s.row.AssumeDeadAt), jid)
			if s.ahead {
				ahead++
			}
		}
		require.NotZero(t, ahead, "some jobs ran under a lock queued when they were fetched ahead")
		wait.For(t, "every row deleted", func() bool {
			for _, jid := range jids {
				if b.row(t, jid) != nil {
					return false
				}
			}
			return true
		})
	})
}

// A job fetched ahead and locked, then given back to its queue without
// running (here: the server goes quiet while the job before it runs),
// keeps its row, locked; a later run takes the lock again and deletes it.
func TestJobLockedAheadAndGivenBackKeepsItsRowForItsNextRun(t *testing.T) {
	t.Parallel()
	pgtest.EachBackend(t, func(t *testing.T, be pgtest.Backend) {
		urls := be.URLs(t)
		b := setup(t, lockAheadOpts(urls[:1]))
		first, err := b.client.Enqueue(context.Background(), "", "DurableJob", 1)
		require.NoError(t, err)
		second, err := b.client.Enqueue(context.Background(), "", "DurableJob", 2)
		require.NoError(t, err)
		started, quiet, release := make(chan struct{}), make(chan struct{}), make(chan struct{})
		var srv *sidekiq.Server
		srv = startReliableServer(t, b, func(ctx context.Context, job *wire.Job) error {
			<-started // srv is set
			if job.JID() == first.JID {
				wait.For(t, "the second job locked ahead", func() bool {
					r := b.row(t, second.JID)
					return r != nil && r.LockedBy == srv.Identity()
				})
				srv.Signal("TSTP")
				close(quiet)
				<-release
			}
			return nil
		})
		close(started)
		// Before the first job runs, the second is in the queue too: wait
		// for the quiet that gives it back.
		<-quiet
		wait.For(t, "the second job back in its queue", func() bool { return b.llen(t, "default") == 1 })
		close(release)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, srv.Stop(ctx))
		require.Nil(t, b.row(t, first.JID), "the first job completed")
		r := b.row(t, second.JID)
		require.NotNil(t, r, "the row of the job given back stays")
		require.Equal(t, srv.Identity(), r.LockedBy)

		var ran sync.WaitGroup
		ran.Add(1)
		startReliableServer(t, b, func(ctx context.Context, job *wire.Job) error {
			require.Equal(t, second.JID, job.JID())
			ran.Done()
			return nil
		})
		ran.Wait()
		wait.For(t, "its row deleted after its run", func() bool { return b.row(t, second.JID) == nil })
	})
}
