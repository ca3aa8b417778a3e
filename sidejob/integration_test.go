package sidejob

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// TestIntegrationChannels is spec/integration/channels_spec.rb: four TestSum
// jobs connected only through channels give 14.
func TestIntegrationChannels(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	jobs := make([]*Job, 4)
	for i := range jobs {
		jobs[i] = b.queue(t, "TestSum", nil)
	}
	chans := func(p *Port, ch ...string) { require.NoError(t, p.setChannels(ctx, ch)) }
	chans(b.input(t, jobs[0], "ready"), "/test/ready")
	chans(b.input(t, jobs[0], "in"), "/test/in")
	chans(b.output(t, jobs[0], "sum"), "/test/chan1")
	for _, j := range jobs[1:3] {
		chans(b.input(t, j, "ready"), "/test/ready")
		chans(b.input(t, j, "in"), "/test/chan1")
		chans(b.output(t, j, "sum"), "/test/chan2")
	}
	chans(b.input(t, jobs[3], "ready"), "/test/ready")
	chans(b.input(t, jobs[3], "in"), "/test/chan2")
	for _, x := range []int{1, 2, 4} {
		require.NoError(t, b.c.Publish(ctx, "/test/in", x))
	}
	require.NoError(t, b.c.Publish(ctx, "/test/ready", true))
	for _, j := range jobs {
		require.NoError(t, b.rt.runInline(ctx, j, nil))
	}
	require.Equal(t, "completed", b.status(t, jobs[3]))
	require.Equal(t, "14", b.read(t, b.output(t, jobs[3], "sum")))
}

// testFib computes fibonacci numbers with child jobs
// (spec/integration/fib_spec.rb).
type testFib struct{}

func (testFib) Perform(ctx context.Context, j *Job, _ []rubyjson.Value) error {
	v, known, err := j.get(ctx, "n")
	if err != nil {
		return err
	}
	n, _ := v.Int()
	if !known {
		in, err := j.Input(ctx, "n")
		if err != nil {
			return err
		}
		d, err := in.Read(ctx)
		if err != nil {
			return err
		}
		if d == nil {
			return Suspend()
		}
		n, _ = d.Value.Int()
		if err := j.Set(ctx, "n", n); err != nil {
			return err
		}
	}
	out, err := j.Output(ctx, "num")
	if err != nil {
		return err
	}
	if n <= 2 {
		return out.Write(ctx, 1)
	}
	var sum int64
	waiting := false
	for i, name := range []string{"job1", "job2"} {
		child, err := j.child(ctx, name)
		if err != nil {
			return err
		}
		if child == nil {
			if child, err = j.Queue(ctx, "testq", "TestFib", &QueueOpts{Name: name}); err != nil {
				return err
			}
			p, err := child.Input(ctx, "n")
			if err != nil {
				return err
			}
			if err := p.Write(ctx, n-1-int64(i)); err != nil {
				return err
			}
		}
		st, err := child.status(ctx)
		if err != nil {
			return err
		}
		num, err := child.Output(ctx, "num")
		if err != nil {
			return err
		}
		d, err := num.defaultData(ctx)
		if err != nil {
			return err
		}
		if st != statusCompleted || d == nil {
			waiting = true
			continue
		}
		x, _ := d.Value.Int()
		sum += x
	}
	if waiting {
		return Suspend()
	}
	return out.Write(ctx, sum)
}

// TestIntegrationFib is fib(6) = 8 with recursive child jobs and
// drain_queue.
func TestIntegrationFib(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	// Outputs are written as defaults so the parent can read them again.
	b.register(t, "TestFib", workerFunc(func(ctx context.Context, j *Job, args []rubyjson.Value) error {
		return j.c.inGroup(ctx, &groupOptions{SetDefault: opt(true)}, func(ctx context.Context) error {
			return testFib{}.Perform(ctx, j, args)
		})
	}), `{"inports":{"n":{}},"outports":{"num":{}}}`)
	job := b.queue(t, "TestFib", nil)
	b.write(t, b.input(t, job, "n"), 6)
	dctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	_, err := b.rt.drain(dctx, nil)
	require.NoError(t, err)
	require.Equal(t, "completed", b.status(t, job))
	require.Equal(t, "8", b.read(t, b.output(t, job, "num")))
}

