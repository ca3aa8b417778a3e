package compat_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/batch"
	"github.com/gojob/gojob/internal/rubytest"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/jobctl"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// Ruby adds jobs to a gojob batch with contrib/ruby/gojob_batch.rb; gojob
// runs them and pushes the success callback once; Ruby reads the batch
// and a job's status hash.
func TestRubyPushesIntoGojobBatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	helper, err := filepath.Abs("../contrib/ruby/gojob_batch.rb")
	require.NoError(t, err)
	b, err := batch.New(&batch.Config{Client: e.client})
	require.NoError(t, err)
	st, err := b.Create(ctx, &batch.CreateParams{OnSuccess: "RubyBatchDone"})
	require.NoError(t, err)

	out := e.ruby(t, fmt.Sprintf(`load %q
2.times { |i| puts GojobBatch.push(%q, "class" => "RubyBatchWork", "args" => [i]) }
begin
  GojobBatch.push("nosuchbatch", "class" => "RubyBatchWork", "args" => [])
rescue GojobBatch::Error => e
  puts "refused: #{e.message}"
end
`, helper, st.BID))
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3, out)
	require.Equal(t, "refused: no gojob batch nosuchbatch", lines[2])
	jids := lines[:2]

	got, err := b.Status(ctx, st.BID)
	require.NoError(t, err)
	require.Equal(t, int64(2), got.Total)
	require.NoError(t, b.Seal(ctx, st.BID))

	var ran, callbacks atomic.Int64
	srv, err := sidekiq.NewServer(&sidekiq.ServerConfig{Pool: e.pool, Concurrency: 2, Logger: zerolog.Nop(),
		Version: wire.Version6, Extensions: []sidekiq.Extension{b}})
	require.NoError(t, err)
	srv.Handle("RubyBatchWork", sidekiq.HandlerFunc(func(ctx context.Context, job *wire.Job) error {
		p := 1.0
		ran.Add(1)
		return jobctl.WriteStatus(ctx, e.pool, job.JID(), &jobctl.Status{Progress: &p, Result: json.RawMessage(`{"ok":true}`)}, time.Now())
	}), nil)
	srv.Handle("RubyBatchDone", sidekiq.HandlerFunc(func(ctx context.Context, job *wire.Job) error {
		callbacks.Add(1)
		return nil
	}), nil)
	require.NoError(t, srv.Start(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Stop(ctx)
	})
	wait.For(t, "the callback", func() bool { return callbacks.Load() == 1 })
	require.Equal(t, int64(2), ran.Load())
	// The Ruby payload carried Sidekiq's fields and the batch key.
	raw := e.ruby(t, fmt.Sprintf(`load %q
s = GojobBatch.status(%q)
puts [s["total"], s["succeeded"], s["success_at"].nil? ? "no" : "yes"].join(",")
puts GojobBatch.job_status(%q)["result"]
`, helper, st.BID, jids[0]))
	require.Equal(t, "2,2,yes\n{\"ok\":true}\n", raw)
	n, err := redis.Int(e.do(t, "LLEN", "queue:default"), nil)
	require.NoError(t, err)
	require.Zero(t, n)
}

// The Lua steps Ruby loads from contrib/ruby/gojob_batch.rb are gojob's
// batch/lua/push.lua and update.lua byte for byte (batch/ruby_test.go
// reads the heredocs; this checks what Ruby makes of them).
func TestRubyHelperLoadsGojobsLuaSteps(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	helper, err := filepath.Abs("../contrib/ruby/gojob_batch.rb")
	require.NoError(t, err)
	lua, err := filepath.Abs("../batch/lua")
	require.NoError(t, err)
	out := e.ruby(t, fmt.Sprintf(`load %q
puts GojobBatch::PUSH.b == File.binread(%q)
puts GojobBatch::UPDATE.b == File.binread(%q)
`, helper, filepath.Join(lua, "push.lua"), filepath.Join(lua, "update.lua")))
	require.Equal(t, "true\ntrue\n", out)
}

// retryWorker is the -r file of a Ruby server that runs gojob batch jobs:
// contrib/ruby/gojob_batch.rb and RbWork, which records each attempt and
// fails as its argument says: "flaky" on its first attempt, "doomed"
// always.
const retryWorker = `
require %q
class RbWork
  include Sidekiq::Worker
  def perform(kind)
    n = Sidekiq.redis { |c| c.incr("attempts:#{jid}") }
    raise "first attempt of #{jid} fails" if kind == "flaky" && n == 1
    raise "#{jid} always fails" if kind == "doomed"
  end
end
`

