package compat_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/rubytest"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq/api"
)

// pauseWorker is the -r file of the Ruby process: contrib/ruby/gojob.rb and
// a job that records its argument in the list "ran".
const pauseWorker = `
require %q
class PauseJob
  include Sidekiq::Worker
  def perform(tag)
    Sidekiq.redis { |c| c.rpush("ran", tag) }
  end
end
`

// A real Sidekiq 6.4.1 process that loads contrib/ruby/gojob.rb honours
// gojob queue pause: with its queues in strict order (pa before pb), jobs
// of the paused pa stay in their queue while a later pb job runs; with
// both paused nothing runs; after unpause every job runs, once. Without
// the plugin strict order would run pa's jobs first.
func TestRubySidekiqHonoursGojobQueuePause(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	plugin, err := filepath.Abs("../contrib/ruby/gojob.rb")
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "pause_job.rb")
	require.NoError(t, os.WriteFile(file, []byte(fmt.Sprintf(pauseWorker, plugin)), 0o644))
	admin, err := api.New(&api.Config{Pool: e.pool})
	require.NoError(t, err)
	require.NoError(t, admin.Queue("pa").Pause(ctx))

	rubytest.Start(t, e.srv.URL(), fmt.Sprintf(`
require "sidekiq/cli"
cli = Sidekiq::CLI.instance
cli.parse(["-c", "2", "-q", "pa", "-q", "pb", "-g", "pausetest", "-r", %q])
cli.run
`, file))
	push := func(queue, tag string) {
		t.Helper()
		e.ruby(t, fmt.Sprintf(`Sidekiq::Client.push("class" => "PauseJob", "queue" => %q, "args" => [%q])`, queue, tag))
	}
	ran := func() []string {
		t.Helper()
		v, err := redis.Strings(e.do(t, "LRANGE", "ran", 0, -1), nil)
		require.NoError(t, err)
		return v
	}
	llen := func(queue string) int {
		t.Helper()
		n, err := redis.Int(e.do(t, "LLEN", "queue:"+queue), nil)
		require.NoError(t, err)
		return n
	}

	for i := range 3 {
		push("pa", fmt.Sprintf("a%d", i))
	}
	push("pb", "b0")
	wait.Within(t, 60*time.Second, "the job of the unpaused queue runs", func() bool { return len(ran()) > 0 })
	require.Equal(t, []string{"b0"}, ran(), "pa comes first in strict order, but it is paused")
	require.Equal(t, 3, llen("pa"), "the paused queue's jobs stay")

	// Every queue paused: the fetchers idle.
	require.NoError(t, admin.Queue("pb").Pause(ctx))
	time.Sleep(time.Second) // more than the plugin's 0.5 s check
	push("pb", "b1")
	time.Sleep(5 * time.Second) // two fetch timeouts
	require.Equal(t, []string{"b0"}, ran())
	require.Equal(t, 1, llen("pb"))

	require.NoError(t, admin.Queue("pa").Unpause(ctx))
	require.NoError(t, admin.Queue("pb").Unpause(ctx))
	wait.Within(t, 60*time.Second, "every job runs after unpause", func() bool { return len(ran()) == 5 })
	require.ElementsMatch(t, []string{"b0", "a0", "a1", "a2", "b1"}, ran())
	require.Zero(t, llen("pa"))
	require.Zero(t, llen("pb"))
}

// A job that a fetch blocked in BRPOP pops from a queue paused meanwhile
// goes back to the end BRPOP pops, without running: Sidekiq 6.4.1's
// BasicFetch with contrib/ruby/gojob.rb, the fetch timeout raised to 10 s
// so that the pause and the push land while it waits.
func TestRubyFetchPutsBackAJobOfAQueuePausedMeanwhile(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	plugin, err := filepath.Abs("../contrib/ruby/gojob.rb")
	require.NoError(t, err)
	out := e.ruby(t, fmt.Sprintf(`
require %q
Sidekiq::BasicFetch.send(:remove_const, :TIMEOUT)
Sidekiq::BasicFetch.const_set(:TIMEOUT, 10)
requeued = false
Sidekiq::BasicFetch::UnitOfWork.prepend(Module.new { define_method(:requeue) { requeued = true; super() } })
Sidekiq.redis { |c| c.lpush("queue:pq", '{"class":"X","args":[],"jid":"first","queue":"pq"}') }
fetch = Sidekiq::BasicFetch.new(queues: ["pq"])
first = fetch.retrieve_work # reads the pause set: none
waiting = Thread.new { fetch.retrieve_work }
sleep 0.05 until Sidekiq.redis { |c| c.info("clients")["blocked_clients"].to_i } > 0
Sidekiq.redis { |c| c.sadd("gojob-paused-queues", "pq") }
sleep 0.6 # past the plugin's 0.5 s check
Sidekiq.redis { |c| c.lpush("queue:pq", '{"class":"X","args":[],"jid":"second","queue":"pq"}') }
got = waiting.value
puts JSON.generate({"first" => JSON.parse(first.job)["jid"], "second" => got && got.job, "requeued" => requeued,
  "queue" => Sidekiq.redis { |c| c.lrange("queue:pq", 0, -1) }})
`, plugin))
	require.JSONEq(t, `{"first":"first","second":null,"requeued":true,
		"queue":["{\"class\":\"X\",\"args\":[],\"jid\":\"second\",\"queue\":\"pq\"}"]}`, out)
}