// testSumFlow builds a TestSum child, feeds it and forwards its result
// (spec/integration/sum_spec.rb).
type testSumFlow struct{}

func (testSumFlow) Perform(ctx context.Context, j *Job, _ []rubyjson.Value) error {
	// Under a concurrent server the child's runs ask for more parent runs
	// than drain does; once the result is forwarded, they just complete.
	if _, done, err := j.get(ctx, "done"); err != nil || done {
		return err
	}
	children, err := j.Children(ctx)
	if err != nil {
		return err
	}
	if len(children) == 0 {
		if _, err := j.Queue(ctx, "testq", "TestSum", &QueueOpts{Name: "sum"}); err != nil {
			return err
		}
		return Suspend()
	}
	child := children["sum"]
	if _, sent, err := j.get(ctx, "sent"); err != nil {
		return err
	} else if sent {
		sum, err := child.Output(ctx, "sum")
		if err != nil {
			return err
		}
		d, err := sum.Read(ctx)
		if err != nil {
			return err
		}
		if d == nil {
			return Suspend() // run by the child before it had a result
		}
		out, err := j.Output(ctx, "out")
		if err != nil {
			return err
		}
		if err := j.Set(ctx, "done", true); err != nil {
			return err
		}
		return out.Write(ctx, d)
	}
	in, err := child.Input(ctx, "in")
	if err != nil {
		return err
	}
	if err := in.Write(ctx, 5); err != nil {
		return err
	}
	if err := in.Write(ctx, 6); err != nil {
		return err
	}
	ready, err := child.Input(ctx, "ready")
	if err != nil {
		return err
	}
	if err := ready.Write(ctx, 1); err != nil {
		return err
	}
	if err := j.Set(ctx, "sent", 1); err != nil {
		return err
	}
	if _, err := child.Run(ctx, nil); err != nil {
		return err
	}
	return Suspend()
}

// TestIntegrationSum is sum = 11: a parent feeds a child TestSum.
func TestIntegrationSum(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.register(t, "TestSumFlow", testSumFlow{}, `{"inports":{},"outports":{"out":{}}}`)
	job := b.queue(t, "TestSumFlow", nil)
	dctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	_, err := b.rt.drain(dctx, nil)
	require.NoError(t, err)
	require.Equal(t, "completed", b.status(t, job))
	require.Equal(t, "11", b.read(t, b.output(t, job, "out")))
}

// TestIntegrationSidekiqServer runs the sum flow on a real sidekiq.Server
// (fetch, handler, middleware) instead of drain.
func TestIntegrationSidekiqServer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.register(t, "TestSumFlow", testSumFlow{}, `{"inports":{},"outports":{"out":{}}}`)
	srv, err := sidekiq.NewServer(&sidekiq.ServerConfig{
		Pool: b.pool, Queues: []wire.QueueWeight{{Name: "testq"}}, Concurrency: 4,
		DisablePoller: true, HeartbeatInterval: time.Second,
	})
	require.NoError(t, err)
	require.NoError(t, ServerSetup("testq", b.reg)(srv))
	done := make(chan struct{})
	var once sync.Once
	b.register(t, "TestSumFlow", workerFunc(func(ctx context.Context, j *Job, args []rubyjson.Value) error {
		err := testSumFlow{}.Perform(ctx, j, args)
		if err == nil {
			once.Do(func() { close(done) })
		}
		return err
	}), `{"inports":{},"outports":{"out":{}}}`)
	require.NoError(t, srv.Start(ctx))
	job := b.queue(t, "TestSumFlow", nil)
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the flow did not finish")
	}
	require.NoError(t, srv.Stop(ctx))
	// Re-runs requested while the server stopped (or rescheduled after a
	// lock-out; the poller is off) are finished inline.
	sched, err := redis.Strings(b.do(t, "ZRANGE", "schedule", 0, -1), nil)
	require.NoError(t, err)
	for _, raw := range sched {
		b.do(t, "LPUSH", "queue:testq", raw)
	}
	_, err = b.rt.drain(ctx, nil)
	require.NoError(t, err)
	require.Equal(t, "completed", b.status(t, job))
	require.Equal(t, "11", b.read(t, b.output(t, job, "out")))
}