// A real Sidekiq 6.4.1 server that loads contrib/ruby/gojob_batch.rb
// records the ends of the batch jobs it runs with gojob's Lua step: a
// success (middleware), a death with retries exhausted (retry: 0, the dead
// set) and with retry: false (no dead set), each through Sidekiq's death
// handlers; a failed attempt that will be retried is not counted, and its
// retry's success is. The batch completes, its complete callback pushed
// once, and does not succeed.
func TestRubyServerRecordsBatchJobEnds(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	helper, err := filepath.Abs("../contrib/ruby/gojob_batch.rb")
	require.NoError(t, err)
	b, err := batch.New(&batch.Config{Client: e.client})
	require.NoError(t, err)
	st, err := b.Create(ctx, &batch.CreateParams{OnSuccess: "RbDone", OnComplete: "RbFin", CallbackQueue: "callbacks"})
	require.NoError(t, err)
	out := e.ruby(t, fmt.Sprintf(`load %q
puts GojobBatch.push(%[2]q, "class" => "RbWork", "args" => ["ok"], "queue" => "rb")
puts GojobBatch.push(%[2]q, "class" => "RbWork", "args" => ["ok"], "queue" => "rb")
puts GojobBatch.push(%[2]q, "class" => "RbWork", "args" => ["flaky"], "queue" => "rb")
puts GojobBatch.push(%[2]q, "class" => "RbWork", "args" => ["doomed"], "queue" => "rb", "retry" => 0)
puts GojobBatch.push(%[2]q, "class" => "RbWork", "args" => ["doomed"], "queue" => "rb", "retry" => false)
`, helper, st.BID))
	jids := strings.Fields(out)
	require.Len(t, jids, 5)
	flaky, exhausted, noRetry := jids[2], jids[3], jids[4]
	require.NoError(t, b.Seal(ctx, st.BID))
	e.do(t, "SCRIPT", "FLUSH") // Ruby loads update.lua itself (NOSCRIPT, then EVAL)

	file := filepath.Join(t.TempDir(), "rb_work.rb")
	require.NoError(t, os.WriteFile(file, []byte(fmt.Sprintf(retryWorker, helper)), 0o644))
	rubytest.Start(t, e.srv.URL(), fmt.Sprintf(`
require "sidekiq/cli"
cli = Sidekiq::CLI.instance
cli.parse(["-c", "2", "-q", "rb", "-g", "batchends", "-r", %q])
cli.run
`, file))
	members := func() map[string]string {
		m, err := redis.StringMap(e.do(t, "HGETALL", "gojob-batch-jobs:"+st.BID), nil)
		require.NoError(t, err)
		return m
	}
	inRetry := func() bool {
		n, _ := redis.Int(e.do(t, "ZCARD", "retry"), nil)
		return n == 1
	}
	wait.Within(t, 60*time.Second, "every job's first end", func() bool {
		m := members()
		return inRetry() && m[jids[0]] == "ok" && m[jids[1]] == "ok" && m[exhausted] == "dead" && m[noRetry] == "dead"
	})
	require.Equal(t, "pending", members()[flaky], "a failed attempt that will be retried is not counted")
	got, err := b.Status(ctx, st.BID)
	require.NoError(t, err)
	require.Equal(t, [3]int64{1, 2, 2}, [3]int64{got.Pending, got.Succeeded, got.Dead})
	require.Nil(t, got.CompleteAt)
	deadSet, err := redis.Strings(e.do(t, "ZRANGE", "dead", 0, -1), nil)
	require.NoError(t, err)
	require.Len(t, deadSet, 1, "retry: 0 goes to the dead set, retry: false does not")
	require.Contains(t, deadSet[0], exhausted)

	e.ruby(t, `Sidekiq::RetrySet.new.retry_all`)
	wait.Within(t, 60*time.Second, "the retry's success", func() bool { return members()[flaky] == "ok" })
	got, err = b.Status(ctx, st.BID)
	require.NoError(t, err)
	require.Equal(t, [4]int64{5, 0, 3, 2}, [4]int64{got.Total, got.Pending, got.Succeeded, got.Dead})
	require.NotNil(t, got.CompleteAt)
	require.Nil(t, got.SuccessAt, "two jobs died")
	cbs, err := redis.ByteSlices(e.do(t, "LRANGE", "queue:callbacks", 0, -1), nil)
	require.NoError(t, err)
	require.Len(t, cbs, 1, "the complete callback, once")
	cb, err := wire.ParseJob(cbs[0])
	require.NoError(t, err)
	require.Equal(t, "RbFin", cb.Class())
	require.Equal(t, `["`+st.BID+`","complete"]`, string(rubyjson.ArrayValue(cb.Args()...).Encode()))
}
