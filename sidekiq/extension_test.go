package sidekiq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/redistest"
	"github.com/gojob/gojob/internal/wait"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// testExtension records what the runtime tells an extension, and acts as
// its fields say.
type testExtension struct {
	mu       sync.Mutex
	pushes   [][]string // jids per BeforePush call
	ats      []bool     // whether each pushed job carried "at"
	pushErr  error
	prepared map[string]any // by jid: what the job ran with as Prepared
	ahead    int            // runs whose slot fetched ahead
	hold     bool
	held     []func()
	beats    int
	beatErr  error
	runs     int
}

func (e *testExtension) BeforePush(ctx context.Context, jobs []*wire.Job) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	var jids []string
	for _, j := range jobs {
		jids = append(jids, j.JID())
		e.ats = append(e.ats, j.Has("at"))
	}
	e.pushes = append(e.pushes, jids)
	return e.pushErr
}

func (e *testExtension) Prepare(run *Run) any {
	if run.FetchAhead() {
		panic("Prepare fetched ahead")
	}
	if _, ok := run.HoldAck(); ok {
		panic("Prepare held an acknowledgement")
	}
	return "prepared " + run.Job.JID()
}

func (e *testExtension) Run(ctx context.Context, run *Run, next func(context.Context) error) error {
	ahead := run.FetchAhead()
	var release func()
	var holding bool
	if e.hold {
		release, holding = run.HoldAck()
	}
	run.OnHeartbeat(func(context.Context) error {
		e.mu.Lock()
		defer e.mu.Unlock()
		e.beats++
		return e.beatErr
	})
	err := next(ctx)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.runs++
	if ahead {
		e.ahead++
	}
	if run.Prepared != nil {
		if e.prepared == nil {
			e.prepared = map[string]any{}
		}
		e.prepared[run.Job.JID()] = run.Prepared
	}
	if holding {
		e.held = append(e.held, release)
	}
	return err
}

// The extensions see every push once, after the middleware and before
// Redis: one job for Push, the whole batch for PushBulk, "at" on
// scheduled jobs; an error aborts the push.
func TestExtensionSeesEveryPushBeforeRedis(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	ext := &testExtension{}
	pool := rs.Pool(t)
	stop := func(ctx context.Context, job *wire.Job, next func(context.Context) error) error {
		if job.JID() == "stopped" {
			return nil // the middleware stops this push: no extension call
		}
		return next(ctx)
	}
	c, err := NewClient(&ClientConfig{Pool: pool, Extensions: []Extension{ext}, Middleware: []Middleware{stop}})
	require.NoError(t, err)
	ctx := context.Background()
	one := newJob(t, "X")
	one.Set("jid", rubyjson.StringValue("one"))
	_, err = c.Push(ctx, one, nil)
	require.NoError(t, err)
	later := newJob(t, "X")
	later.Set("jid", rubyjson.StringValue("later"))
	_, err = c.Push(ctx, later, &PushOpts{In: time.Hour})
	require.NoError(t, err)
	var bulk []*wire.Job
	for _, jid := range []string{"b1", "stopped", "b2"} {
		j := newJob(t, "X")
		j.Set("jid", rubyjson.StringValue(jid))
		bulk = append(bulk, j)
	}
	_, err = c.PushBulk(ctx, bulk, nil)
	require.NoError(t, err)
	require.Equal(t, [][]string{{"one"}, {"later"}, {"b1", "b2"}}, ext.pushes)
	require.Equal(t, []bool{false, true, false, false}, ext.ats)
	require.False(t, later.Has("at"), "at is never stored")

	ext.pushErr = errors.New("refused")
	refused := newJob(t, "X")
	_, err = c.Push(ctx, refused, nil)
	require.ErrorIs(t, err, ext.pushErr)
	_, err = c.PushBulk(ctx, []*wire.Job{newJob(t, "X")}, nil)
	require.ErrorIs(t, err, ext.pushErr)
	conn := pool.Get()
	defer conn.Close()
	n, err := conn.Do("LLEN", "queue:default")
	require.NoError(t, err)
	require.EqualValues(t, 3, n, "the refused pushes wrote nothing")
}

