package compat_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/gojobtest"
	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/rubytest"
	"github.com/gojob/gojob/internal/wait"
)

// gojobProc is a real `gojob work` process.
type gojobProc = gojobtest.Proc

// startGojob runs `gojob work -r url args…`, killed at the end of the test.
func startGojob(t *testing.T, url string, args ...string) *gojobProc {
	t.Helper()
	return gojobtest.Start(t, gojobtest.Binary(t), append([]string{"work", "-r", url}, args...)...)
}

// gojobCLI runs a gojob command and returns its standard output.
func gojobCLI(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(gojobtest.Binary(t), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "gojob %s: %s", strings.Join(args, " "), stderr.String())
	return strings.TrimSpace(string(out))
}

// mixedWorker is the -r file of the Ruby server: contrib/ruby/gojob.rb
// (docs/queue-pause.md, loaded as a deployment would), contrib/ruby/
// gojob_batch.rb, and MixWork, which records each run it completes in the
// list ruby-ran. While the key "gate" is "closed", a MixWork that starts
// adds its jid to the set "held" and waits for the gate to open.
const mixedWorker = `
require %q
require %q
class MixWork
  include Sidekiq::Worker
  def perform(*)
    if Sidekiq.redis { |c| c.get("gate") } == "closed"
      Sidekiq.redis { |c| c.call("SADD", "held", jid) }
      sleep 0.05 while Sidekiq.redis { |c| c.get("gate") } == "closed"
    end
    sleep 0.1
    Sidekiq.redis { |c| c.rpush("ruby-ran", jid) }
  end
end
`

