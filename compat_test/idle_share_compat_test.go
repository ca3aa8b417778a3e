package compat_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/gojobtest"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/wait"
)

// trickleWorker records each run in the list ruby-ran.
const trickleWorker = `
class Trickle
  include Sidekiq::Worker
  def perform(*)
    Sidekiq.redis { |c| c.rpush("ruby-ran", jid) }
  end
end
`

// One idle Ruby Sidekiq 6.4.1 process (-c 5: five threads blocked in
// BRPOP) and one idle `gojob work -c 5` (the default, reliable fetch) on
// one queue: of a trickle of 30 jobs pushed 0.3 s apart, gojob runs at
// least 30%, and every job runs once.
func TestIdleGojobTakesItsShareOfATrickleBesideIdleRuby(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	conn := e.pool.Get()
	defer conn.Close()
	goRan := filepath.Join(t.TempDir(), "go-ran")
	svRubySidekiq(t, e, trickleWorker, "-c", "5", "-q", "trickle")
	g := startGojob(t, e.srv.URL(), "--sidekiq-version", "6", "-c", "5", "-q", "trickle",
		"--exec", `Trickle=echo "$GOJOB_JID" >> `+goRan)
	g.Identity(t)
	wait.Within(t, 60*time.Second, "both sides idle: five BRPOPs and gojob's blocking moves", func() bool {
		return redistest.BlockedIn(t, conn, "CLIENT", "brpop") >= 5 && redistest.BlockedIn(t, conn, "CLIENT", "blmove") >= 5
	})

	const n = 30
	jids := map[string]bool{}
	for i := range n {
		res, err := e.client.Enqueue(context.Background(), "trickle", "Trickle", i)
		require.NoError(t, err)
		jids[res.JID] = true
		time.Sleep(300 * time.Millisecond)
	}
	rubyRan := func() []string {
		r, err := redis.Strings(conn.Do("LRANGE", "ruby-ran", 0, -1))
		require.NoError(t, err)
		return r
	}
	wait.Within(t, 2*time.Minute, "every job to run", func() bool {
		return len(rubyRan())+len(gojobtest.Lines(t, goRan)) >= n
	})
	goJIDs, rubyJIDs := gojobtest.Lines(t, goRan), rubyRan()
	ran := map[string]int{}
	for _, jid := range append(goJIDs, rubyJIDs...) {
		ran[jid]++
	}
	for jid := range jids {
		require.Equal(t, 1, ran[jid], "job %s runs once", jid)
	}
	t.Logf("trickle of %d: gojob ran %d, Ruby %d", n, len(goJIDs), len(rubyJIDs))
	require.GreaterOrEqual(t, len(goJIDs), n*3/10, "gojob's share")
	wait.Within(t, 30*time.Second, "gojob's in-progress lists to empty", func() bool {
		return len(redistest.InProgress(t, conn, "")) == 0
	})
}
