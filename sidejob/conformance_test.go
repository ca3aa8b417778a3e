package sidejob

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/sidejobwire"
	"github.com/gojob/gojob/sidekiq/rubyjson"
)

// Examples of the gem's suite (docs/sidejob.md#gem-test-suite) that the other test files do not
// cover.

// sidejob_spec.rb: "args are stored and passed to perform"; "parent+name
// links both ways (enqueued +2)".
func TestConformQueueArgsAndParent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	var got []string
	b.register(t, "Args", workerFunc(func(_ context.Context, _ *Job, args []rubyjson.Value) error {
		got = append(got, string(rubyjson.ArrayValue(args...).Encode()))
		return nil
	}), "")
	j := b.queue(t, "Args", &QueueOpts{Args: []any{1, "two", []any{3.5}}})
	_, err := b.rt.drain(ctx, nil)
	require.NoError(t, err)
	require.Equal(t, []string{`[1,"two",[3.5]]`}, got)

	parent := b.queue(t, "TestWorker", nil)
	b.do(t, "DEL", "queue:testq")
	child, err := b.c.Queue(ctx, "testq", "TestWorker", &QueueOpts{Parent: parent, Name: "kid"})
	require.NoError(t, err)
	require.Equal(t, 1, b.enqueued(t), "the child is queued")
	require.NoError(t, parent.setStatus(ctx, statusCompleted))
	_, err = child.Run(ctx, &RunOpts{Parent: true})
	require.NoError(t, err)
	require.Equal(t, 2, b.enqueued(t), "and its parent")
	kid, err := parent.child(ctx, "kid")
	require.NoError(t, err)
	require.True(t, kid.equal(child))
	p, err := child.Parent(ctx)
	require.NoError(t, err)
	require.True(t, p.equal(parent))
	require.False(t, j.equal(parent))
}

// job_spec.rb: exists?; run(parent: true) queues the parent and leaves the
// child as it was; terminated? recursion; terminate is a no-op when
// terminated, pushes to the queue, and terminates an unregistered job with
// an error; publish goes to /sidejob/job/N.
func TestConformJobLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	parent := b.queue(t, "TestWorker", nil)
	child, err := parent.Queue(ctx, "testq", "TestWorker", &QueueOpts{Name: "kid"})
	require.NoError(t, err)
	ok, err := child.exists(ctx)
	require.NoError(t, err)
	require.True(t, ok)

	require.NoError(t, parent.setStatus(ctx, statusSuspended))
	require.NoError(t, child.setStatus(ctx, statusCompleted))
	b.do(t, "DEL", "queue:testq")
	got, err := child.Run(ctx, &RunOpts{Parent: true})
	require.NoError(t, err)
	require.True(t, got.equal(parent))
	require.Equal(t, statusQueued, b.status(t, parent))
	require.Equal(t, statusCompleted, b.status(t, child), "the child is left as it was")
	require.Equal(t, []string{"1"}, jids(t, b))

	require.NoError(t, parent.setStatus(ctx, statusTerminated))
	term, err := parent.terminated(ctx)
	require.NoError(t, err)
	require.False(t, term, "a child is not terminated")
	deleted, err := parent.Delete(ctx)
	require.NoError(t, err)
	require.False(t, deleted)

	sub := b.subscribe(t)
	require.NoError(t, parent.Terminate(ctx, false))
	require.Equal(t, statusTerminated, b.status(t, parent), "no-op when terminated")
	b.do(t, "DEL", "queue:testq")
	require.NoError(t, child.Terminate(ctx, false))
	require.Equal(t, statusTerminating, b.status(t, child))
	require.Equal(t, []string{"2"}, jids(t, b), "pushed so that shutdown runs")
	require.NoError(t, child.publish(ctx, map[string]any{"hi": 1}))
	require.Equal(t, []string{
		`/sidejob/job/2  {"status":"terminating"}`,
		`/sidejob/job/2  {"hi":1}`,
	}, normalize(sub.stop(t, b)))

	other := b.queue(t, "TestWorker", nil)
	b.do(t, "HDEL", "workers:testq", "TestWorker")
	b.do(t, "DEL", "queue:testq")
	require.ErrorIs(t, other.Terminate(ctx, false), errNotRegistered)
	require.Equal(t, statusTerminated, b.status(t, other))
	require.Zero(t, b.enqueued(t))
	b.registerAll(t)

	require.NoError(t, child.setStatus(ctx, statusTerminated))
	deleted, err = parent.Delete(ctx)
	require.NoError(t, err)
	require.True(t, deleted)
	ok, err = child.exists(ctx)
	require.NoError(t, err)
	require.False(t, ok, "false after delete")
}

