package sidekiq

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Per-job heartbeats and timeouts (docs/heartbeats.md), Ocypod's model: a
// job may carry "timeout" (seconds it may run in all) and
// "heartbeat_timeout" (seconds it may go without a heartbeat). A job that
// exceeds either is cancelled (its context ends with a *TimeoutError as
// the cause) and fails through the ordinary retry path with error_class
// Gojob::Timeout or Gojob::HeartbeatTimeout. A handler that ignores the
// cancellation for ServerConfig.CancelGrace is left running: its slot is
// freed, the incident logged, and whatever it returns later is discarded.

// Heartbeat tells gojob that the job running with ctx is alive: its
// heartbeat_timeout starts again, the Busy page (the work hash) and
// `gojob processes` show the time, and the extensions that follow the job
// hear of it (a durable job's row gets a later deadline: Run.OnHeartbeat).
// It is cheap and safe from any goroutine. It returns the cause of the
// job's cancellation (*TimeoutError for a missed deadline, or
// context.Canceled at shutdown), else an extension's error (a durable job
// whose row is gone), or nil while the job may go on. Outside a job it
// does nothing.
func Heartbeat(ctx context.Context) error {
	w, _ := ctx.Value(watchKey{}).(*jobWatch)
	if w == nil {
		return context.Cause(ctx)
	}
	w.beat()
	var hookErr error
	for _, f := range w.hooks {
		if err := f(ctx); err != nil && hookErr == nil {
			hookErr = err
		}
	}
	if err := context.Cause(ctx); err != nil {
		return err
	}
	return hookErr
}

// Stopping returns a channel that is closed when the server running the
// job of ctx stops taking jobs: it went quiet, or its stop began. A long
// job that can stop at a safe point and resume later (an iterable job)
// should do so then, and return Interrupt, rather than run on until the
// shutdown timeout ends it. Outside a job it returns nil, which is never
// closed.
func Stopping(ctx context.Context) <-chan struct{} {
	if w, _ := ctx.Value(watchKey{}).(*jobWatch); w != nil {
		return w.quiet
	}
	return nil
}

// TimeoutError is the failure of a job cancelled for a missed deadline:
// it ran longer than its timeout (the payload's "timeout", else
// ServerConfig.JobTimeout), error_class Gojob::Timeout, or, with
// Heartbeat set, it went longer than its heartbeat_timeout without a
// heartbeat, error_class Gojob::HeartbeatTimeout.
type TimeoutError struct {
	// Heartbeat is set for a missed heartbeat_timeout.
	Heartbeat bool
	// Limit is the job's timeout, or its heartbeat_timeout.
	Limit time.Duration
	// Silent is, for a missed heartbeat_timeout, the time since the last
	// heartbeat (or the start, when the job never sent one) at the
	// cancellation.
	Silent time.Duration
	// Beats reports, for a missed heartbeat_timeout, whether the job had
	// sent any heartbeat.
	Beats bool
	// LeftRunning is set when the handler ignored the cancellation for this
	// long; it was left running and its outcome is discarded.
	LeftRunning time.Duration
}

func (e *TimeoutError) Error() string {
	if !e.Heartbeat {
		return fmt.Sprintf("the job ran longer than its timeout of %s and was cancelled%s", secs(e.Limit), leftRunningText(e.LeftRunning))
	}
	since := "its last heartbeat"
	if !e.Beats {
		since = "its start (it never sent one)"
	}
	return fmt.Sprintf("no heartbeat for %s since %s, over its heartbeat_timeout of %s; the job was cancelled%s",
		secs(e.Silent), since, secs(e.Limit), leftRunningText(e.LeftRunning))
}

// ErrorClass is the retry entry's error_class: Gojob::Timeout, or
// Gojob::HeartbeatTimeout for a missed heartbeat_timeout.
func (e *TimeoutError) ErrorClass() string {
	if e.Heartbeat {
		return "Gojob::HeartbeatTimeout"
	}
	return "Gojob::Timeout"
}

func leftRunningText(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	return fmt.Sprintf("; its handler ignored the cancellation for %s and was left running (its outcome is discarded)", secs(d))
}

