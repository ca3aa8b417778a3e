package sidekiq

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// retryEntry waits for the only retry-set entry and returns it.
func retryEntry(t *testing.T, b *srvBundle) *wire.Job {
	t.Helper()
	wait.For(t, "the retry entry", func() bool { return zcard(t, b.conn, contract.KeyRetry) == 1 })
	vals, err := redis.Strings(b.conn.Do("ZRANGE", contract.KeyRetry, 0, -1))
	require.NoError(t, err)
	require.Len(t, vals, 1)
	job, err := wire.ParseJob([]byte(vals[0]))
	require.NoError(t, err)
	return job
}

// requireNoWorkingEntries checks that no in-progress hash holds a job.
func requireNoWorkingEntries(t *testing.T, b *srvBundle) {
	t.Helper()
	require.Empty(t, redistest.InProgress(t, b.conn, ""))
}

// A handler that heartbeats runs past its heartbeat_timeout; once it stops,
// it is cancelled (its context's cause says why) and its job is in the
// retry set as Gojob::HeartbeatTimeout within heartbeat_timeout of its last
// heartbeat plus the time it takes to return, in every fetch mode, and no
// in-progress entry is left.
func TestHandlerThatStopsHeartbeatingIsRetriedWithinItsHeartbeatTimeout(t *testing.T) {
	t.Parallel()
	const hbTimeout = 300 * time.Millisecond
	for _, mode := range fetchModes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			b := newTestServer(t, ServerConfig{Fetch: mode})
			lastBeat := make(chan time.Time, 1)
			cause := make(chan error, 1)
			b.srv.Handle("Beater", HandlerFunc(func(ctx context.Context, job *wire.Job) error {
				for range 12 {
					if err := Heartbeat(ctx); err != nil {
						return err
					}
					time.Sleep(50 * time.Millisecond)
				}
				require.NoError(t, Heartbeat(ctx))
				lastBeat <- time.Now()
				<-ctx.Done()
				cause <- Heartbeat(ctx)
				return ctx.Err()
			}), nil)
			b.start(t)
			b.push(t, "default", `{"class":"Beater","args":[],"jid":"b1","queue":"default","heartbeat_timeout":0.3}`)
			var last time.Time
			select {
			case last = <-lastBeat:
			case <-time.After(10 * time.Second):
				t.Fatal("the handler did not heartbeat")
			}
			job := retryEntry(t, b)
			took := time.Since(last)
			require.GreaterOrEqual(t, took, hbTimeout, "retried before its heartbeat_timeout")
			require.Less(t, took, hbTimeout+time.Second, "retried later than its heartbeat_timeout")
			require.Equal(t, "Gojob::HeartbeatTimeout", job.ErrorClass())
			require.Contains(t, job.ErrorMessage(), "over its heartbeat_timeout of 0.3s")
			n, ok := job.RetryCount()
			require.True(t, ok)
			require.Zero(t, n)
			var he *TimeoutError
			require.ErrorAs(t, <-cause, &he)
			require.True(t, he.Heartbeat)
			require.True(t, he.Beats)
			requireNoWorkingEntries(t, b)
			require.Zero(t, b.srv.leftRunning())
		})
	}
}