// With the reliable fetch a job's slot fetches ahead when its extension
// asks: the next jobs run with what Prepare returned. Held
// acknowledgements keep their jobs in the in-progress list until
// released, and a heartbeat reaches the extension.
func TestExtensionFetchesAheadHoldsAcksAndHearsHeartbeats(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"reliable", "basic"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			ext := &testExtension{hold: true}
			b := newTestServer(t, ServerConfig{Concurrency: 1, Fetch: mode, Queues: []wire.QueueWeight{{Name: "default"}},
				Extensions: []Extension{ext}})
			const n = 6
			for i := range n {
				b.push(t, "default", fmt.Sprintf(`{"class":"Job","args":[],"jid":"j%d","queue":"default","retry":true}`, i))
			}
			b.srv.Handle("Job", HandlerFunc(func(ctx context.Context, _ *wire.Job) error { return Heartbeat(ctx) }), nil)
			b.start(t)
			b.waitProcessed(t, n)
			ext.mu.Lock()
			runs, beats, ahead, prepared, held := ext.runs, ext.beats, ext.ahead, ext.prepared, ext.held
			ext.mu.Unlock()
			require.Equal(t, n, runs)
			require.Equal(t, n, beats, "every heartbeat reached the extension")
			if mode != "reliable" {
				require.Zero(t, ahead)
				require.Empty(t, prepared)
				require.Empty(t, held, "no acknowledgement to hold without a reliable fetch")
				return
			}
			// A slot whose last job took 5 ms or more (a loaded machine)
			// does not fetch ahead, so not every job need have been.
			require.NotZero(t, ahead)
			require.NotEmpty(t, prepared)
			for jid, v := range prepared {
				require.Equal(t, "prepared "+jid, v)
				require.NotEqual(t, "j0", jid, "the first job was fetched by its slot")
			}
			require.Len(t, held, n)
			inProgress := func() int { return len(redistest.InProgress(t, b.conn, "")) }
			require.Equal(t, n, inProgress(), "held successes stay in the in-progress list")
			for _, release := range held {
				release()
				release() // a second call does nothing
			}
			wait.For(t, "the in-progress list empty", func() bool { return inProgress() == 0 })
		})
	}
}

// An extension's heartbeat error reaches the handler while its job is not
// cancelled.
func TestHeartbeatReturnsTheExtensionsError(t *testing.T) {
	t.Parallel()
	gone := errors.New("row gone")
	ext := &testExtension{beatErr: gone}
	b := newTestServer(t, ServerConfig{Concurrency: 1, Extensions: []Extension{ext}})
	got := make(chan error, 1)
	b.srv.Handle("Job", HandlerFunc(func(ctx context.Context, _ *wire.Job) error {
		got <- Heartbeat(ctx)
		return nil
	}), nil)
	b.push(t, "default", `{"class":"Job","args":[],"jid":"h","queue":"default"}`)
	b.start(t)
	require.ErrorIs(t, <-got, gone)
}

func newJob(t *testing.T, class string) *wire.Job {
	t.Helper()
	j, err := wire.NewJob(class)
	require.NoError(t, err)
	return j
}

// scopedExtension prepares and runs only the jobs carrying "mine", and
// counts what it sees.
type scopedExtension struct {
	mu       sync.Mutex
	runs     []string
	prepared []string
	ahead    bool
}

func (e *scopedExtension) PayloadKeys() []string { return []string{"mine"} }

func (e *scopedExtension) Prepare(run *Run) any {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.prepared = append(e.prepared, run.Job.JID())
	return nil
}

func (e *scopedExtension) Run(ctx context.Context, run *Run, next func(context.Context) error) error {
	if e.ahead {
		run.FetchAhead()
	}
	e.mu.Lock()
	e.runs = append(e.runs, run.Job.JID())
	e.mu.Unlock()
	return next(ctx)
}

// observerOnly is an extension with one hook: it counts finished jobs.
type observerOnly struct{ done chan string }

func (o observerOnly) JobDone(queue, class string, took time.Duration, err error) { o.done <- class }

