package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/testlog"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/wire"
)

// Three gojob work processes with --limit Limited=3 (and 4 slots each)
// never run a fourth Limited job at once, and run them all.
func TestLimitFlagHoldsAcrossThreeProcesses(t *testing.T) {
	rs := redistest.StartWith(t, redistest.Options{TCP: true})
	pool := rs.Pool(t)
	dir := t.TempDir()
	running := filepath.Join(dir, "running")
	require.NoError(t, os.Mkdir(running, 0o755))
	seen := filepath.Join(dir, "seen")
	script := filepath.Join(dir, "job.sh")
	require.NoError(t, os.WriteFile(script, []byte(fmt.Sprintf(`#!/bin/sh
touch %[1]s/$GOJOB_JID
ls %[1]s | wc -l >> %[2]s
sleep 0.1
rm %[1]s/$GOJOB_JID
`, running, seen)), 0o755))
	for range 3 {
		startWorker(t, rs.URL(), "-c", "4", "--exec", "Limited="+script, "--limit", "Limited=3", "--limit-delay", "100ms", "--poll-interval", "200ms")
	}
	pushJobs(t, pool, "Limited", "lim", 45)
	wait.Within(t, 60*time.Second, "every job", func() bool {
		b, _ := os.ReadFile(seen)
		return strings.Count(string(b), "\n") == 45
	})
	b, err := os.ReadFile(seen)
	require.NoError(t, err)
	peak := 0
	for _, line := range strings.Fields(string(b)) {
		n, err := strconv.Atoi(line)
		require.NoError(t, err)
		peak = max(peak, n)
	}
	require.LessOrEqual(t, peak, 3, "never four at once")
	require.GreaterOrEqual(t, peak, 2, "the limit, not one process, set the pace")
	_, errOut, rc := runCLI(t, "work", "-r", rs.URL(), "--limit", "Limited")
	require.Equal(t, 2, rc)
	require.Contains(t, errOut, "want CLASS=N")
}

// With -c 2 --limit Slow2=1, the slot that is not running Slow2 takes an
// unlimited job at once: the Slow2 jobs over the limit wait in the
// schedule set, not in a slot, keep their retry count, are not failures,
// and all run in the end, one at a time.
func TestLimitedJobsWaitOutsideTheirSlot(t *testing.T) {
	// Not parallel: see the note on runCLI.
	rs := redistest.StartWith(t, redistest.Options{TCP: true})
	pool := rs.Pool(t)
	conn := pool.Get()
	defer conn.Close()

	var mu sync.Mutex
	slowRunning, slowPeak, slowDone := 0, 0, 0
	release := make(chan struct{})
	slow := sidekiq.HandlerFunc(func(ctx context.Context, job *wire.Job) error {
		mu.Lock()
		slowRunning++
		slowPeak = max(slowPeak, slowRunning)
		first := slowDone == 0
		mu.Unlock()
		if first {
			<-release // the first holds the limit until the fast jobs ran
		} else {
			time.Sleep(20 * time.Millisecond)
		}
		mu.Lock()
		slowRunning--
		slowDone++
		mu.Unlock()
		return nil
	})
	fastStarted := make(chan time.Time, 10)
	fast := sidekiq.HandlerFunc(func(ctx context.Context, job *wire.Job) error {
		fastStarted <- time.Now()
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	errb := testlog.New(nil)
	go func() {
		done <- Run(ctx, []string{"gojob", "work", "-r", rs.URL(), "-c", "2", "--sidekiq-version", "7",
			"--limit", "Slow2=1", "--limit-delay", "200ms", "--poll-interval", "300ms"}, io.Discard, errb,
			WithHandler("Slow2", slow, nil), WithHandler("Fast", fast, nil))
	}()
	defer func() {
		cancel()
		require.Equal(t, exitOK, <-done, errb.String())
	}()

	pushJobs(t, pool, "Slow2", "slow", 6)
	wait.Within(t, 20*time.Second, "a Slow2 job to hold the limit and the others to wait in the schedule set", func() bool {
		n, _ := redis.Int(conn.Do("ZCARD", "schedule"))
		mu.Lock()
		defer mu.Unlock()
		return slowRunning == 1 && n >= 3
	})
	// A waiting Slow2 job keeps its payload's retry state.
	members, err := redis.Strings(conn.Do("ZRANGE", "schedule", 0, -1))
	require.NoError(t, err)
	for _, m := range members {
		require.NotContains(t, m, "retry_count")
		require.NotContains(t, m, "overrated")
	}

	client, err := sidekiq.NewClient(&sidekiq.ClientConfig{Pool: pool, Version: wire.Version7})
	require.NoError(t, err)
	best := time.Hour
	for i := range 3 {
		pushed := time.Now()
		_, err := client.Enqueue(context.Background(), "", "Fast", i)
		require.NoError(t, err)
		select {
		case started := <-fastStarted:
			took := started.Sub(pushed)
			t.Logf("fast job %d started %s after its push", i, took)
			require.Less(t, took, 2*time.Second, "an unlimited job never waits behind limited ones")
			best = min(best, took)
		case <-time.After(10 * time.Second):
			t.Fatal("the unlimited job did not start")
		}
	}
	require.Less(t, best, 100*time.Millisecond, "an unlimited job starts at once")
	close(release)
	wait.Within(t, 30*time.Second, "every Slow2 job to run", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slowDone == 6
	})
	require.Equal(t, 1, slowPeak, "never two Slow2 at once")
	failed, _ := redis.Int(conn.Do("GET", "stat:failed"))
	require.Zero(t, failed, "waiting for the limit is not a failure")
	n, err := redis.Int(conn.Do("ZCARD", "retry"))
	require.NoError(t, err)
	require.Zero(t, n)
}