// A handler that ignores its cancellation is given up after CancelGrace:
// the job goes to the retry set once (Gojob::HeartbeatTimeout, saying the
// handler was left running), its slot runs the next job while the handler
// still hangs, and what the handler returns later is discarded: no second
// outcome, no acknowledgement of anything, the counters unchanged.
func TestHungHandlerIgnoringCancellationFreesItsSlot(t *testing.T) {
	t.Parallel()
	for _, mode := range fetchModes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			b := newTestServer(t, ServerConfig{Fetch: mode, Concurrency: 1, CancelGrace: 200 * time.Millisecond})
			release := make(chan struct{})
			returned := make(chan struct{})
			b.srv.Handle("Hangs", HandlerFunc(func(ctx context.Context, job *wire.Job) error {
				defer close(returned)
				<-release
				return nil
			}), nil)
			ran := make(chan string, 1)
			b.srv.Handle("Next", HandlerFunc(func(ctx context.Context, job *wire.Job) error {
				ran <- job.JID()
				return nil
			}), nil)
			b.start(t)
			t.Cleanup(func() {
				select {
				case <-release:
				default:
					close(release)
				}
			})
			b.push(t, "default", `{"class":"Hangs","args":[],"jid":"h1","queue":"default","heartbeat_timeout":0.2}`)
			job := retryEntry(t, b)
			require.Equal(t, "Gojob::HeartbeatTimeout", job.ErrorClass())
			require.Contains(t, job.ErrorMessage(), "ignored the cancellation for 0.2s and was left running")
			require.EqualValues(t, 1, b.srv.leftRunning())

			b.push(t, "default", `{"class":"Next","args":[],"jid":"n1","queue":"default"}`)
			select {
			case jid := <-ran:
				require.Equal(t, "n1", jid)
			case <-time.After(10 * time.Second):
				t.Fatal("the slot of the hung handler did not run the next job")
			}
			b.waitProcessed(t, 2)
			_, failed := b.srv.proc.counters.Pending()
			require.EqualValues(t, 1, failed)

			close(release)
			<-returned
			wait.For(t, "the late return to be logged", func() bool { return b.srv.leftRunning() == 0 })
			time.Sleep(100 * time.Millisecond) // room for a wrong second outcome
			require.Equal(t, 1, zcard(t, b.conn, contract.KeyRetry))
			require.Equal(t, 0, zcard(t, b.conn, contract.KeyDead))
			processed, failed := b.srv.proc.counters.Pending()
			require.EqualValues(t, 2, processed)
			require.EqualValues(t, 1, failed)
			requireNoWorkingEntries(t, b)
		})
	}
}

// The payload's timeout cancels a job that heartbeats all along
// (Gojob::Timeout); it overrides the server's JobTimeout, which applies to
// jobs without one.
func TestTotalTimeoutCancelsAJobThatHeartbeats(t *testing.T) {
	t.Parallel()
	b := newTestServer(t, ServerConfig{JobTimeout: 400 * time.Millisecond})
	started := make(chan time.Time, 2)
	b.srv.Handle("Busy", HandlerFunc(func(ctx context.Context, job *wire.Job) error {
		started <- time.Now()
		for Heartbeat(ctx) == nil {
			time.Sleep(20 * time.Millisecond)
		}
		return context.Cause(ctx)
	}), nil)
	b.start(t)
	b.push(t, "default", `{"class":"Busy","args":[],"jid":"t1","queue":"default","timeout":0.2,"heartbeat_timeout":1}`)
	at := <-started
	job := retryEntry(t, b)
	took := time.Since(at)
	require.Equal(t, "Gojob::Timeout", job.ErrorClass())
	require.Equal(t, "the job ran longer than its timeout of 0.2s and was cancelled", job.ErrorMessage())
	require.GreaterOrEqual(t, took, 200*time.Millisecond)
	require.Less(t, took, 400*time.Millisecond, "the payload's timeout, not JobTimeout")

	_, err := b.conn.Do("DEL", contract.KeyRetry)
	require.NoError(t, err)
	b.push(t, "default", `{"class":"Busy","args":[],"jid":"t2","queue":"default"}`)
	at = <-started
	job = retryEntry(t, b)
	require.Equal(t, "Gojob::Timeout", job.ErrorClass())
	require.Contains(t, job.ErrorMessage(), "timeout of 0.4s")
	require.GreaterOrEqual(t, time.Since(at), 400*time.Millisecond)
}

