package sidekiq

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/gojob/gojob/clock"
	"github.com/gojob/gojob/internal/callers"
	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq/internal/fetch"
	"github.com/gojob/gojob/sidekiq/internal/maintenance"
	"github.com/gojob/gojob/sidekiq/internal/redisx"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// processor runs the jobs the fetch hands to its slots: it takes a job
// (parsed, given its slot and deadlines), runs it through the extensions,
// the middleware and its handler, and finishes it (acknowledgement,
// retry, dead set, metrics). The order is Sidekiq's
// (docs/sidekiq-wire.md#processing-order).
type processor struct {
	cfg      *ServerConfig
	log      *zerolog.Logger
	identity string
	format   *contract.LiveFormat
	order    *fetch.Order
	// fetcher is the server's fetch, set by Start before any job runs.
	fetcher fetch.Fetcher
	writes  *redisx.Retrier
	// hardCtx ends at the hard shutdown (death handlers and hooks get it);
	// jobBase is its values without its cancellation: the parent of every
	// job's context.
	hardCtx context.Context
	jobBase context.Context

	// quiet is closed when the server stops taking jobs (Stopping).
	quiet <-chan struct{}

	handlers map[string]*registration
	mw       []ServerMiddleware
	// The extensions' hooks (extension.go), in the order they were added.
	prepares  []prepareHook
	runs      []runHook
	deaths    []DeathHook
	observers []JobObserver

	work []atomic.Pointer[workItem] // by slot: the job it runs, or nil
	// workMu orders starting a job against the hard shutdown's sweep of
	// the running jobs: a job is either seen by the sweep or, once
	// abandoning is set, pushed back instead of started.
	workMu     sync.RWMutex
	abandoning bool
	busy       atomic.Int64
	started    atomic.Int64
	// leftBehind counts the handlers still running after their job was
	// cancelled for a missed deadline and given up (deadlines.go).
	leftBehind atomic.Int64
	// held counts successful jobs whose acknowledgement an extension holds
	// back (Run.HoldAck).
	held     sync.WaitGroup
	counters maintenance.Counters    // processed and failed, not yet flushed
	metrics  *maintenance.JobMetrics // job metrics, written by 7.0+ formats
	caps     *queueCaps              // ServerConfig.QueueConcurrency; nil: none
}

// workItem is one running job, shown in the work hash of the heartbeat.
type workItem struct {
	// unit is the job as fetched: its queue, its bytes, and where the
	// fetch keeps it; tid is its slot's thread id.
	unit  fetch.Unit
	tid   string
	runAt time.Time
	state atomic.Int32 // workRunning, workFinished, workAbandoned
	job   *wire.Job
	reg   *registration // nil when no handler takes the class
	// limErr fails the job before it runs: its limits are not numbers.
	limErr error
	// class is the job's metrics class (`wrapped || class`), or "" when no
	// metrics are kept for it (a 6.x format, or no handler).
	class string
	// watch follows its heartbeats and deadlines, and ctx is the job's
	// context (deadlines.go); cancel ends it (a missed deadline, the end of
	// the job, or the hard shutdown through cancelRunning).
	watch  jobWatch
	ctx    jobCtx
	cancel context.CancelCauseFunc
	// gate is where an extension may hold back the acknowledgement of a
	// success (Run.HoldAck); reliable fetches only. It is made by the
	// first HoldAck: most jobs never need one, and a work item is
	// allocated per job.
	gate atomic.Pointer[ackGate]
	// outcome is what Server.CancelRunning asked to make of the job's
	// result; run swaps in ranOutcome when it reads it (cancel_running.go).
	outcome atomic.Pointer[outcomeFunc]
	// run is the job as the first extension sees it.
	run Run
	// parsed holds job when the processor parsed it (not fetched ahead).
	parsed wire.Job
}

const (
	workRunning int32 = iota
	workFinished
	workAbandoned
)

// abandon marks a running job as given up at hard shutdown; it reports
// false when the job had already finished.
func (w *workItem) abandon() bool { return w.state.CompareAndSwap(workRunning, workAbandoned) }

// finish marks a job finished; it reports false when shutdown abandoned
// (and requeued) it first.
func (w *workItem) finish() bool { return w.state.CompareAndSwap(workRunning, workFinished) }