// job_spec.rb, inports=/outports=: changing a default keeps the data; the
// channels of in- and outports add the job to channel:*; ports that are
// removed lose their data and then raise.
func TestConformSetPorts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	j := b.queue(t, "TestWorker", &QueueOpts{
		Inports:  `{"a":{"default":1},"gone":{}}`,
		Outports: `{"o":{"channels":["/out/chan"]}}`,
	})
	require.Equal(t, []string{"1"}, b.set(t, "channel:/out/chan"), "set_ports adds outport channels too")
	b.write(t, b.input(t, j, "a"), "x")
	b.write(t, b.input(t, j, "gone"), "y")
	require.NoError(t, j.setInports(ctx, []portDef{
		{Name: "a", HasDefault: true, Default: 2, Channels: []string{"/in/chan"}},
		{Name: "new"},
	}))
	require.Equal(t, []string{"1"}, b.set(t, "channel:/in/chan"))
	a := b.input(t, j, "a")
	require.Equal(t, `"x"`, b.read(t, a), "the data is kept")
	require.Equal(t, "2", b.read(t, a), "then the new default")
	require.False(t, b.exists(t, "job:1:in:gone"), "a removed port loses its data")
	_, err := j.Input(ctx, "gone")
	require.ErrorIs(t, err, errNoPort)
	ports, err := j.ports(ctx, inPort)
	require.NoError(t, err)
	require.Len(t, ports, 2)
	require.Equal(t, map[string]string{"a": `{"data":2}`}, b.hash(t, "job:1:inports:default"))
}

// port_spec.rb, connect_to: nothing is logged or published when there is no
// data; the default is copied to an outport destination; the parent of an
// outport destination's job runs; the data is published to the channels of
// destination outports.
func TestConformConnectToOutport(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	src := b.queue(t, "TestSum", nil)
	parent := b.queue(t, "TestWorker", nil)
	dst, err := parent.Queue(ctx, "testq", "TestSum", &QueueOpts{Name: "kid",
		Outports: `{"sum":{"channels":["/dst/out"]}}`})
	require.NoError(t, err)
	from, to := b.output(t, src, "sum"), b.output(t, dst, "sum")
	require.NoError(t, from.SetDefault(ctx, 0))
	require.NoError(t, parent.setStatus(ctx, statusCompleted))
	require.NoError(t, dst.setStatus(ctx, statusCompleted))
	sub := b.subscribe(t)
	got, err := from.connectTo(ctx, to)
	require.NoError(t, err)
	require.Empty(t, got)
	for _, m := range sub.stop(t, b) {
		require.NotEqual(t, sidejobwire.LogChannel, m.Channel, "no log without data")
		require.NotEqual(t, "/dst/out", m.Channel, "no publish without data")
	}
	require.Equal(t, map[string]string{"sum": `{"data":0}`}, b.hash(t, "job:3:outports:default"), "default copied")
	require.Equal(t, statusQueued, b.status(t, parent), "the default changed: the parent runs")
	require.Equal(t, statusCompleted, b.status(t, dst), "not the job of an outport")

	require.NoError(t, parent.setStatus(ctx, statusCompleted))
	require.NoError(t, b.c.inGroup(ctx, &groupOptions{Notify: opt(false)}, func(ctx context.Context) error {
		return from.Write(ctx, 8)
	}))
	sub = b.subscribe(t)
	got, err = from.connectTo(ctx, to)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Contains(t, normalize(sub.stop(t, b)), `/dst/out  8`)
	require.Equal(t, statusQueued, b.status(t, parent), "data moved: the parent runs")
}

// port_spec.rb, .group: options are set, merged and restored when a nested
// group ends.
func TestConformGroupOptionsRestored(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	v := rubyjson.IntValue(1)
	require.NoError(t, b.c.inGroup(ctx, &groupOptions{Notify: opt(false)}, func(ctx context.Context) error {
		require.NoError(t, b.c.inGroup(ctx, &groupOptions{Notify: opt(true), Log: opt(false)}, func(ctx context.Context) error {
			require.Equal(t, `{"data":1,"options":{"notify":true,"log":false}}`, string(encodeData(ctx, v)))
			return nil
		}))
		require.Equal(t, `{"data":1,"options":{"notify":false}}`, string(encodeData(ctx, v)), "restored")
		return nil
	}))
	require.Equal(t, `{"data":1}`, string(encodeData(ctx, v)))
}

