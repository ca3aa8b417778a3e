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
	"github.com/gojob/gojob/internal/wait"
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
	b.srv.HandleFunc("Panics", func(ctx context.Context, job *wire.Job) error { panic("kaboom") })
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
	b.srv.HandleFunc("MyAjJob", func(ctx context.Context, job *wire.Job) error {
		got <- job
		return nil
	})
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