// process runs one fetched job to completion: take, run, finish.
// It returns how long the job ran in real time (the fetch paces its
// fetching ahead by it): the duration finish measured on the system
// clock, without another reading; on a test's clock, a reading of the
// system clock's own.
func (p *processor) process(slot int, tid string, u fetch.Unit) time.Duration {
	var realStart time.Time
	if !clock.IsSystem(p.cfg.Clock) {
		realStart = time.Now()
	}
	if !p.caps.enter(u.Queue) {
		// Its queue runs its cap (queue_concurrency.go): back to the pop
		// end of the queue, not started, as a job of a paused queue.
		p.fetcher.Requeue([]fetch.Unit{u})
		return 0
	}
	defer p.caps.leave(u.Queue)
	w := p.take(slot, tid, u)
	if w == nil {
		return 0
	}
	defer p.leave(slot)
	err := p.run(w)
	took := p.finish(w, err)
	if !realStart.IsZero() {
		return time.Since(realStart)
	}
	return took
}

// take parses a fetched job and gives it its slot. It returns nil for a
// job that does not run here: popped from a queue paused meanwhile or
// fetched while the hard shutdown began (both go back to their queue), or
// unparsable (to the dead set unchanged).
func (p *processor) take(slot int, tid string, u fetch.Unit) *workItem {
	if p.order.Paused(u.Queue) && (p.caps == nil || p.order.PausedByRedis(u.Queue)) {
		// (A queue full of its own running jobs is skipped by the fetch as
		// a paused one; this job entered it: queue_concurrency.go.)
		// Popped by a fetch that was on its way when the queue was paused:
		// back to the pop end of its queue, not started.
		p.fetcher.Requeue([]fetch.Unit{u})
		return nil
	}
	// The fetch's reply is this job's own buffer, kept unchanged for its
	// acknowledgement: the job's strings can share it.
	w := &workItem{unit: u, tid: tid}
	var job *wire.Job
	var err error
	ahead, _ := u.Prepared.(*preparedAhead)
	switch parsed, _ := u.Prepared.(*wire.Job); {
	case ahead != nil:
		job = ahead.job // parsed when it was fetched ahead
	case parsed != nil:
		job = parsed
	default:
		job = &w.parsed // in the work item's allocation
		err = wire.ParseFetchedJobInto(job, u.Raw)
	}
	if err != nil {
		// Unparsable: to the dead set unchanged, no stats (docs/sidekiq-wire.md#unparsable-payloads).
		p.log.Error().Err(err).Str("component", "processor").Str("queue", u.Queue).
			Msg("unparsable job payload moved to the dead set unchanged")
		p.fetcher.Finish(u, &fetch.Outcome{Set: contract.KeyDead, At: p.cfg.Clock.Now(), Payload: u.Raw})
		p.observe(u.Queue, "", 0, err)
		return nil
	}
	w.runAt, w.job = clock.Stamp(p.cfg.Clock), job
	w.reg, _ = p.handlerFor(job)
	lim, limErr := p.limitsOf(job)
	w.limErr = limErr
	// Not a child of hardCtx: 25 workers registering with one parent
	// contend for its lock on every job. The hard shutdown cancels the
	// running jobs' contexts itself (cancelRunning), after abandonRunning
	// has made sure no job starts any more.
	cctx, cancel := context.WithCancelCause(p.jobBase)
	w.cancel = cancel
	w.watch.quiet = p.quiet
	w.watch.start(lim, cancel)
	w.ctx = jobCtx{Context: cctx, w: &w.watch}
	w.run = Run{Job: job, Identity: p.identity, p: p, w: w}
	if w.reg != nil && p.format.Version().AtLeast(7, 0, 0) {
		w.class = maintenance.MetricsClass(job)
	}
	p.workMu.RLock()
	if p.abandoning {
		// Fetched before the hard shutdown but not started: push it back
		// as the shutdown did with the running jobs.
		p.workMu.RUnlock()
		w.watch.stop()
		cancel(nil)
		p.fetcher.Requeue([]fetch.Unit{u})
		return nil
	}
	p.work[slot].Store(w)
	p.workMu.RUnlock()
	p.started.Add(1)
	p.busy.Add(1)
	return w
}

// leave frees a slot.
func (p *processor) leave(slot int) {
	p.work[slot].Store(nil)
	p.busy.Add(-1)
}