// worker_spec.rb: config of a class registered in another queue is nil;
// for_inputs with no ports does not yield.
func TestConformWorkerConfigAndForInputs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	cfg, err := b.c.workerConfig(ctx, "otherq", "TestWorker")
	require.NoError(t, err)
	require.Nil(t, cfg, "registered in testq only")
	j := b.queue(t, "TestWorker", nil)
	called := false
	require.NoError(t, j.ForInputs(ctx, nil, func(context.Context, []rubyjson.Value) error {
		called = true
		return nil
	}))
	require.False(t, called)
}

// testing_spec.rb: drain_queue runs jobs (TestSum gives 10 and 15), stops at
// its timeout, raises worker errors unless told not to; run_inline queues a
// suspended job by default and leaves it alone with queue: false.
func TestConformTestingHelpers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	j1 := b.queue(t, "TestSum", nil)
	j2 := b.queue(t, "TestSum", nil)
	b.write(t, b.input(t, j1, "in"), 1, 2, 3, 4)
	b.write(t, b.input(t, j2, "in"), 4, 5, 6)
	b.write(t, b.input(t, j1, "ready"), 1)
	b.write(t, b.input(t, j2, "ready"), 1)
	_, err := b.rt.drain(ctx, nil)
	require.NoError(t, err)
	require.Equal(t, "10", b.read(t, b.output(t, j1, "sum")))
	require.Equal(t, "15", b.read(t, b.output(t, j2, "sum")))
	require.Zero(t, b.enqueued(t))

	_, err = j1.Run(ctx, &RunOpts{Force: true})
	require.NoError(t, err)
	done, cancel := context.WithCancel(ctx)
	cancel()
	_, err = b.rt.drain(done, nil)
	require.ErrorIs(t, err, context.Canceled, "the timeout")
	b.do(t, "DEL", "queue:testq")

	boom := errors.New("boom")
	w := &hookWorker{perform: func(context.Context, *Job) error { return boom }}
	jf := b.hook(t, w)
	_, err = b.rt.drain(ctx, nil)
	require.ErrorIs(t, err, boom, "errors are raised by default")
	_, err = jf.Run(ctx, &RunOpts{Force: true})
	require.NoError(t, err)
	_, err = b.rt.drain(ctx, &drainOpts{SwallowErrors: true})
	require.NoError(t, err)
	require.Equal(t, statusFailed, b.status(t, jf))

	w.perform = func(context.Context, *Job) error { return Suspend() }
	require.NoError(t, jf.setStatus(ctx, statusSuspended))
	w.calls = nil
	require.NoError(t, b.rt.runInline(ctx, jf, &inlineOpts{KeepStatus: true}))
	require.Empty(t, w.calls, "queue: false leaves a suspended job alone")
	require.NoError(t, b.rt.runInline(ctx, jf, nil))
	require.Equal(t, []string{"perform"}, w.calls, "queued first by default")
	require.Equal(t, statusSuspended, b.status(t, jf))
}

// The middleware releases only its own job lock (compare-and-delete): when
// the lock expired during perform and another holder took it, the other
// holder keeps it.
func TestConformUnlockOnlyOwnToken(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := &hookWorker{}
	j := b.hook(t, w)
	w.perform = func(context.Context, *Job) error {
		b.do(t, "SET", j.key("lock"), "someone-else")
		return nil
	}
	require.NoError(t, b.exec(t, j))
	require.Equal(t, "someone-else", b.str(t, j.key("lock")))
	require.Equal(t, statusCompleted, b.status(t, j))
}

// Concurrent executions of one queued job (as several Sidekiq threads or
// processes would do): perform never runs twice at the same time and runs
// once (the status is re-read under the lock), and nothing is left locked.
func TestConformConcurrentExecutions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var inside, maxInside, performs atomic.Int32
	w := &hookWorker{}
	j := b.hook(t, w)
	b.register(t, "Hook", workerFunc(func(ctx context.Context, j *Job, _ []rubyjson.Value) error {
		n := inside.Add(1)
		defer inside.Add(-1)
		for {
			m := maxInside.Load()
			if n <= m || maxInside.CompareAndSwap(m, n) {
				break
			}
		}
		performs.Add(1)
		_, err := j.status(ctx) // a round trip while holding the lock
		return err
	}), "")
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			require.NoError(t, b.rt.executeJob(context.Background(), "Hook", j.ID(), nil))
		}()
	}
	wg.Wait()
	require.Equal(t, int32(1), maxInside.Load(), "never two performs at once")
	require.Equal(t, int32(1), performs.Load(), "the status is read again under the lock")
	require.Equal(t, statusCompleted, b.status(t, j))
	require.False(t, b.exists(t, j.key("lock")))
	require.False(t, b.exists(t, j.key("lock:worker")))
}
