package sidekiq

import (
	"context"
	"errors"
	"time"

	"github.com/gojob/gojob/internal/callers"
	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/fetchedjob"
	"github.com/gojob/gojob/internal/monoclock"
	"github.com/gojob/gojob/sidekiq/internal/fetch"
	"github.com/gojob/gojob/sidekiq/internal/maintenance"
	"github.com/gojob/gojob/sidekiq/internal/redisx"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// process runs one fetched job to completion: take, run, finish.
// It returns how long the job ran in real time (the fetch paces its
// fetching ahead by it): the duration finish measured on the system
// clock, without another reading; on a test's clock, a reading of the
// system clock's own.
func (p *processor) process(slot int, u fetch.Unit) time.Duration {
	var realStart time.Time
	if !monoclock.IsSystem(p.cfg.Clock) {
		realStart = time.Now()
	}
	if !p.caps.enter(u.Queue) {
		// Its queue runs its cap (queue_concurrency.go): back to the pop
		// end of the queue, not started, as a job of a paused queue.
		p.fetcher.Requeue([]fetch.Unit{u})
		return 0
	}
	defer p.caps.leave(u.Queue)
	w := p.take(slot, u)
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
func (p *processor) take(slot int, u fetch.Unit) *workItem {
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
	w := &workItem{unit: u, slot: int32(slot)}
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
		err = fetchedjob.ParseInto(job, u.Raw)
	}
	if err != nil {
		// Unparsable: to the dead set unchanged, no stats (docs/sidekiq-wire.md#unparsable-payloads).
		p.log.Error().Err(err).Str("component", "processor").Str("queue", u.Queue).
			Msg("unparsable job payload moved to the dead set unchanged")
		p.fetcher.Finish(u, &fetch.Outcome{Set: contract.KeyDead, At: p.cfg.Clock.Now(), Payload: u.Raw})
		p.observe(u.Queue, "", 0, err)
		return nil
	}
	w.runAt, w.job = monoclock.Stamp(p.cfg.Clock), job
	w.reg, _ = p.handlerFor(job)
	lim, limErr := p.limitsOf(job)
	if limErr != nil {
		lim = badLimits // run fails the job with limitsOf's error
	}
	// Not a child of hardCtx: 25 workers registering with one parent
	// contend for its lock on every job. The hard shutdown cancels the
	// running jobs' contexts itself (cancelRunning), after abandonRunning
	// has made sure no job starts any more.
	w.ctx.base, w.ctx.w = p.jobBase, &w.watch
	w.watch.quiet = p.quiet
	w.watch.start(lim, &w.ctx)
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
		w.ctx.end()
		p.fetcher.Requeue([]fetch.Unit{u})
		return nil
	}
	p.slots[slot].work.Store(w)
	p.workMu.RUnlock()
	p.slots[slot].started.Add(1)
	return w
}

// leave frees a slot.
func (p *processor) leave(slot int) {
	p.slots[slot].work.Store(nil)
}

// run runs a taken job through the extensions, the middleware and its
// handler, within its deadlines, and returns its outcome.
func (p *processor) run(w *workItem) error {
	job := w.job
	setProviderJobID(job)
	if uniqueUntilStart(job) {
		p.releaseUnique(job)
	}
	var err error
	if w.watch.lim == badLimits {
		_, err = p.limitsOf(job) // not run: a limit that is not a number of seconds
	} else {
		err = p.execute(&w.ctx, w)
	}
	if f := w.outcome.Swap(&ranOutcome); f != nil {
		err = (*f)(err)
	}
	w.watch.stop()
	w.ctx.end()
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
	if !errors.As(err, &te) {
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
	took = monoclock.Since(p.cfg.Clock, w.runAt)
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
		p.metrics.Record(int(w.slot), w.class, took, err != nil && !isOverLimit(err) && !snoozed && !interrupted)
	}
	switch {
	case err == nil:
		p.counters.Add(int(w.slot), 1, 0)
		p.ack(w)
		if !uniqueUntilStart(job) {
			p.releaseUnique(job)
		}
	case p.rescheduleOverLimit(u, job, err), p.snooze(u, job, err):
		p.counters.Add(int(w.slot), 1, 0)
	case interrupted:
		// As Sidekiq's InterruptHandler: processed and failed, not retried.
		p.counters.Add(int(w.slot), 1, 1)
		p.fetcher.Requeue([]fetch.Unit{u})
		p.log.Debug().Str("component", "processor").Str("queue", u.Queue).Str("jid", job.JID()).Str("class", job.Class()).
			Msg("job interrupted; back to its queue to resume")
	default:
		p.counters.Add(int(w.slot), 1, 1)
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

// limitsOf reads the job's limits: "timeout" (else the server's
// JobTimeout) and "heartbeat_timeout". A value that is not a positive
// number fails the job with an ArgumentError, before it runs.
func (p *processor) limitsOf(job *wire.Job) (jobLimits, error) {
	t, err := contract.Timeout(job)
	if err != nil {
		return jobLimits{}, WithErrorClass("ArgumentError", err)
	}
	if t == 0 {
		t = p.cfg.JobTimeout
	}
	hb, err := contract.HeartbeatTimeout(job)
	if err != nil {
		return jobLimits{}, WithErrorClass("ArgumentError", err)
	}
	return jobLimits{timeout: t, heartbeat: hb}, nil
}

// perform runs a handler. A job with limits runs in a goroutine of its own
// so that the slot can give it up: after a missed deadline the handler has
// CancelGrace to return; then it is left running, the incident is logged,
// and perform returns the limit's error, which the caller's middleware and
// the retry path see as the job's failure. What the handler returns later
// is logged and discarded: the slot has written the job's outcome (and, with
// reliable fetch, taken it out of the in-progress list) exactly once.
func (p *processor) perform(ctx context.Context, job *wire.Job, reg *registration) error {
	w, _ := ctx.Value(watchKey{}).(*jobWatch)
	if w == nil || w.dl == nil { // no limits
		return reg.h.Perform(ctx, job)
	}
	dl := w.dl
	done := make(chan error, 1)
	go func() {
		var err error
		defer func() {
			if p := recover(); p != nil {
				err = &PanicError{Value: p, Stack: callers.Stack(3)}
			}
			done <- err
		}()
		err = reg.h.Perform(ctx, job)
	}()
	select {
	case err := <-done:
		return err
	case <-dl.expired:
	}
	grace := time.NewTimer(p.cfg.CancelGrace)
	defer grace.Stop()
	select {
	case err := <-done:
		return err // the caller replaces it with the limit's error
	case <-grace.C:
	}
	cause := leftRunning(dl.cause, p.cfg.CancelGrace)
	n := p.leftBehind.Add(1)
	p.log.Error().Str("component", "processor").Str("jid", job.JID()).Str("class", job.Class()).
		Str("grace", redisx.LogDuration(p.cfg.CancelGrace)).Int64("left_running", n).Str("cause", dl.cause.Error()).
		Msg("a cancelled handler did not return: its slot is freed and the job goes to the retry path; the handler goroutine is left running")
	jid, class := job.JID(), job.Class()
	go func() {
		err := <-done
		left := p.leftBehind.Add(-1)
		ev := p.log.Warn().Str("component", "processor").Str("jid", jid).Str("class", class).
			Str("after", redisx.LogDuration(time.Since(dl.begin))).Int64("left_running", left)
		if err != nil {
			ev = ev.Str("error", err.Error())
		}
		ev.Msg("a handler left running after its cancellation returned; its outcome is discarded (the job had already failed)")
	}()
	return cause
}