// A scoped extension's hooks see only the jobs with its payload keys; an
// extension with only an observer hook hears every job.
func TestScopedHooksRunOnlyForTheirJobs(t *testing.T) {
	t.Parallel()
	ext := &scopedExtension{ahead: true}
	obs := observerOnly{done: make(chan string, 64)}
	b := newTestServer(t, ServerConfig{Concurrency: 1, Queues: []wire.QueueWeight{{Name: "default"}},
		Extensions: []Extension{ext, obs}})
	const n = 20
	for i := range n {
		mine := ""
		if i%4 == 0 {
			mine = `,"mine":"yes"`
		}
		b.push(t, "default", fmt.Sprintf(`{"class":"Job","args":[],"jid":"j%d","queue":"default"%s}`, i, mine))
	}
	b.srv.Handle("Job", HandlerFunc(func(context.Context, *wire.Job) error { return nil }), nil)
	b.start(t)
	b.waitProcessed(t, n)
	for range n {
		require.Equal(t, "Job", <-obs.done)
	}
	ext.mu.Lock()
	defer ext.mu.Unlock()
	require.ElementsMatch(t, []string{"j0", "j4", "j8", "j12", "j16"}, ext.runs)
	for _, jid := range ext.prepared {
		require.Contains(t, ext.runs, jid, "only its own jobs are prepared")
	}
}

// A value that implements no hook is no extension: refused by the
// configs, a programming error for Extend.
func TestExtensionWithoutHooksIsRefused(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	pool := rs.Pool(t)
	_, err := NewServer(&ServerConfig{Pool: pool, Extensions: []Extension{struct{}{}}})
	require.ErrorContains(t, err, "implements none of")
	_, err = NewClient(&ClientConfig{Pool: pool, Extensions: []Extension{42}})
	require.ErrorContains(t, err, "implements none of")
	srv, err := NewServer(&ServerConfig{Pool: pool})
	require.NoError(t, err)
	require.Panics(t, func() { srv.Extend("nothing") })
	require.Panics(t, func() { srv.Client().Extend(struct{}{}) })
}

// CancelRunning cancels one running job, with its cause, and makes its
// outcome; the other job runs on; a job that is not running is not found.
func TestCancelRunningCancelsOneJob(t *testing.T) {
	t.Parallel()
	b := newTestServer(t, ServerConfig{Concurrency: 2, Queues: []wire.QueueWeight{{Name: "default"}}})
	started := make(chan string, 2)
	causes := make(chan error, 2)
	release := make(chan struct{})
	b.srv.Handle("Block", HandlerFunc(func(ctx context.Context, job *wire.Job) error {
		started <- job.JID()
		select {
		case <-ctx.Done():
			causes <- context.Cause(ctx)
			return errors.New("stopped")
		case <-release:
			return nil
		}
	}), nil)
	b.push(t, "default", `{"class":"Block","args":[],"jid":"a","queue":"default","retry":false}`)
	b.push(t, "default", `{"class":"Block","args":[],"jid":"b","queue":"default","retry":false}`)
	b.start(t)
	<-started
	<-started
	require.ElementsMatch(t, []string{"a", "b"}, b.srv.RunningJIDs())
	require.False(t, b.srv.CancelRunning("nosuch", errors.New("x"), nil))
	cause := errors.New("asked to stop")
	var seen error
	require.True(t, b.srv.CancelRunning("a", cause, func(err error) error {
		seen = err
		return nil // the outcome: a success whatever the handler said
	}))
	require.Equal(t, cause, <-causes)
	wait.For(t, "job a finished", func() bool { return len(b.srv.RunningJIDs()) == 1 })
	require.EqualError(t, seen, "stopped")
	require.Equal(t, []string{"b"}, b.srv.RunningJIDs())
	require.False(t, b.srv.CancelRunning("a", cause, nil), "a is done")
	close(release)
	b.waitProcessed(t, 2)
	_, failed := b.srv.proc.counters.Pending()
	require.Zero(t, failed, "the outcome replaced a's failure")
}
