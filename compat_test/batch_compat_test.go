package compat_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/batch"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/jobctl"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/wire"
)

// Ruby adds jobs to a gojob batch with contrib/ruby/gojob_batch.rb; gojob
// runs them and pushes the success callback once; Ruby reads the batch
// and a job's status hash.
func TestRubyPushesIntoGojobBatch(t *testing.T) {
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
	srv.HandleFunc("RubyBatchWork", func(ctx context.Context, job *wire.Job) error {
		p := 1.0
		ran.Add(1)
		return jobctl.WriteStatus(ctx, e.pool, job.JID(), &jobctl.Status{Progress: &p, Result: json.RawMessage(`{"ok":true}`)}, time.Now())
	})
	srv.HandleFunc("RubyBatchDone", func(ctx context.Context, job *wire.Job) error {
		callbacks.Add(1)
		return nil
	})
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
