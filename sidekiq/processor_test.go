package sidekiq

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/monoclock"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq/internal/fetch"
	"github.com/gojob/gojob/sidekiq/wire"
)

func TestUnparsableJobGoesToDeadUnchanged(t *testing.T) {
	t.Parallel()
	b := newTestServer(t, ServerConfig{})
	b.start(t)
	b.push(t, "default", `{"class":"Broken",`)
	wait.For(t, "dead entry", func() bool { return zcard(t, b.conn, contract.KeyDead) == 1 })
	vals, _ := redis.Strings(b.conn.Do("ZRANGE", contract.KeyDead, 0, -1))
	require.Equal(t, `{"class":"Broken",`, vals[0])
	p, f := b.srv.proc.counters.Pending()
	require.Zero(t, p+f, "an unparsable job is not counted")
}

func TestPanicFailsTheJobAndCallsDeathHandlers(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var died []string
	b := newTestServer(t, ServerConfig{DeathHandlers: []DeathHandler{func(ctx context.Context, job *wire.Job, err error) {
		mu.Lock()
		died = append(died, job.JID()+":"+err.Error())
		mu.Unlock()
	}}})
	b.srv.Handle("Panics", HandlerFunc(func(ctx context.Context, job *wire.Job) error { panic("kaboom") }), nil)
	b.start(t)
	b.push(t, "default", `{"retry":0,"queue":"default","backtrace":true,"class":"Panics","args":[],"jid":"p1"}`)
	wait.For(t, "dead entry", func() bool { return zcard(t, b.conn, contract.KeyDead) == 1 })
	vals, _ := redis.Strings(b.conn.Do("ZRANGE", contract.KeyDead, 0, -1))
	job, err := wire.ParseJob([]byte(vals[0]))
	require.NoError(t, err)
	require.Equal(t, "Panic", job.ErrorClass())
	require.Equal(t, "panic: kaboom", job.ErrorMessage())
	lines, err := job.ErrorBacktrace()
	require.NoError(t, err)
	require.NotEmpty(t, lines)
	require.Contains(t, strings.Join(lines, "\n"), "processor_test.go")
	wait.For(t, "death handler", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(died) == 1
	})
	require.Equal(t, "p1:panic: kaboom", died[0])
}

// Both ActiveJob wrapper classes are routed to the handler of the job class
// ActiveJob runs, and the handler sees provider_job_id set to the jid, as
// the Ruby wrapper sets it before running the job.
func TestActiveJobPayloadsRunTheirJobClass(t *testing.T) {
	t.Parallel()
	b := newTestServer(t, ServerConfig{})
	got := make(chan *wire.Job, 2)
	b.srv.Handle("MyAjJob", HandlerFunc(func(ctx context.Context, job *wire.Job) error {
		got <- job
		return nil
	}), nil)
	b.start(t)
	for _, wrapper := range []string{contract.ActiveJobWrapper, contract.ActiveJobWrapper8} {
		b.push(t, "default", `{"retry":true,"queue":"default","class":"`+wrapper+`","wrapped":"MyAjJob","args":[{"job_class":"MyAjJob","job_id":"2a9e29a2-a6ef-44aa-b262-1774d5db212d","provider_job_id":null,"queue_name":"default","arguments":[1]}],"jid":"c1361047e1fbb605ada036ad"}`)
		select {
		case j := <-got:
			data, ok := j.Args()[0].Map()
			require.True(t, ok)
			v, _ := data.Get("provider_job_id")
			s, _ := v.Str()
			require.Equal(t, "c1361047e1fbb605ada036ad", s)
		case <-time.After(10 * time.Second):
			t.Fatalf("ActiveJob payload with %s did not run", wrapper)
		}
	}
}

// finishedFetcher is a fetch.Fetcher that records what the processor
// finishes and starts nothing.
type finishedFetcher struct {
	mu       sync.Mutex
	finished []string
}

func (f *finishedFetcher) Start()                     {}
func (f *finishedFetcher) Wait()                      {}
func (f *finishedFetcher) Close()                     {}
func (f *finishedFetcher) Depth() int                 { return 1 }
func (f *finishedFetcher) Requeue([]fetch.Unit) error { return nil }
func (f *finishedFetcher) Finish(u fetch.Unit, o *fetch.Outcome) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.finished = append(f.finished, string(u.Raw))
	return nil
}

// The fetch paces its fetching ahead by how long a slot's jobs run, which
// the processor reports: in real time, also on a test's clock that does
// not move while the job runs; nothing for a job that did not run.
func TestProcessReportsHowLongTheJobRan(t *testing.T) {
	t.Parallel()
	for _, system := range []bool{false, true} {
		cfg := ServerConfig{}
		if system {
			cfg.Clock = monoclock.Or(nil)
		}
		b := newTestServer(t, cfg)
		b.srv.Handle("Sleeps", HandlerFunc(func(ctx context.Context, job *wire.Job) error {
			time.Sleep(30 * time.Millisecond)
			return nil
		}), nil)
		f := &finishedFetcher{}
		b.srv.proc.fetcher = f
		raw := []byte(`{"retry":true,"queue":"default","class":"Sleeps","args":[],"jid":"s1"}`)
		ran := b.srv.proc.process(0, fetch.Unit{Queue: "default", Raw: raw})
		require.GreaterOrEqual(t, ran, 30*time.Millisecond, "system clock: %v", system)
		require.Less(t, ran, time.Minute)
		require.Equal(t, []string{string(raw)}, f.finished)

		ran = b.srv.proc.process(0, fetch.Unit{Queue: "default", Raw: []byte(`{"class":`)})
		require.Zero(t, ran, "an unparsable job does not run")
	}
}

// BenchmarkProcess is the processor's share of a job's cost: take, run
// and finish of a typical no-op job on a 7.x format (class metrics kept),
// without the fetch. Its allocations per job are what the collector
// pays for per job.
func BenchmarkProcess(b *testing.B) {
	bundle := newTestServer(b, ServerConfig{Version: wire.Version7})
	bundle.srv.Handle("NoOp", HandlerFunc(func(context.Context, *wire.Job) error { return nil }), nil)
	bundle.srv.proc.fetcher = &discardFetcher{}
	raw := []byte(`{"retry":true,"queue":"default","class":"NoOp","args":[1,"two",{"three":3}],"jid":"0123456789abcdef01234567","created_at":1795296573.123,"enqueued_at":1795296573.125}`)
	b.ReportAllocs()
	for b.Loop() {
		bundle.srv.proc.process(0, fetch.Unit{Queue: "default", Raw: raw})
	}
}

// discardFetcher acknowledges nothing: what a benchmark of the processor
// alone needs.
type discardFetcher struct{ finishedFetcher }

func (*discardFetcher) Finish(fetch.Unit, *fetch.Outcome) error { return nil }