// A limit that is not a positive number of seconds fails the job, before it
// runs, with an ArgumentError that names the key and the value.
func TestInvalidLimitFailsTheJobWithoutRunningIt(t *testing.T) {
	t.Parallel()
	b := newTestServer(t, ServerConfig{})
	b.srv.Handle("Never", HandlerFunc(func(ctx context.Context, job *wire.Job) error {
		t.Error("a job with an invalid limit ran")
		return nil
	}), nil)
	b.start(t)
	b.push(t, "default", `{"class":"Never","args":[],"jid":"i1","queue":"default","heartbeat_timeout":"soon"}`)
	job := retryEntry(t, b)
	require.Equal(t, "ArgumentError", job.ErrorClass())
	require.Equal(t, `heartbeat_timeout must be a number of seconds, greater than 0 and at most 1e9, got "soon"`, job.ErrorMessage())
}

// Heartbeat outside a job does nothing and reports nothing; a job without
// limits may heartbeat too (the Busy page shows it) and is never cancelled
// for it.
func TestHeartbeatOutsideAJobAndWithoutLimits(t *testing.T) {
	t.Parallel()
	require.NoError(t, Heartbeat(context.Background()))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, Heartbeat(ctx), context.Canceled)

	b := newTestServer(t, ServerConfig{})
	done := make(chan error, 1)
	b.srv.Handle("Free", HandlerFunc(func(ctx context.Context, job *wire.Job) error {
		time.Sleep(100 * time.Millisecond)
		done <- Heartbeat(ctx)
		return nil
	}), nil)
	b.start(t)
	b.push(t, "default", `{"class":"Free","args":[],"jid":"f1","queue":"default"}`)
	require.NoError(t, <-done)
	b.waitProcessed(t, 1)
	require.Zero(t, zcard(t, b.conn, contract.KeyRetry))
}

// The work hash (the Busy page's data) carries each running job's last
// heartbeat as "heartbeat_at", float epoch seconds, and the API reads it;
// a job that sent none has no such key.
func TestWorkHashShowsTheLastHeartbeat(t *testing.T) {
	t.Parallel()
	b := newTestServer(t, ServerConfig{Concurrency: 2})
	beaten := make(chan time.Time, 1)
	release := make(chan struct{})
	b.srv.Handle("Shows", HandlerFunc(func(ctx context.Context, job *wire.Job) error {
		if job.JID() == "w1" {
			Heartbeat(ctx)
			beaten <- time.Now()
		}
		<-release
		return nil
	}), nil)
	b.start(t)
	defer close(release)
	b.push(t, "default", `{"class":"Shows","args":[],"jid":"w1","queue":"default","heartbeat_timeout":60}`)
	b.push(t, "default", `{"class":"Shows","args":[],"jid":"w2","queue":"default"}`)
	at := <-beaten
	wait.For(t, "both jobs running", func() bool { return b.srv.proc.busy() == 2 })
	b.beat(t)
	key := contract.WorkKey(b.srv.Identity(), b.srv.format.Version())
	vals, err := redis.StringMap(b.conn.Do("HGETALL", key))
	require.NoError(t, err)
	require.Len(t, vals, 2)
	seen := map[string]time.Time{}
	for _, js := range vals {
		m, err := rubyjson.ParseObject([]byte(js))
		require.NoError(t, err)
		pv, _ := m.Get("payload")
		ps, _ := pv.Str()
		job, err := wire.ParseJob([]byte(ps))
		require.NoError(t, err)
		if v, ok := m.Get("heartbeat_at"); ok {
			f, ok := v.Float()
			require.True(t, ok)
			seen[job.JID()] = contract.FromEpochSeconds(f)
		}
	}
	require.WithinDuration(t, at, seen["w1"], 10*time.Millisecond)
	require.NotContains(t, seen, "w2")
	for _, js := range vals {
		if !strings.Contains(js, `w1`) {
			require.NotContains(t, js, "heartbeat_at")
			continue
		}
		require.Regexp(t, `,"run_at":\d+,"heartbeat_at":\d+\.\d+\}$`, js)
	}
}

// leftRunning returns how many handlers are still running after their job
// was cancelled for a missed deadline and given up.
func (s *Server) leftRunning() int64 { return s.proc.leftBehind.Load() }