// run runs a taken job through the extensions, the middleware and its
// handler, within its deadlines, and returns its outcome.
func (p *processor) run(w *workItem) error {
	job := w.job
	setProviderJobID(job)
	if uniqueUntilStart(job) {
		p.releaseUnique(job)
	}
	err := w.limErr // not run: a limit that is not a number of seconds
	if err == nil {
		err = p.execute(&w.ctx, w)
	}
	if f := w.outcome.Swap(&ranOutcome); f != nil {
		err = (*f)(err)
	}
	w.watch.stop()
	w.cancel(nil)
	if cause := w.watch.expiredCause(); cause != nil {
		err = p.missedDeadline(w, err, cause)
	}
	return err
}

// missedDeadline is the failure of a job cancelled for a missed deadline,
// whatever the handler or middleware made of the cancellation
// (deadlines.go). A handler left running may still hold the job: the
// outcome is written from a fresh copy.
func (p *processor) missedDeadline(w *workItem, err, cause error) error {
	job := w.job
	var te *TimeoutError
	var he *HeartbeatTimeoutError
	if !errors.As(err, &te) && !errors.As(err, &he) {
		if err != nil {
			p.log.Debug().Str("component", "processor").Str("jid", job.JID()).Err(err).Msg("error of a cancelled job, replaced by its deadline's")
		}
		err = cause
	}
	p.log.Warn().Str("component", "processor").Str("jid", job.JID()).Str("class", job.Class()).Str("queue", w.unit.Queue).
		Str("error_class", ErrorClassOf(err)).Msg(err.Error())
	if fresh, perr := wire.ParseJob(w.unit.Raw); perr == nil {
		setProviderJobID(fresh)
		w.job = fresh
	}
	return err
}

// finish writes a job's outcome: its acknowledgement, an over-limit
// reschedule, or the retry path; then its metrics and observers. It
// returns how long the job ran.
func (p *processor) finish(w *workItem, err error) (took time.Duration) {
	took = clock.Since(p.cfg.Clock, w.runAt)
	if !w.finish() {
		// Hard shutdown requeued it while it ran; whatever happened is moot.
		return took
	}
	job, u := w.job, w.unit
	snoozed := err != nil && isSnooze(err)
	interrupted := err != nil && isInterrupt(err)
	if snoozed || interrupted {
		defer p.observe(u.Queue, job.Class(), took, nil)
	} else {
		defer p.observe(u.Queue, job.Class(), took, err)
	}
	if w.class != "" {
		var ol *OverLimitError
		p.metrics.Record(w.class, took, err != nil && !errors.As(err, &ol) && !snoozed && !interrupted)
	}
	switch {
	case err == nil:
		p.counters.Add(1, 0)
		p.ack(w)
		if !uniqueUntilStart(job) {
			p.releaseUnique(job)
		}
	case p.rescheduleOverLimit(u, job, err), p.snooze(u, job, err):
		p.counters.Add(1, 0)
	case interrupted:
		// As Sidekiq's InterruptHandler: processed and failed, not retried.
		p.counters.Add(1, 1)
		p.fetcher.Requeue([]fetch.Unit{u})
		p.log.Debug().Str("component", "processor").Str("queue", u.Queue).Str("jid", job.JID()).Str("class", job.Class()).
			Msg("job interrupted; back to its queue to resume")
	default:
		p.counters.Add(1, 1)
		p.handleFailure(u, job, w.reg, err)
	}
	return took
}

// ack acknowledges a success, now or, when an extension holds it back,
// once the extension releases it.
func (p *processor) ack(w *workItem) {
	u := w.unit
	g := w.gate.Load()
	if g == nil || !g.heldBack() {
		p.fetcher.Finish(u, nil)
		return
	}
	if d, ok := p.fetcher.(ackDeferrer); ok {
		u = d.Defer(u) // still held for the fetch's own-list sweep
	}
	p.held.Add(1)
	if !g.hold(p, u) {
		p.ackHeld([]fetch.Unit{u})
	}
}

