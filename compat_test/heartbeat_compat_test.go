package compat_test

import (
	"context"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/rubytest"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// A gojob job that heartbeats has "heartbeat_at" in its work-hash entry,
// under both keys a gojob writing for every reader fills (6.4.1's
// <id>:workers and 6.4.2+'s <id>:work), and the 6.4.1 Busy page still
// renders gojob's and its row (jid, queue, class, args) as before. (7.x and
// 8.x read the entry by key, Sidekiq::Work#queue/#payload/#run_at in
// lib/sidekiq/api.rb, so an extra key is ignored there too.)
func TestWebUICompatBusyRendersAJobWithAHeartbeat(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	beaten := make(chan time.Time, 1)
	release := make(chan struct{})
	srv := svServer(t, e, sidekiq.ServerConfig{
		Queues: []wire.QueueWeight{{Name: "svbeat"}}, Concurrency: 2, DisablePoller: true, FollowVersion: true,
	}, func(s *sidekiq.Server) {
		s.Handle("SvBeatJob", sidekiq.HandlerFunc(func(ctx context.Context, job *wire.Job) error {
			sidekiq.Heartbeat(ctx)
			beaten <- time.Now()
			for {
				select {
				case <-release:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(50 * time.Millisecond):
					sidekiq.Heartbeat(ctx)
				}
			}
		}), nil)
	})
	t.Cleanup(func() { close(release) })
	ui := rubytest.StartWebUI(t, e.srv.URL())

	job, err := wire.NewJob("SvBeatJob", 7, "beat")
	require.NoError(t, err)
	job.SetQueue("svbeat")
	require.NoError(t, job.SetHeartbeatTimeout(30*time.Second))
	require.NoError(t, job.SetTimeout(time.Minute))
	res, err := e.client.Push(context.Background(), job, nil)
	require.NoError(t, err)
	var at time.Time
	select {
	case at = <-beaten:
	case <-time.After(10 * time.Second):
		t.Fatal("gojob did not start the job")
	}
	for _, key := range []string{srv.Identity() + ":workers", srv.Identity() + ":work"} {
		var entry *rubyjson.Map
		wait.Within(t, 15*time.Second, "heartbeat_at in "+key, func() bool {
			vals, err := redis.Strings(e.do(t, "HVALS", key), nil)
			require.NoError(t, err)
			if len(vals) != 1 {
				return false
			}
			entry, err = rubyjson.ParseObject([]byte(vals[0]))
			require.NoError(t, err)
			_, ok := entry.Get("heartbeat_at")
			return ok
		})
		require.Equal(t, []string{"queue", "payload", "run_at", "heartbeat_at"}, entry.Keys())
		v, _ := entry.Get("heartbeat_at")
		f, ok := v.Float()
		require.True(t, ok)
		require.WithinDuration(t, at, contract.FromEpochSeconds(f), 5*time.Second)
	}

	page := ui.Get(t, "/busy")
	require.Equal(t, "1", uiStat(t, page, "Busy"))
	w, ok := uiWorkerRow(uiTable(t, page, "workers"), srv.Identity())
	require.True(t, ok, "gojob's running job is not on the 6.4.1 Busy page")
	require.Equal(t, []string{res.JID, "svbeat", "SvBeatJob", `7, "beat"`}, w.cells[2:6])
}

// svLimitsWorker is a Ruby job that sleeps longer than the limits its
// payload carries and records the payload it ran with.
const svLimitsWorker = `
Redis.silence_deprecations = true
class SvRubyLimitsJob
  include Sidekiq::Worker
  def perform(arg)
    sleep 0.5
    Sidekiq.redis { |c| c.set("sv:limits:ran", JSON.generate(arg => [@jid, $sidekiq_payload_keys])) }
  end
end
Sidekiq.configure_server do |config|
  config.server_middleware do |chain|
    chain.add(Class.new do
      def call(_worker, job, _queue)
        $sidekiq_payload_keys = job.slice("timeout", "heartbeat_timeout")
        yield
      end
    end)
  end
end
`

// Ruby Sidekiq 6.4.1 ignores the payload keys timeout and heartbeat_timeout:
// a job that runs past both finishes normally, with the keys still in its
// payload.
func TestRubySidekiqIgnoresTheHeartbeatKeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	svRubySidekiq(t, e, svLimitsWorker, "-q", "svlimits", "-c", "1")
	job, err := wire.NewJob("SvRubyLimitsJob", "x")
	require.NoError(t, err)
	job.SetQueue("svlimits")
	require.NoError(t, job.SetTimeout(100*time.Millisecond))
	require.NoError(t, job.SetHeartbeatTimeout(50*time.Millisecond))
	res, err := e.client.Push(context.Background(), job, nil)
	require.NoError(t, err)
	var ran string
	wait.Within(t, 30*time.Second, "the Ruby job to finish", func() bool {
		ran, err = redis.String(e.do(t, "GET", "sv:limits:ran"), nil)
		return err == nil
	})
	require.JSONEq(t, `{"x":["`+res.JID+`",{"timeout":0.1,"heartbeat_timeout":0.05}]}`, ran)
	require.Equal(t, 0, svInt(t, e, "ZCARD", contract.KeyRetry))
	require.Equal(t, 0, svInt(t, e, "ZCARD", contract.KeyDead))
}
