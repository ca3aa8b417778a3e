package cli

import (
	"context"
	"fmt"
	"io"
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

// runningPeaks tracks how many jobs of each queue run at once.
type runningPeaks struct {
	mu            sync.Mutex
	running, peak map[string]int
	bothPeak      int // the most jobs running at once, all queues
	done          int
}

func (r *runningPeaks) handler(queue string, d time.Duration) sidekiq.Handler {
	return sidekiq.HandlerFunc(func(ctx context.Context, job *wire.Job) error {
		r.mu.Lock()
		r.running[queue]++
		r.peak[queue] = max(r.peak[queue], r.running[queue])
		total := 0
		for _, n := range r.running {
			total += n
		}
		r.bothPeak = max(r.bothPeak, total)
		r.mu.Unlock()
		time.Sleep(d)
		r.mu.Lock()
		r.running[queue]--
		r.done++
		r.mu.Unlock()
		return nil
	})
}

// gojob work -c 4 --queue-concurrency mail=1 never runs two mail jobs at
// once, and its other slots run the default queue meanwhile; mail is
// listed first (strict order), so without the cap
// every slot would take mail jobs.
func TestQueueConcurrencyCapsAQueueInOneProcess(t *testing.T) {
	// Not parallel: see the note on runCLI.
	for _, mode := range []string{"reliable"} {
		t.Run(mode, func(t *testing.T) {
			rs := redistest.StartWith(t, redistest.Options{TCP: true})
			pool := rs.Pool(t)
			peaks := &runningPeaks{running: map[string]int{}, peak: map[string]int{}}
			ctx, cancel := context.WithCancel(context.Background())
			errb := testlog.New(nil)
			done := make(chan int)
			go func() {
				done <- Run(ctx, []string{"gojob", "work", "-r", rs.URL(), "-c", "4", "--fetch", mode,
					"-q", "mail", "-q", "default", "--queue-concurrency", "mail=1", "--sidekiq-version", "7"}, io.Discard, errb,
					WithHandler("MailJob", peaks.handler("mail", 40*time.Millisecond), nil),
					WithHandler("OtherJob", peaks.handler("default", 40*time.Millisecond), nil))
			}()
			pushJobs(t, pool, "MailJob", "mail", 15, "mail")
			pushJobs(t, pool, "OtherJob", "other", 30, "default")
			wait.Within(t, 20*time.Second, "every job", func() bool {
				peaks.mu.Lock()
				defer peaks.mu.Unlock()
				return peaks.done == 45
			})
			cancel()
			require.Equal(t, exitOK, <-done, errb.String())
			require.Equal(t, 1, peaks.peak["mail"], "never two mail jobs at once")
			require.GreaterOrEqual(t, peaks.peak["default"], 2, "the other slots run the other queue")
			require.GreaterOrEqual(t, peaks.bothPeak, 3, "mail and default side by side")
			require.Contains(t, errb.String(), "queue_concurrency=mail=1")
			conn := pool.Get()
			defer conn.Close()
			for _, q := range []string{"queue:mail", "queue:default"} {
				n, err := redis.Int(conn.Do("LLEN", q))
				require.NoError(t, err)
				require.Zero(t, n, q)
			}
			failed, _ := redis.Int(conn.Do("GET", "stat:failed"))
			require.Zero(t, failed)
		})
	}
}

func TestQueueConcurrencyUsageErrors(t *testing.T) {
	// Not parallel: see the note on runCLI.
	rs := redistest.StartWith(t, redistest.Options{TCP: true})
	for _, c := range []struct {
		args []string
		err  string
	}{
		{[]string{"--queue-concurrency", "mail"}, "want QUEUE=N"},
		{[]string{"--queue-concurrency", "mail=x"}, "want QUEUE=N"},
		{[]string{"--queue-concurrency", "nosuch=1"}, "not one of the queues"},
		{[]string{"--queue-concurrency", "mail=0"}, "want 1 to 3"},
		{[]string{"--queue-concurrency", "mail=4"}, "want 1 to 3"},
		{[]string{"--queue-concurrency", "mail=1", "--queue-concurrency", "mail=2"}, "given twice"},
		{[]string{"--queue-concurrency", "mail=1", "--fetch", "basic"}, "needs the reliable fetch"},
		{[]string{"--queue-concurrency", "mail=1", "--fetch", "batch"}, "needs the reliable fetch"},
	} {
		args := append([]string{"work", "-r", rs.URL(), "-c", "4", "-q", "mail"}, c.args...)
		_, errOut, code := runCLI(t, args...)
		require.Equal(t, exitUsage, code, fmt.Sprintf("%v: %s", c.args, errOut))
		require.Contains(t, errOut, c.err, c.args)
	}
}