// execute runs the extensions, the middleware chain and the handler,
// turning panics into *PanicError.
func (p *processor) execute(ctx context.Context, w *workItem) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r, Stack: callers.Stack(3)}
		}
	}()
	job, reg := w.job, w.reg
	if reg == nil {
		// Ruby fails in constantize before the server middleware runs.
		_, name := p.handlerFor(job)
		return &nameError{Class: name}
	}
	// The run hooks that concern this job: a bit each (at most 64 are
	// told apart; the rest run for every job).
	var hooks uint64
	for i, h := range p.runs {
		if i >= 64 || h.scope.covers(job) {
			hooks |= 1 << min(i, 63)
		}
	}
	if len(p.mw) == 0 && hooks == 0 {
		return p.perform(ctx, job, reg) // no chain to build
	}
	n, m := len(p.runs), len(p.mw)
	var call func(i int) func(context.Context) error
	call = func(i int) func(context.Context) error {
		return func(ctx context.Context) error {
			for i < n && i < 64 && hooks&(1<<i) == 0 {
				i++
			}
			switch {
			case i < n:
				return p.runs[i].hook.Run(ctx, w.runFor(p, i), call(i+1))
			case i < n+m:
				return p.mw[i-n](ctx, job, call(i+1))
			}
			return p.perform(ctx, job, reg)
		}
	}
	return call(0)(ctx)
}

// handlerFor finds the handler of a job: by class, and for ActiveJob
// payloads by the job class ActiveJob itself runs (args[0].job_class, else
// `wrapped`).
func (p *processor) handlerFor(job *wire.Job) (*registration, string) {
	class := job.Class()
	if r, ok := p.handlers[class]; ok {
		return r, class
	}
	if name := contract.ActiveJobClass(job); name != "" {
		return p.handlers[name], name
	}
	return nil, class
}

// setProviderJobID does what the ActiveJob wrapper does before it runs a
// job: job_data.merge("provider_job_id" => jid). Only the in-memory job the
// handler sees changes.
func setProviderJobID(job *wire.Job) {
	if !contract.IsActiveJob(job) {
		return
	}
	jid := job.JID()
	job.Map() // decoded (a fetched job's fields are read lazily) and marked changed
	if a := job.Args(); len(a) > 0 {
		if m, ok := a[0].Map(); ok {
			m.Set("provider_job_id", rubyjson.StringValue(jid))
		}
	}
}

// cancelRunning cancels the contexts of the running jobs, as cancelling
// hardCtx would cancel its children. Called at hard shutdown after
// abandonRunning, when no job can start any more.
func (p *processor) cancelRunning() {
	p.eachRunning(func(w *workItem) { w.cancel(nil) })
}

// abandonRunning marks every running job abandoned and returns them. From
// now on a fetched job is pushed back instead of started. Ruby counts a job
// killed at hard shutdown as processed and failed (Processor#stats' rescue
// and ensure run when Sidekiq::Shutdown is raised in the thread), so gojob
// counts them too.
func (p *processor) abandonRunning() []fetch.Unit {
	p.workMu.Lock()
	defer p.workMu.Unlock()
	p.abandoning = true
	var units []fetch.Unit
	p.eachRunning(func(w *workItem) {
		if w.abandon() {
			units = append(units, w.unit)
			if w.class != "" {
				// The metrics middleware sees Sidekiq::Shutdown too.
				p.metrics.Record(w.class, 0, true)
			}
		}
	})
	p.counters.Add(int64(len(units)), int64(len(units)))
	return units
}

// eachRunning calls f with each slot's running job.
func (p *processor) eachRunning(f func(w *workItem)) {
	for i := range p.work {
		if w := p.work[i].Load(); w != nil {
			f(w)
		}
	}
}

// runningWork lists the running jobs for the heartbeat's work hash.
func (p *processor) runningWork() []maintenance.Work {
	var out []maintenance.Work
	p.eachRunning(func(w *workItem) {
		out = append(out, maintenance.Work{TID: w.tid, Queue: w.unit.Queue, Raw: w.unit.Raw, RunAt: w.runAt,
			HeartbeatAt: w.watch.lastBeat()})
	})
	return out
}

// death calls the death handlers.
func (p *processor) death(job *wire.Job, err error) {
	for _, h := range p.cfg.DeathHandlers {
		func() {
			defer func() {
				if r := recover(); r != nil {
					p.log.Error().Interface("panic", r).Msg("death handler panicked")
				}
			}()
			h(p.hardCtx, job, err)
		}()
	}
	for _, h := range p.deaths {
		func() {
			defer func() {
				if r := recover(); r != nil {
					p.log.Error().Interface("panic", r).Msg("death hook panicked")
				}
			}()
			h.JobDied(p.hardCtx, job, err)
		}()
	}
}

// observe tells the observers about a finished job.
func (p *processor) observe(queue, class string, took time.Duration, err error) {
	for _, o := range p.observers {
		o.JobDone(queue, class, took, err)
	}
}