// A batch created by `gojob batch create --on-success`, filled from Ruby
// (GojobBatch.push) and sealed, on a queue that a real Sidekiq 6.4.1
// process (with contrib/ruby/gojob_batch.rb loaded) and the real `gojob
// work` serve together, completes with its success callback pushed exactly
// once, across a kill -9 of each side:
//
//  1. Ruby alone runs some jobs; each success is recorded by the time its
//     thread takes the next job. Then, with the gate closed, both of its
//     threads hold a job (and nothing else: a Sidekiq 6.4.1 processor
//     thread fetches its next job only after the last), and it is killed
//     with -9. Sidekiq's BasicFetch has popped those two jobs from the
//     queue and kept them only in the dead process's memory: they are lost,
//     as any job Ruby was running at a kill -9 is, batch or not (gojob's
//     reliable fetch does not lose them; Sidekiq Pro's super_fetch does
//     not either).
//  2. gojob alone runs jobs and is killed with -9 while it holds some;
//     its reliable fetch keeps them in Redis.
//  3. Ruby is restarted, then gojob: both serve the queue; the restarted
//     gojob recovers its predecessor's jobs at once (same host), and a
//     job whose success was recorded before the kill but never
//     acknowledged runs again without being counted twice.
//
// Then every job but the two lost ones has been counted, and the batch
// waits for those two: it must not complete (no job of it is known to have
// run). "Completes" therefore means: once the lost jobs are pushed again
// (GojobBatch.push with their jids, which counts no new member), the batch
// succeeds and its callback runs once.
func TestBatchServedByRubyAndGojobCompletesAcrossKills(t *testing.T) {
	t.Parallel()
	const n = 150
	e := newEnv(t)
	url := e.srv.URL()
	conn := e.pool.Get()
	defer conn.Close()
	dir := t.TempDir()
	goRan, callbacks := filepath.Join(dir, "go-ran"), filepath.Join(dir, "callbacks")
	helper, err := filepath.Abs("../contrib/ruby/gojob_batch.rb")
	require.NoError(t, err)
	plugin, err := filepath.Abs("../contrib/ruby/gojob.rb")
	require.NoError(t, err)
	worker := filepath.Join(dir, "mix_work.rb")
	require.NoError(t, os.WriteFile(worker, []byte(fmt.Sprintf(mixedWorker, plugin, helper)), 0o644))

	bid := gojobCLI(t, "batch", "create", "-r", url, "--sidekiq-version", "6", "--on-success", "BatchDone", "--callback-queue", "callbacks")
	require.Len(t, bid, 24)
	out := e.ruby(t, fmt.Sprintf(`load %q
%d.times { |i| puts GojobBatch.push(%q, "class" => "MixWork", "args" => [i], "queue" => "mix") }
`, helper, n, bid))
	jids := strings.Fields(out)
	require.Len(t, jids, n)
	gojobCLI(t, "batch", "seal", "-r", url, bid)

	status := func() map[string]string {
		m, err := redis.StringMap(conn.Do("HGETALL", "gojob-batch:"+bid))
		require.NoError(t, err)
		return m
	}
	rubyRan := func() int {
		k, err := redis.Int(conn.Do("LLEN", "ruby-ran"))
		require.NoError(t, err)
		return k
	}
	startRuby := func() *exec.Cmd {
		return rubytest.Start(t, url, fmt.Sprintf(`
require "sidekiq/cli"
cli = Sidekiq::CLI.instance
cli.parse(["-c", "2", "-q", "mix", "-g", "mixed", "-r", %q])
cli.run
`, worker))
	}
	gojobArgs := []string{"--sidekiq-version", "6", "-c", "3", "-q", "mix", "-q", "callbacks",
		// A job in flight at the kill must not become a poison pill.
		"--max-recoveries", "100",
		"--exec", `MixWork=sleep 0.2; echo "$GOJOB_JID" >> ` + goRan,
		"--exec", `BatchDone=echo "$GOJOB_JID" >> ` + callbacks}

	// 1. Ruby alone, then kill -9 while it holds two jobs.
	ruby := startRuby()
	wait.Within(t, 60*time.Second, "Ruby to run jobs", func() bool { return rubyRan() >= 6 })
	_, err = conn.Do("SET", "gate", "closed")
	require.NoError(t, err)
	wait.Within(t, 60*time.Second, "both Ruby threads to hold a job", func() bool {
		k, _ := redis.Int(conn.Do("SCARD", "held"))
		return k == 2
	})
	ranBeforeKill := rubyRan()
	require.Equal(t, fmt.Sprint(ranBeforeKill), status()["succeeded"], "every job Ruby ran is recorded")
	require.NoError(t, ruby.Process.Signal(syscall.SIGKILL))
	lost, err := redis.Strings(conn.Do("SMEMBERS", "held"))
	require.NoError(t, err)

	// 2. gojob alone, then kill -9 while it holds jobs.
	g := startGojob(t, url, gojobArgs...)
	id := g.Identity(t)
	var held []string
	wait.Within(t, 60*time.Second, "gojob to run jobs and hold more", func() bool {
		held = redistest.InProgress(t, conn, id)
		return len(gojobtest.Lines(t, goRan)) >= 5 && len(held) > 0
	})
	require.NoError(t, g.Cmd.Process.Signal(syscall.SIGKILL))
	<-g.Done()
	heldAtKill := len(redistest.InProgress(t, conn, id))

	// 3. Both again.
	_, err = conn.Do("DEL", "gate")
	require.NoError(t, err)
	startRuby()
	wait.Within(t, 60*time.Second, "the restarted Ruby to run jobs", func() bool { return rubyRan() > ranBeforeKill })
	g = startGojob(t, url, gojobArgs...)
	g.Identity(t)

	// Everything but the lost jobs runs and is counted; the batch waits.
	wait.Within(t, 2*time.Minute, "every job but the lost ones to be counted", func() bool {
		q, _ := redis.Int(conn.Do("LLEN", "queue:mix"))
		return q == 0 && status()["pending"] == fmt.Sprint(len(lost)) && len(redistest.InProgress(t, conn, "")) == 0
	})
	members, err := redis.StringMap(conn.Do("HGETALL", "gojob-batch-jobs:"+bid))
	require.NoError(t, err)
	var pending []string
	for jid, state := range members {
		if state == "pending" {
			pending = append(pending, jid)
		}
	}
	require.ElementsMatch(t, lost, pending, "the batch waits for the lost jobs, and only for them")
	require.Empty(t, gojobtest.Lines(t, callbacks))
	require.Empty(t, status()["success_at"])

	// The lost jobs pushed again: the batch succeeds, its callback once.
	e.ruby(t, fmt.Sprintf(`load %q
%q.split(",").each { |jid| GojobBatch.push(%q, "class" => "MixWork", "args" => ["again"], "queue" => "mix", "jid" => jid) }
`, helper, strings.Join(lost, ","), bid))
	wait.Within(t, 60*time.Second, "the success callback", func() bool { return len(gojobtest.Lines(t, callbacks)) >= 1 })
	wait.Within(t, 30*time.Second, "the queues to empty", func() bool {
		m, _ := redis.Int(conn.Do("LLEN", "queue:mix"))
		c, _ := redis.Int(conn.Do("LLEN", "queue:callbacks"))
		return m+c == 0 && len(redistest.InProgress(t, conn, "")) == 0
	})
	require.NoError(t, g.Cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, g.Wait(), g.Logs.String())

	require.Len(t, gojobtest.Lines(t, callbacks), 1, "the success callback ran exactly once")
	st := status()
	require.Equal(t, fmt.Sprint(n), st["total"])
	require.Equal(t, fmt.Sprint(n), st["succeeded"])
	require.Equal(t, "0", st["pending"])
	require.NotEmpty(t, st["success_at"])
	rubyJIDs, err := redis.Strings(conn.Do("LRANGE", "ruby-ran", 0, -1))
	require.NoError(t, err)
	goJIDs := gojobtest.Lines(t, goRan)
	ran := map[string]int{}
	for _, jid := range append(rubyJIDs, goJIDs...) {
		ran[jid]++
	}
	for _, jid := range jids {
		require.Positive(t, ran[jid], "job %s ran", jid)
	}
	t.Logf("batch of %d: Ruby ran %d (%d before its kill, 2 lost), gojob ran %d (%d held at its kill), %d ran twice, 1 callback",
		n, len(rubyJIDs), ranBeforeKill, len(goJIDs), heldAtKill, len(rubyJIDs)+len(goJIDs)-n)
}
