// Package sidekiqtest tests code that pushes and runs Sidekiq jobs, as
// Ruby's Sidekiq::Testing and River's rivertest do.
//
//   - Fake mode (NewFake, Sidekiq::Testing.fake!): pushes are captured;
//     assert on them with Jobs, RequirePushed and RequireNotPushed, and run
//     them through the registered handlers with Drain (Worker.drain_all).
//   - Inline mode (Fake.Inline, Sidekiq::Testing.inline!): a push runs
//     the job's handler at once, on the pushing goroutine; its error is
//     the push's error.
//   - DrainQueues runs the real Server on a Redis the test gives until the
//     queues it names are empty: the whole runtime, middleware and
//     extensions included.
//
// A Fake's Client is a real client (on an in-process Redis) with the Fake
// attached as a push hook (sidekiq.PushHook), so a push is normalized and
// passed through the client middleware as in production; New attaches a
// Fake to a client of the test's own, a server's client say.
package sidekiqtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/alicebob/miniredis/v2"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/wire"
)

// Fake captures the jobs pushed through its client (or any client
// extended with it) and runs them through its handlers. It is safe for
// concurrent use.
type Fake struct {
	// Inline makes each push run the job's handler during the push
	// (inline mode) instead of only capturing it (fake mode); set it
	// before the first push.
	Inline bool

	client *sidekiq.Client

	mu       sync.Mutex
	jobs     []*wire.Job // captured, in push order
	next     int         // jobs[next:] have not been drained
	handlers map[string]sidekiq.Handler
}

// NewFake returns a Fake in fake mode whose Client pushes to an
// in-process Redis (closed at the end of the test). Set its Inline for
// inline mode.
func NewFake(t testing.TB) *Fake {
	t.Helper()
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		t.Fatalf("sidekiqtest: start in-process redis: %v", err)
	}
	t.Cleanup(m.Close)
	pool, err := sidekiq.NewPool("redis://" + m.Addr())
	if err != nil {
		t.Fatalf("sidekiqtest: %v", err)
	}
	t.Cleanup(func() { pool.Close() })
	c, err := sidekiq.NewClient(&sidekiq.ClientConfig{Pool: pool})
	if err != nil {
		t.Fatalf("sidekiqtest: %v", err)
	}
	return New(c)
}

// New returns a Fake in fake mode attached to c as a push hook: c's
// pushes are captured, and, with Inline set, run. In fake mode they still
// reach c's Redis; NewFake's client has a Redis of its own.
func New(c *sidekiq.Client) *Fake {
	f := &Fake{handlers: map[string]sidekiq.Handler{}}
	c.Extend(pushHook{f})
	f.client = c
	return f
}

// Client returns the Fake's client: pass it to the code under test.
func (f *Fake) Client() *sidekiq.Client { return f.client }

// Handle registers the handler of a class (for an ActiveJob payload, of
// its ActiveJob class), as Server.Handle does; typed.Handler makes one
// from a typed function.
func (f *Fake) Handle(class string, h sidekiq.Handler) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.handlers[class] = h
}

// pushHook is a Fake as its client's sidekiq.PushHook.
type pushHook struct{ f *Fake }

// BeforePush captures the jobs (normalized: with jid, queue, retry and
// created_at, and "at" for a scheduled job), and in inline mode runs
// them. It sees a push before the unique lock is taken, so a duplicate
// push of a unique job is captured (and run) too, as uniqueness does not
// apply under Sidekiq::Testing.
func (h pushHook) BeforePush(ctx context.Context, jobs []*wire.Job) error {
	f := h.f
	f.mu.Lock()
	for _, j := range jobs {
		f.jobs = append(f.jobs, j.Clone())
	}
	if !f.Inline {
		f.mu.Unlock()
		return nil
	}
	f.next = len(f.jobs) // inline: these are run now, never drained
	f.mu.Unlock()
	for _, j := range jobs {
		if err := f.perform(ctx, j.Clone()); err != nil {
			return err
		}
	}
	return nil
}

// errNoHandler is the error of a job whose class has no handler.
var errNoHandler = errors.New("sidekiqtest: no handler")

func (f *Fake) perform(ctx context.Context, job *wire.Job) error {
	job.Delete("at")
	f.mu.Lock()
	h, ok := f.handlers[job.Class()]
	if !ok {
		if name := contract.ActiveJobClass(job); name != "" {
			h, ok = f.handlers[name]
		}
	}
	f.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w for class %s (jid %s)", errNoHandler, job.Class(), job.JID())
	}
	return h.Perform(ctx, job)
}

// Jobs returns the captured jobs of class, in push order, or all captured
// jobs when class is "". Each is a copy; in inline mode they are the jobs
// that ran.
func (f *Fake) Jobs(class string) []*wire.Job {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*wire.Job
	for _, j := range f.jobs {
		if class == "" || j.Class() == class || contract.ActiveJobClass(j) == class {
			out = append(out, j.Clone())
		}
	}
	return out
}

// Clear forgets the captured jobs (Sidekiq::Worker.clear_all).
func (f *Fake) Clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.jobs, f.next = nil, 0
}

// Drain runs the captured jobs that have not run, in push order, through
// the handlers, scheduled ones included, and the jobs they push, until
// none is left (Sidekiq::Worker.drain_all). It stops at the first error,
// as drain_all raises, and returns it: the failed job and those after it
// stay pending, for a later Drain (after a handler is registered, say).
// Drain must not run concurrently with itself.
func (f *Fake) Drain(ctx context.Context) error {
	for {
		f.mu.Lock()
		if f.next >= len(f.jobs) {
			f.mu.Unlock()
			return nil
		}
		i := f.next
		j := f.jobs[i].Clone()
		f.next++ // the jobs it pushes come after it
		f.mu.Unlock()
		if err := f.perform(ctx, j); err != nil {
			f.mu.Lock()
			f.next = i // pending again, before the jobs it pushed
			f.mu.Unlock()
			return err
		}
	}
}