// secs prints a duration in seconds as the payload keys give it.
func secs(d time.Duration) string {
	return fmt.Sprintf("%gs", d.Round(time.Millisecond).Seconds())
}

// leftRunning returns a copy of a limit error marked as left running (the
// original may be read by the handler through context.Cause meanwhile).
func leftRunning(cause error, grace time.Duration) error {
	if e, ok := cause.(*TimeoutError); ok {
		c := *e
		c.LeftRunning = grace
		return &c
	}
	return cause
}

type watchKey struct{}

// jobLimits are the deadlines of one job; zero is none.
type jobLimits struct {
	timeout   time.Duration
	heartbeat time.Duration
}

// badLimits marks a job whose limits are not numbers of seconds: it fails
// without running (the error is limitsOf's; keeping it in the work item
// would cost every job its room).
var badLimits = jobLimits{timeout: -1, heartbeat: -1}

// jobWatch follows one running job: its heartbeats, and with limits a
// timer that fires at the next deadline (no polling: a missed deadline is
// acted on when it passes). It cancels the job's context with the limit's
// error as the cause and closes expired.
type jobWatch struct {
	lim jobLimits
	// last is the time of the last heartbeat: for a job with limits an
	// offset from dl.begin (on the monotonic clock) plus one, otherwise
	// Unix nanoseconds; 0 means none yet.
	last atomic.Int64
	// hooks are the extensions' heartbeat functions (Run.OnHeartbeat).
	hooks []func(context.Context) error
	// quiet is closed when the server stops taking jobs (Stopping).
	quiet <-chan struct{}
	// dl is the timer of a job with limits; nil for a job without, most
	// of them, whose work item then carries none of it.
	dl *deadlineTimer
}

// deadlineTimer is the state of a job with limits.
type deadlineTimer struct {
	// begin is when the job started (reading the clock costs a job
	// without limits on the fetch path, so only these read it).
	begin   time.Time
	ctx     *jobCtx // cancelled when a limit is missed
	expired chan struct{}

	mu      sync.Mutex
	timer   *time.Timer
	stopped bool
	cause   error // set before expired is closed
}

// start starts watching the job of ctx.
func (w *jobWatch) start(lim jobLimits, ctx *jobCtx) {
	w.lim = lim
	if !w.limited() {
		return
	}
	dl := &deadlineTimer{begin: time.Now(), ctx: ctx, expired: make(chan struct{})}
	w.dl = dl
	dl.mu.Lock()
	dl.timer = time.AfterFunc(w.next(0), w.check)
	dl.mu.Unlock()
}

// jobCtx is a job's context: its cancellation, and its watch for
// Heartbeat. It lives in the job's workItem, so that a job costs no
// allocation for it (context.WithValue would make one). Its cancellation
// (a context.WithCancelCause of base) is made the first time anything
// needs it: Done, Err, a value base does not hold (context.Cause and
// child contexts ask for one), or a cancel. A short job whose handler
// never looks costs neither its two allocations nor its cancel; one
// made after the job ended is born cancelled, as it would have been.
type jobCtx struct {
	base context.Context // the processor's jobBase: never cancelled, no deadline
	w    *jobWatch

	ctx    context.Context
	cancel context.CancelCauseFunc
	mu     sync.Mutex   // making ctx and cancel
	state  atomic.Int32 // ctxNone, ctxEnded, ctxMade
}

// The states of a jobCtx's cancellation.
const (
	ctxNone  int32 = iota // not made, the job runs
	ctxEnded              // not made, the job ended: made cancelled
	ctxMade               // ctx and cancel are set
)

func (c *jobCtx) Deadline() (time.Time, bool) { return c.base.Deadline() }
func (c *jobCtx) Done() <-chan struct{}       { return c.inner().Done() }
func (c *jobCtx) Err() error                  { return c.inner().Err() }

func (c *jobCtx) Value(key any) any {
	if key == (watchKey{}) {
		return c.w
	}
	if v := c.base.Value(key); v != nil {
		return v
	}
	// Absent from base, or the key of context.Cause and of child contexts,
	// which only the cancellation holds.
	return c.inner().Value(key)
}

// inner returns the cancellation, made on first use.
func (c *jobCtx) inner() context.Context {
	if c.state.Load() == ctxMade {
		return c.ctx
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state.Load() != ctxMade {
		c.ctx, c.cancel = context.WithCancelCause(c.base)
		// The job may end meanwhile (end sets ctxEnded without the lock):
		// then the cancellation is born cancelled.
		if !c.state.CompareAndSwap(ctxNone, ctxMade) {
			c.cancel(nil)
			c.state.Store(ctxMade)
		}
	}
	return c.ctx
}

// cancelJob cancels the job's context with cause (nil: context.Canceled).
func (c *jobCtx) cancelJob(cause error) {
	c.inner()
	c.cancel(cause)
}

// end cancels the context when the job is done, or marks it ended when
// nothing has made its cancellation yet (without a lock: most jobs).
func (c *jobCtx) end() {
	if c.state.CompareAndSwap(ctxNone, ctxEnded) {
		return
	}
	c.inner() // made, or being made
	c.cancel(nil)
}

func (w *jobWatch) limited() bool { return w.lim.timeout > 0 || w.lim.heartbeat > 0 }

func (w *jobWatch) beat() {
	if w.dl == nil {
		w.last.Store(time.Now().UnixNano())
		return
	}
	w.last.Store(int64(time.Since(w.dl.begin)) + 1)
}

// lastBeat returns the wall time of the last heartbeat, zero when none.
func (w *jobWatch) lastBeat() time.Time {
	n := w.last.Load()
	if n == 0 {
		return time.Time{}
	}
	if w.dl == nil {
		return time.Unix(0, n)
	}
	return w.dl.begin.Add(time.Duration(n - 1))
}

// silence returns the time since the last heartbeat (or the start) at
// offset now.
func (w *jobWatch) silence(now time.Duration) (time.Duration, bool) {
	n := w.last.Load()
	if n == 0 {
		return now, false
	}
	return now - time.Duration(n-1), true
}

// next returns how long until the next deadline, from offset now.
func (w *jobWatch) next(now time.Duration) time.Duration {
	d := time.Duration(1<<63 - 1)
	if w.lim.timeout > 0 {
		d = w.lim.timeout - now
	}
	if w.lim.heartbeat > 0 {
		silent, _ := w.silence(now)
		d = min(d, w.lim.heartbeat-silent)
	}
	return max(d, 0)
}

// check runs at a deadline: it expires the job or re-arms the timer for
// the deadline a heartbeat moved.
func (w *jobWatch) check() {
	dl := w.dl
	dl.mu.Lock()
	defer dl.mu.Unlock()
	if dl.stopped {
		return
	}
	now := time.Since(dl.begin)
	if w.lim.timeout > 0 && now >= w.lim.timeout {
		w.expireLocked(&TimeoutError{Limit: w.lim.timeout})
		return
	}
	if w.lim.heartbeat > 0 {
		if silent, beats := w.silence(now); silent >= w.lim.heartbeat {
			w.expireLocked(&TimeoutError{Heartbeat: true, Limit: w.lim.heartbeat, Silent: silent, Beats: beats})
			return
		}
	}
	dl.timer.Reset(w.next(now))
}

func (w *jobWatch) expireLocked(cause error) {
	dl := w.dl
	dl.stopped = true
	dl.cause = cause
	dl.ctx.cancelJob(cause)
	close(dl.expired)
}

// stop ends the watch when the job is done.
func (w *jobWatch) stop() {
	dl := w.dl
	if dl == nil {
		return // no timer
	}
	dl.mu.Lock()
	defer dl.mu.Unlock()
	dl.stopped = true
	if dl.timer != nil {
		dl.timer.Stop()
	}
}

// expiredCause returns the limit error when the job missed a deadline.
func (w *jobWatch) expiredCause() error {
	dl := w.dl
	if dl == nil {
		return nil
	}
	select {
	case <-dl.expired:
		return dl.cause
	default:
		return nil
	}
}
